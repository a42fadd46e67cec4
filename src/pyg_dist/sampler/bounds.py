"""What a one-hop reply may hold, known before sampling: the owner's side of bounded one-hop serving.

A reply holds :data:`~.messages.SAMPLE_BYTES` per sampled edge and :data:`~.messages.SEED_BYTES` per seed.
Before sampling, the owner bounds each seed's samples by its fanout ``k`` with replacement (``k`` draws when
it has an allowed in-edge), and by ``min(k, degree)`` without replacement, with temporal strategy ``'last'``
or with ``k = -1`` (every in-edge). A request whose bound is over ``$PYG_DIST_REPLY_MAX_MB`` is refused
(:class:`~pyg_dist.errors.ServingLimitError`) unless it cannot be split any further: one seed whose sample
cannot be taken in pieces of draws (at most its in-edges), or a single draw. Requesters split by the same
setting (:func:`~.plan.split_request`), so a legitimate request with a fanout is never refused; one of
fanout ``-1`` that is refused is asked again in halves of its seeds (:mod:`.remote_hop`).

Example:
    >>> import torch
    >>> from pyg_dist.format import PartitionBook
    >>> from pyg_dist.ops import CSC
    >>> from pyg_dist.sampler.graph import SamplingGraph
    >>> from pyg_dist.sampler.messages import HopTask, OneHopRequest
    >>> et = ("_N", "_E", "_N")
    >>> csc = CSC.from_edge_index(torch.tensor([[1, 2, 3], [0, 0, 1]]), num_dst=4)
    >>> g = SamplingGraph(0, ["_N"], [et], {"_N": 4}, {et: csc}, {et: (0, 4)}, {et: (0, 4)}, {},
    ...                   PartitionBook({"_N": torch.tensor([0, 4])}))
    >>> req = OneHopRequest(0, (HopTask(et, torch.tensor([0, 1, 3]), 5),))
    >>> owner_bound(g, req, [req.tasks[0].seeds])  # 2 + 1 + 0 edges, 3 seeds
    72
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError
from pyg_dist.ops import OneHop
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.messages import SAMPLE_BYTES, SEED_BYTES, HopTask, OneHopReply, OneHopRequest
from pyg_dist.store.buffers import BufferPool
from pyg_dist.store.limits import mib, refuse_reply, reply_max_bytes


def check_task(part: int, req: OneHopRequest, task: HopTask) -> None:
    """A peer's task before anything indexes with it: 1-D int64 seeds, an int fanout >= -1, an int ``skip``
    >= 0 that is 0 unless the task samples in pieces of draws; else :class:`PyGDistError` naming ``part``."""
    seeds, k, skip = getattr(task, "seeds", None), getattr(task, "num_neighbors", None), getattr(task, "skip", None)
    problem = None
    if not isinstance(task, HopTask) or not isinstance(seeds, Tensor) or seeds.dim() != 1 or seeds.dtype != torch.int64:
        problem = f"a task that is no HopTask of 1-D int64 seeds ({type(task).__name__})"
    elif not isinstance(k, int) or isinstance(k, bool) or k < -1:
        problem = f"fanout {k!r} (an int >= -1)"
    elif not isinstance(skip, int) or isinstance(skip, bool) or skip < 0 or \
            (skip and not task.draws_split(req.replace, req.temporal_strategy)):
        problem = f"skip {skip!r} (an int >= 0; > 0 only with replacement and a strategy other than 'last')"
    if problem is not None:
        raise PyGDistError(f"partition {part} got a one-hop request with {problem} (do all processes run the "
                           "same pyg_dist?)")


def owner_bound(graph: SamplingGraph, req: OneHopRequest, rows: Sequence[Tensor]) -> int:
    """The most bytes the reply to ``req`` may hold (``rows``: each task's CSC rows, held here); raises
    :class:`~pyg_dist.errors.ServingLimitError` when it is over ``$PYG_DIST_REPLY_MAX_MB`` and the request
    could have been split (more than one seed, or one seed's draws in pieces). The tasks were checked
    (:func:`check_task`)."""
    samples: List[int] = []
    splittable = False
    for task, r in zip(req.tasks, rows):
        samples.append(_task_samples(graph, req, task, r))
        splittable = splittable or task.draws_split(req.replace, req.temporal_strategy)
    seeds, total = sum(t.seeds.numel() for t in req.tasks), sum(samples)
    nbytes = total * SAMPLE_BYTES + seeds * SEED_BYTES
    limit = reply_max_bytes()
    if nbytes > limit and (seeds > 1 or (splittable and total > 1)):
        refuse_reply(graph.partition, f"a one-hop reply of up to {mib(nbytes)} ({seeds} seeds, {total} sampled "
                     f"edges at most, fanouts {[t.num_neighbors for t in req.tasks]}, replace={req.replace})", limit)
    return nbytes


def _task_samples(graph: SamplingGraph, req: OneHopRequest, task: HopTask, rows: Tensor) -> int:
    """The most edges ``task`` samples: per seed ``k`` draws with replacement (one allowed in-edge or more),
    else at most ``min(k, degree)`` (``degree`` for ``k = -1``)."""
    if not rows.numel():
        return 0
    colptr = graph.csc[task.edge_type].colptr.numpy()
    r = rows.numpy()
    if int(r.min()) < 0 or int(r.max()) + 1 >= colptr.shape[0]:
        raise PyGDistError(f"partition {graph.partition} got one-hop seeds outside its CSC of {task.edge_type!r}")
    deg = colptr[r + 1] - colptr[r]
    k = task.num_neighbors
    temporal = task.seed_time is not None and graph.is_temporal_type(task.edge_type, req.time_level)
    if k >= 0 and req.replace and not (temporal and req.temporal_strategy == "last"):
        return k * int((deg > 0).sum())
    return int(deg.sum()) if k < 0 else int(deg.clip(max=k).sum())


def pooled(pool: Optional[BufferPool]) -> Optional[Callable[[int], np.ndarray]]:
    """The kernels' allocator on ``pool`` (int64 arrays on recycled storages), or ``None`` (``np.empty``)."""
    if pool is None:
        return None
    return lambda n: pool.empty((n,), torch.int64).numpy()


def as_sent(reply: OneHopReply, pool: Optional[BufferPool]) -> OneHopReply:
    """``reply`` as the wire sends it (:mod:`pyg_dist.rpc.wire`: each int64 tensor of at least ``MIN_NUMEL``
    entries that fits in int32 as an ``Int32``), narrowed into ``pool``'s buffers: what stays alive while
    the transport sends is what the budget's hold follows, and it lives outside the C heap."""
    from pyg_dist.rpc import wire

    def narrow(t: Tensor) -> Any:
        if t.numel() < wire.MIN_NUMEL:
            return t
        arr = t.numpy()
        if int(arr.min()) < -2 ** 31 or int(arr.max()) >= 2 ** 31:
            return t
        out = torch.empty(t.numel(), dtype=torch.int32) if pool is None else pool.empty((t.numel(),), torch.int32)
        out.copy_(t)
        return wire.Int32(out)
    return OneHopReply(reply.partition, tuple(OneHop(narrow(r.nbr), narrow(r.edge), narrow(r.count))
                                              for r in reply.results))


__all__ = ["check_task", "owner_bound", "pooled", "as_sent"]
