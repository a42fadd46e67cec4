"""Routing of one hop, as a pure function: which destinations this partition samples, and one request
per remote partition for the rest (all edge types of the hop that go there share it).

A partition samples a destination locally when it holds all of its in-edges: the owned range, every
node in hybrid folders and in-memory graphs (which never route anything away), the owned ids (book
lookup) in folders written by PyG. The split itself is :func:`pyg_dist.store.routing.route_ids`;
replies come back grouped by seed and :func:`pyg_dist.store.routing.segment_pieces` restores the
frontier order, so the batch relabels exactly as a one-process sampler would. A request whose reply could
exceed ``$PYG_DIST_REPLY_MAX_MB`` goes out in pieces (:func:`split_request`) that merge back exactly.

Example:
    >>> import torch
    >>> from pyg_dist.format.book import PartitionBook
    >>> from pyg_dist.sampler.graph import SamplingGraph
    >>> book = PartitionBook({"_N": torch.tensor([0, 5, 10])})
    >>> et = ("_N", "_E", "_N")
    >>> g = SamplingGraph(0, ["_N"], [et], {"_N": 10}, {et: None}, {et: (0, 5)}, {et: (0, 5)}, {}, book)
    >>> plan = plan_hop([HopTask(et, torch.tensor([7, 1, 8, 2]), 3)], g, OneHopRequest(-1, ()))
    >>> plan.rows[0].tolist(), plan.routes[0].local_pos.tolist(), plan.requests[1].tasks[0].seeds.tolist()
    ([1, 2], [1, 3], [7, 8])
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from torch import Tensor

from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.messages import SAMPLE_BYTES, SEED_BYTES, HopTask, OneHopRequest
from pyg_dist.store.routing import Route, divert_remote, group_by_partition, route_ids


@dataclass(frozen=True)
class HopPlan:
    """The routing of one hop: a route per task, one request per remote partition.

    Attributes:
        routes: One :class:`~pyg_dist.store.routing.Route` per task (same order as the tasks).
        rows: Per task, the CSC rows (``id - dst_start``) of the seeds sampled here.
        requests: Remote partition -> the request it gets.
        slots: Remote partition -> the task index of each entry of its request's ``tasks``.
        cached: Per task, positions of remote-owned seeds whose in-edges the topology cache holds
            (sampled here; not in ``routes[i].remote``), or ``None``.
    """
    routes: List[Route]
    rows: List[Tensor]
    requests: Dict[int, OneHopRequest]
    slots: Dict[int, List[int]]
    cached: List[Optional[Tensor]]

    @property
    def num_cached_seeds(self) -> int:
        return sum(c.numel() for c in self.cached if c is not None)

    @property
    def num_remote_seeds(self) -> int:
        return sum(r.num_remote for r in self.routes) - self.num_cached_seeds

    @property
    def all_local(self) -> bool:
        """Every seed is sampled from the partition's own CSC (the fused kernel can run)."""
        return not self.requests and not self.num_cached_seeds


@dataclass(frozen=True)
class Piece:
    """One request of a split (:func:`split_request`): ``origin[j]`` is, for ``request.tasks[j]``, the index
    of the task it cuts in the whole request and the position there of its first seed."""
    request: OneHopRequest
    origin: Tuple[Tuple[int, int], ...]


def reply_bound(task: HopTask) -> Optional[int]:
    """The most bytes the reply to ``task`` may hold, as a requester knows it (``seeds x (fanout x``
    :data:`~.messages.SAMPLE_BYTES` ``+`` :data:`~.messages.SEED_BYTES` ``)``), or ``None`` for fanout ``-1``
    (only the owner knows the degrees)."""
    k = task.num_neighbors
    return None if k < 0 else task.seeds.numel() * (k * SAMPLE_BYTES + SEED_BYTES)


