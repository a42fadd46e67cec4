"""Routing of one hop, as a pure function: which destinations this partition samples, and one request
per remote partition for the rest (all edge types of the hop that go there share it).

A partition samples a destination locally when it holds all of its in-edges: the owned range, every
node in hybrid folders and in-memory graphs (which never route anything away), the owned ids (book
lookup) in folders written by PyG. The split itself is :func:`pyg_dist.store.routing.route_ids`;
replies come back grouped by seed and :func:`pyg_dist.store.routing.segment_pieces` restores the
frontier order, so the batch relabels exactly as a one-process sampler would.

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
from typing import Dict, List, Optional, Sequence

from torch import Tensor

from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.messages import HopTask, OneHopRequest
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


__all__ = ["HopPlan", "plan_hop"]
