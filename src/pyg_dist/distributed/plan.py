"""Routing of one hop, as pure functions: split typed frontiers by owner, merge replies in input order.

A partition samples a destination locally when it holds all of its in-edges: the owned range, every
node in hybrid folders (which therefore never route anything away), the owned ids (book lookup) in
folders written by PyG. The other
destinations go to their owner (through the partition book, the only translator of ids); all edge
types of one hop that go to the same partition share ONE :class:`~pyg_dist.distributed.messages.
OneHopRequest`. Replies come back grouped by seed; :func:`merge_one_hop` restores the frontier order,
so the batch relabels exactly as a one-process sampler would.

Example:
    >>> import torch
    >>> route = route_frontier(torch.tensor([7, 1, 8, 2]), (0, 5), lambda ids: ids // 5)
    >>> route.local_pos.tolist(), route.local_ids.tolist(), {p: v.tolist() for p, v in route.remote.items()}
    ([1, 3], [1, 2], {1: [0, 2]})
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.distributed.messages import HopTask, OneHopRequest
from pyg_dist.errors import PyGDistError
from pyg_dist.ops import OneHop
from pyg_dist.ops.rows import scatter_segments


@dataclass(frozen=True)
class FrontierRoute:
    """Where the seeds of one task are sampled.

    Attributes:
        size: Number of seeds.
        local_pos: Positions sampled here (ascending), or ``None`` when all of them are (fast path).
        local_ids: Their global ids.
        remote: Owner partition -> positions it samples (ascending).
    """
    size: int
    local_pos: Optional[Tensor]
    local_ids: Tensor
    remote: Dict[int, Tensor]

    @property
    def num_local(self) -> int:
        return self.local_ids.numel()


def route_frontier(ids: Tensor, local_range: Optional[Tuple[int, int]], owner: Callable[[Tensor], Tensor],
                   partition: int = -1) -> FrontierRoute:
    """Splits global destination ids into the ones sampled here and, per owner, the remote ones.

    Args:
        ids: 1-D int64 global ids of the destination type.
        local_range: ``(start, end)``: the destinations whose in-edges this partition holds entirely
            (its owned range; every node in hybrid folders); ``None`` when that is not a range
            (PyG-written folders): then the owner decides.
        owner: Owning partition of global ids (the partition book's ``owner`` for the type).
        partition: This partition (used when ``local_range`` is ``None``).
    """
    n = ids.numel()
    if n == 0:
        return FrontierRoute(0, None, ids, {})
    if local_range is None:
        own = owner(ids)
        here = own == partition
    else:
        start, end = local_range
        arr = ids.numpy()
        if start <= int(arr.min()) and int(arr.max()) < end:
            return FrontierRoute(n, None, ids, {})
        here, own = (ids >= start) & (ids < end), None
    if bool(here.all()):
        return FrontierRoute(n, None, ids, {})
    local_pos = here.nonzero().view(-1)
    rest = (~here).nonzero().view(-1)
    rest_owner = owner(ids.index_select(0, rest)) if own is None else own.index_select(0, rest)
    order = torch.sort(rest_owner, stable=True).indices
    rest, rest_owner = rest.index_select(0, order), rest_owner.index_select(0, order)
    parts, counts = torch.unique_consecutive(rest_owner, return_counts=True)
    remote = {int(p): pos for p, pos in zip(parts.tolist(), torch.split(rest, counts.tolist()))}
    return FrontierRoute(n, local_pos, ids.index_select(0, local_pos), remote)


@dataclass(frozen=True)
class HopPlan:
    """The routing of one hop: a route per task, one request per remote partition.

    Attributes:
        routes: One :class:`FrontierRoute` per task (same order as the tasks).
        requests: Remote partition -> the request it gets.
        slots: Remote partition -> the task index of each entry of its request's ``tasks``.
    """
    routes: List[FrontierRoute]
    requests: Dict[int, OneHopRequest]
    slots: Dict[int, List[int]]

    @property
    def num_remote_seeds(self) -> int:
        return sum(r.size - r.num_local for r in self.routes)


def plan_hop(tasks: Sequence[HopTask], local_ranges: Sequence[Optional[Tuple[int, int]]],
             owners: Sequence[Callable[[Tensor], Tensor]], template: OneHopRequest, partition: int = -1) -> HopPlan:
    """Routes every task of a hop and groups the remote seeds into one request per partition (pure).

    Args:
        tasks: The hop's tasks (one per edge type with a frontier); ``seeds`` are global ids.
        local_ranges: Per task, the ``local_range`` of :func:`route_frontier` for its edge type.
        owners: Per task, the owner function of its destination type.
        template: Request options (``replace``, ``temporal_strategy``, ...) copied into each request.
        partition: This partition.
    """
    routes = [route_frontier(t.seeds, r, o, partition) for t, r, o in zip(tasks, local_ranges, owners)]
    requests: Dict[int, OneHopRequest] = {}
    slots: Dict[int, List[int]] = {}
    for ti, (task, route) in enumerate(zip(tasks, routes)):
        for p, pos in route.remote.items():
            if p not in requests:
                requests[p] = dataclasses.replace(template, partition=p, tasks=[])
                slots[p] = []
            time = None if task.seed_time is None else task.seed_time.index_select(0, pos)
            requests[p].tasks.append(HopTask(task.edge_type, task.seeds.index_select(0, pos),
                                             task.num_neighbors, time))
            slots[p].append(ti)
    return HopPlan(routes, requests, slots)


def merge_one_hop(route: FrontierRoute, local: OneHop, remote: Dict[int, OneHop]) -> OneHop:
    """The task's result in frontier order, from the local part and the per-partition parts.

    Each part is grouped by seed in its own seed order (the positions of ``route``). Raises
    :class:`PyGDistError` when a part does not match its seeds (the processes disagree about the folder).
    """
    if not route.remote:
        return local
    pieces = [(route.local_pos, local)] + [(route.remote[p], remote[p]) for p in sorted(route.remote)]
    for pos, part in pieces:
        if part.count.numel() != pos.numel() or int(part.count.sum()) != part.nbr.numel():
            raise PyGDistError(f"one-hop reply with {part.count.numel()} counts and {part.nbr.numel()} "
                               f"neighbours for {pos.numel()} seeds")
    pos = torch.cat([p for p, _ in pieces])
    counts = torch.cat([h.count.to(torch.int64) for _, h in pieces])
    nbr = torch.cat([h.nbr for _, h in pieces])
    edge = torch.cat([h.edge for _, h in pieces])
    return OneHop(*scatter_segments(pos, counts, nbr, edge))


__all__ = ["FrontierRoute", "route_frontier", "HopPlan", "plan_hop", "merge_one_hop"]