def split_request(req: OneHopRequest, limit: int) -> List[Piece]:
    """``req`` as requests whose replies hold at most ``limit`` bytes (``$PYG_DIST_REPLY_MAX_MB``), pure.

    A request within the limit stays whole (one piece). Otherwise each task goes alone, in runs of seeds
    that fit; a seed whose sample alone is over the limit goes alone, and with replacement in pieces of
    draws (``skip``): a seed's draws come from its own counter stream, so the pieces' samples, put back in
    order, are exactly the whole request's (numba kernels). A task of fanout ``-1`` is sent whole: the owner
    bounds it by the degrees and refuses it when it is over the limit (``ServingLimitError``); the requester
    then asks again in halves of its seeds (:mod:`.remote_hop`).

    Example:
        >>> import torch
        >>> req = OneHopRequest(1, (HopTask(("_N", "_E", "_N"), torch.tensor([4]), 10),), replace=True)
        >>> [(p.request.tasks[0].skip, p.request.tasks[0].num_neighbors) for p in split_request(req, 72)]
        [(0, 4), (4, 4), (8, 2)]
    """
    bounds = [reply_bound(t) for t in req.tasks]
    if all(b is not None for b in bounds) and sum(b for b in bounds if b is not None) <= limit:
        return [Piece(req, tuple((i, 0) for i in range(len(req.tasks))))]
    return [Piece(dataclasses.replace(req, tasks=(part,)), ((i, first),))
            for i, task in enumerate(req.tasks) for part, first in _split_task(req, task, limit)]


def _split_task(req: OneHopRequest, task: HopTask, limit: int) -> Iterator[Tuple[HopTask, int]]:
    """``task`` in parts within ``limit`` (as :func:`split_request` says), each with its first seed's position."""
    k, n = task.num_neighbors, task.seeds.numel()
    per_seed = k * SAMPLE_BYTES + SEED_BYTES
    if k < 0 or n * per_seed <= limit:
        yield task, 0
    elif per_seed <= limit or not task.draws_split(req.replace, req.temporal_strategy):
        step = max(1, limit // per_seed)
        for a in range(0, n, step):
            yield task.span(a, a + step), a
    else:
        draws = max(1, (limit - SEED_BYTES) // SAMPLE_BYTES)
        for a in range(n):
            one = task.span(a, a + 1)
            for first in range(0, k, draws):
                yield dataclasses.replace(one, num_neighbors=min(draws, k - first), skip=task.skip + first), a


def _route(graph: SamplingGraph, task: HopTask) -> Route:
    et = task.edge_type
    if graph.is_whole:
        return Route(task.seeds.numel(), None, task.seeds)
    return route_ids(graph.book, graph.partition, et[2], task.seeds, local_range=graph.local_range[et])


def _csc_rows(graph: SamplingGraph, task: HopTask, route: Route) -> Tensor:
    """The CSC rows of the seeds sampled here (routes by range already give ``id - start``)."""
    et = task.edge_type
    if graph.local_range[et] is not None:
        return route.local_rows
    ids = task.seeds if route.local_pos is None else task.seeds.index_select(0, route.local_pos)
    return ids - graph.dst_range[et][0]


def _held(mask: Tensor, seeds: Tensor, pos: Tensor) -> Tensor:
    """Whether the topology cache holds the seeds at ``pos``."""
    return mask.index_select(0, seeds.index_select(0, pos))


def plan_hop(tasks: Sequence[HopTask], graph: SamplingGraph, template: OneHopRequest) -> HopPlan:
    """Routes every task of a hop and groups the remote seeds into one request per partition (pure).

    Args:
        tasks: The hop's tasks (one per edge type with a frontier); ``seeds`` are global ids.
        graph: This partition's sampling view.
        template: Request options (``replace``, ``temporal_strategy``, ...) copied into each request.
    """
    routes = [_route(graph, t) for t in tasks]
    cached: List[Optional[Tensor]] = [None] * len(routes)
    if graph.topo and not template.weighted and template.time_level is None:  # the cache holds plain edges
        for i, t in enumerate(tasks):
            if routes[i].remote and t.edge_type in graph.topo:
                held = functools.partial(_held, graph.topo[t.edge_type][1], t.seeds)
                routes[i], cached[i] = divert_remote(routes[i], held)
    shares, slots = group_by_partition(routes, lambda i, pos: tasks[i].subset(pos))
    requests = {p: dataclasses.replace(template, partition=p, tasks=tuple(ts)) for p, ts in shares.items()}
    return HopPlan(routes, [_csc_rows(graph, t, r) for t, r in zip(tasks, routes)], requests, slots, cached)


__all__ = ["HopPlan", "plan_hop", "Piece", "reply_bound", "split_request"]
