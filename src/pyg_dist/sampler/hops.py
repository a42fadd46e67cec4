"""The K-hop loop, written once for every sampler, and the one-hop service a partition offers its peers.

:func:`sample_hops` runs the hops of one batch over a :class:`~pyg_dist.sampler.graph.SamplingGraph`:
the frontier of node type ``t`` at hop ``h`` is the nodes of ``t`` first seen at hop ``h - 1`` (the
seeds at hop 0); nodes found through one edge type within a hop are not expanded by another edge type in
the same hop. Homogeneous and heterogeneous graphs run the same loop (one node and one edge type).

One hop (:func:`_run_hop`): plan (pure, :mod:`.plan`); when every destination is sampled here (an
in-memory graph, a hybrid folder, a frontier inside the owned range) the fused kernel samples and
relabels straight into the batch's edge buffers; otherwise one request per remote partition is issued
first (split into pieces whose replies fit ``$PYG_DIST_REPLY_MAX_MB``: :func:`~.plan.split_request`), the
local share sampled meanwhile, the replies awaited, merged back (:mod:`.remote_hop`) and put in frontier
order. The owner bounds what it serves (:func:`serve_one_hop`, :mod:`.bounds`). The loop is
a coroutine: a one-machine sampler drives it to completion without an event loop (nothing awaits),
a distributed one awaits its RPCs on pyg_dist's loop.

Randomness: the batch's ``key`` gives every hop and edge type its own key (:func:`pyg_dist.ops.keys.mix`),
sent along with remote tasks; the kernel draws seed ``v``'s neighbours from the stream of ``(key, v)``.
"""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import PyGDistError
from pyg_dist.ops import OneHop, make_edge_buffer, make_relabeler, one_hop, sample_hop
from pyg_dist.ops.keys import mix
from pyg_dist.sampler.bounds import as_sent, check_task, owner_bound, pooled
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.messages import HopTask, OneHopReply, OneHopRequest
from pyg_dist.sampler.output import TypedSample
from pyg_dist.sampler.plan import HopPlan, plan_hop
from pyg_dist.sampler.remote_hop import Issued, check_reply, collect, issue, merge_replies
from pyg_dist.sampler.timing import timed
from pyg_dist.store.buffers import BufferPool
from pyg_dist.store.limits import ByteBudget, reply_max_bytes, serve_budget_bytes, wait_bound
from pyg_dist.store.routing import segment_pieces

if TYPE_CHECKING:
    from pyg_dist.ops._torch_kernels import TorchRelabeler
    from pyg_dist.ops.hop import EdgeBuffer, TensorBuffer
    from pyg_dist.ops.relabel import NumbaRelabeler


@dataclass(frozen=True)
class HopOptions:
    """Validated sampling options (``backend`` resolved to ``'numba'`` or ``'torch'``)."""
    fanouts: Dict[EdgeType, List[int]]
    num_hops: int
    replace: bool = False
    disjoint: bool = False
    temporal_strategy: str = "uniform"
    time_level: Optional[str] = None
    weighted: bool = False
    backend: str = "torch"
    timeout: float = 60.0
    pools: Dict[NodeType, list] = field(default_factory=dict)

    def request_template(self) -> OneHopRequest:
        """A :class:`OneHopRequest` with these options and no tasks (partition and tasks filled in per hop)."""
        return OneHopRequest(-1, (), self.replace, self.temporal_strategy, self.time_level, self.weighted)


# --------------------------------------------------------------------------------- one task, here
def sample_task(graph: SamplingGraph, task: HopTask, req: OneHopRequest, rows: Tensor, seed_time: Optional[Tensor],
                batch: Optional[Tensor], backend: str = "auto", alloc=None) -> OneHop:
    """Samples CSC ``rows`` (seeds held here) of one task with the unfused kernel (from draw ``task.skip``)."""
    et = task.edge_type
    temporal = seed_time is not None and graph.is_temporal_type(et, req.time_level)
    node_time = graph.node_time.get(et[0]) if temporal and req.time_level == "node" else None
    return one_hop(graph.sampling_csc(et, req.weighted, req.time_level), rows, task.num_neighbors,
                   replace=req.replace, node_time=node_time, seed_time=seed_time if temporal else None,
                   temporal_strategy=req.temporal_strategy, backend=backend, key=task.key,
                   id_offset=graph.dst_range[et][0], seed_batch=batch, skip=task.skip, alloc=alloc)


def serve_one_hop(graph: SamplingGraph, req: OneHopRequest, budget: Optional[ByteBudget] = None,
                  pool: Optional[BufferPool] = None) -> OneHopReply:
    """Answers a peer's :class:`OneHopRequest` (runs on an RPC thread of the serving process), bounded like
    a lookup (:mod:`pyg_dist.store.limits`): the reply's size is bounded before sampling
    (:func:`~.bounds.owner_bound`); over ``$PYG_DIST_REPLY_MAX_MB`` the request is refused unless it is one
    seed's sample without replacement or a single draw; the bound waits for room under
    ``$PYG_DIST_SERVE_BUDGET_MB`` in ``budget`` (the serving store's, shared with lookups) and counts until
    the RPC layer has sent the reply. With a budget the reply is returned as the wire sends it
    (:func:`~.bounds.as_sent`: ids as int32 where they fit), so the budget follows the tensors sent; ``pool``
    (the store's reply buffers, shared with lookups) holds the samples and the narrowed ids, outside the C heap.

    Raises:
        PyGDistError: the request is misrouted or malformed (names this partition).
        ServingLimitError: the reply could exceed the reply limit, or found no room under the budget
            within the request's timeout (names the setting and the size).
    """
    if req.partition != graph.partition:
        raise PyGDistError(f"one-hop request for partition {req.partition} reached partition {graph.partition} "
                           "(is every process serving the partition its context names?)")
    rows = []
    for task in req.tasks:
        check_task(graph.partition, req, task)
        if not graph.holds(task.edge_type, task.seeds):
            raise PyGDistError(f"one-hop request names destinations of {task.edge_type!r} whose in-edges "
                               f"partition {graph.partition} does not hold (same folder everywhere?)")
        rows.append(task.seeds - graph.dst_range[task.edge_type][0])
    nbytes = owner_bound(graph, req, rows)
    hold, limit = None, serve_budget_bytes()
    if pool is not None:
        pool.limit_bytes = limit + limit // 8  # as a lookup sets it
    if budget is not None and nbytes:
        hold = budget.acquire(nbytes, limit, wait_bound(req), f"partition {graph.partition}'s one-hop reply")
    try:
        alloc = pooled(pool)
        reply = OneHopReply(graph.partition, tuple(sample_task(graph, t, req, r, t.seed_time, t.batch, alloc=alloc)
                                                   for t, r in zip(req.tasks, rows)))
        if hold is not None:
            reply = as_sent(reply, pool)
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    if hold is not None:  # in flight until the RPC layer has sent (and dropped) every tensor of the reply
        hold.release_when_freed([getattr(t, "t", t) for res in reply.results for t in (res.nbr, res.edge, res.count)])
    return reply


# ---------------------------------------------------------------------------------------- one hop
@dataclass
class _Batch:
    """The growing state of one batch: per node type its relabeler, per edge type its edge buffer."""
    rel: Dict[NodeType, Union[NumbaRelabeler, TorchRelabeler]]
    buffers: Dict[EdgeType, Union[EdgeBuffer, TensorBuffer]]


def _pick(t: Optional[Tensor], pos: Optional[Tensor]) -> Optional[Tensor]:
    return t if t is None or pos is None else t.index_select(0, pos)


def _fused(graph: SamplingGraph, opts: HopOptions, task: HopTask, rows: Tensor, lo: int, b: _Batch) -> int:
    """Samples and relabels one all-local task straight into the batch (the fused kernel)."""
    et = task.edge_type
    temporal = task.seed_time is not None and graph.is_temporal_type(et, opts.time_level)
    node_time = graph.node_time.get(et[0]) if temporal and opts.time_level == "node" else None
    hop = sample_hop(graph.sampling_csc(et, opts.weighted, opts.time_level), rows, lo, task.num_neighbors,
                     b.rel[et[0]], replace=opts.replace, temporal_strategy=opts.temporal_strategy,
                     node_time=node_time, seed_time=task.seed_time if temporal else None, seed_batch=task.batch,
                     backend=opts.backend, key=task.key, id_offset=graph.dst_range[et][0], out=b.buffers[et])
    return hop.row.numel()


async def _run_hop(graph: SamplingGraph, opts: HopOptions, tasks: List[HopTask], starts: List[int], b: _Batch,
                   stats) -> List[int]:
    """One hop of every task; returns the number of edges each added to the batch."""
    template = opts.request_template()
    plan = plan_hop(tasks, graph, template)
    if plan.all_local:
        with timed("sample_local"):
            counts = [_fused(graph, opts, t, rows, lo, b) for t, rows, lo in zip(tasks, plan.rows, starts)]
        if stats is not None:
            stats.record_hop(plan, 0, 0)
        return counts
    pieces = await _gather(graph, opts, tasks, plan, template, stats)
    return [_append(b, t, parts, lo) for t, parts, lo in zip(tasks, pieces, starts)]


async def _gather(graph: SamplingGraph, opts: HopOptions, tasks: Sequence[HopTask], plan: HopPlan,
                  template: OneHopRequest, stats) -> List[List[Tuple[Tensor, OneHop]]]:
    """Executes a planned hop unfused: one request per remote partition first, the local and cached
    shares here meanwhile; per task, its answers paired with the seed positions they answer."""
    issued: Dict[int, Issued] = {}
    requests: Dict[int, OneHopRequest] = {}
    if plan.requests:  # a one-machine sampler never gets here with requests (nor imports the RPC layer)
        with timed("sample_remote"):
            limit = reply_max_bytes()  # pieces whose replies fit the owners' cap (the same setting everywhere)
            requests = {p: dataclasses.replace(req, timeout=opts.timeout) for p, req in plan.requests.items()}
            issued = {p: issue(p, req, limit, opts.timeout) for p, req in requests.items()}
    with timed("sample_local"):
        local = [sample_task(graph, t, template, rows, _pick(t.seed_time, r.local_pos), _pick(t.batch, r.local_pos),
                             opts.backend) for t, r, rows in zip(tasks, plan.routes, plan.rows)]
        cached = [None if pos is None else _sample_cached(graph, t, template, pos, opts.backend)
                  for t, pos in zip(tasks, plan.cached)]
    with timed("sample_remote"):
        got = await asyncio.gather(*(collect(p, requests[p], pieces, graph.num_nodes, opts.timeout)
                                     for p, pieces in issued.items())) if issued else []
    replies = {p: reply for p, (reply, _, _) in zip(issued, got)}
    if stats is not None:  # bytes of the requests and replies as they crossed (ids as int32 where they fit)
        stats.record_hop(plan, sum(g[1] for g in got), sum(g[2] for g in got))
    return _pieces(plan, local, replies, cached)


async def gather_hop(graph: SamplingGraph, opts: HopOptions, tasks: Sequence[HopTask], template: OneHopRequest,
                     stats=None) -> List[List[Tuple[Tensor, OneHop]]]:
    """One hop that adds nothing to a batch: routed like every hop (:func:`~.plan.plan_hop`, remote
    destinations sampled by their owners) with the options of ``template``; returns per task its
    :class:`~pyg_dist.ops.OneHop` answers paired with the seed positions each answers.

    Example:
        >>> pieces = run_sync(gather_hop(graph, opts, [HopTask(et, ids, -1)], template))  # doctest: +SKIP
        >>> pos, hop = pieces[0][0]                  # hop.nbr: in-neighbours of ids[pos], grouped by seed
    """
    return await _gather(graph, opts, tasks, plan_hop(tasks, graph, template), template, stats)


def _append(b: _Batch, task: HopTask, pieces: List[Tuple[Tensor, OneHop]], lo: int) -> int:
    """Merges one task's pieces into the batch in seed order; returns the number of edges added."""
    buf, rel = b.buffers[task.edge_type], b.rel[task.edge_type[0]]
    if len(pieces) == 1:
        return buf.append_one_hop(pieces[0][1], lo, rel, task.batch).row.numel()
    return buf.append_pieces(task.seeds.numel(), pieces, lo, rel, task.batch).row.numel()


def _sample_cached(graph: SamplingGraph, task: HopTask, req: OneHopRequest, pos: Tensor, backend: str) -> OneHop:
    """Samples the remote seeds at ``pos`` from the topology cache (its CSC is indexed by global id, so
    every seed draws from the same stream as on its owner: the same neighbours)."""
    return one_hop(graph.topo[task.edge_type][0], task.seeds.index_select(0, pos), task.num_neighbors,
                   replace=req.replace, backend=backend, key=task.key, seed_batch=_pick(task.batch, pos))


def _pieces(plan: HopPlan, local: Sequence[OneHop], replies: Dict[int, OneHopReply],
            cached: Sequence[Optional[OneHop]]) -> List[List[Tuple[Tensor, OneHop]]]:
    """Per task, its answers paired with the seed positions they answer (local share, checked replies
    (:func:`~.remote_hop.merge_replies`), cache)."""
    per_task: List[Dict[int, OneHop]] = [{} for _ in local]
    for p, reply in replies.items():
        for ti, res in zip(plan.slots[p], reply.results):
            per_task[ti][p] = res
    routes = list(plan.routes)
    for ti, (pos, hop) in enumerate(zip(plan.cached, cached)):
        if pos is not None and hop is not None:  # the cache's share merges like one more partition's
            per_task[ti][-1] = hop
            routes[ti] = dataclasses.replace(routes[ti], remote={**routes[ti].remote, -1: pos})
    return [segment_pieces(route, loc, rem) for route, loc, rem in zip(routes, local, per_task)]


# ----------------------------------------------------------------------------------------- K hops
def _add_seeds(rel, seed: Dict[NodeType, Tensor], disjoint: bool) -> None:
    for t, ids in seed.items():
        rel[t].add(ids, torch.arange(ids.numel(), device=ids.device) if disjoint else None)


def _batch_time(seed_time: Optional[Dict[NodeType, Tensor]]) -> Optional[Tensor]:
    """Time of each subgraph (= of its seed); seeds of several types share subgraph ids by position."""
    if not seed_time:
        return None
    size = max(v.numel() for v in seed_time.values())
    out = torch.zeros(size, dtype=next(iter(seed_time.values())).dtype)
    for time in seed_time.values():
        out[:time.numel()] = time
    return out


def _capacity(opts: HopOptions, num_seeds: int) -> int:
    """A first guess of one edge type's output size. Buffers grow when it is short, and capacity that
    is never written is never touched, so a generous guess costs address space only."""
    total, width = 0, num_seeds
    for hop in range(opts.num_hops):
        ks = [f[hop] for f in opts.fanouts.values()]
        width *= 16 if min(ks) < 0 else max(max(ks), 1)
        total += width
    return min(total, 1 << 24)


def _hop_tasks(graph: SamplingGraph, opts: HopOptions, b: _Batch, hop: int, bounds, batch_time, key: int
               ) -> Tuple[List[HopTask], List[int]]:
    """The tasks of hop ``hop``: per edge type with a frontier, its seeds, times, subgraphs and key."""
    tasks, starts = [], []
    for i, et in enumerate(graph.edge_types):
        k, (lo, hi) = opts.fanouts[et][hop], bounds[et[2]]
        if k == 0 or hi == lo:
            continue
        rel = b.rel[et[2]]
        batch = rel.batch if opts.disjoint else None
        sb = None if batch is None else batch[lo:hi]
        temporal = batch_time is not None and graph.is_temporal_type(et, opts.time_level)
        tasks.append(HopTask(et, rel.nodes[lo:hi], k, mix(key, hop, i), batch_time[sb] if temporal else None, sb))
        starts.append(lo)
    return tasks, starts


async def sample_hops(graph: SamplingGraph, opts: HopOptions, seed: Dict[NodeType, Tensor],
                      seed_time: Optional[Dict[NodeType, Tensor]], key: int, stats=None) -> TypedSample:
    """Runs ``opts.num_hops`` hops from ``seed`` (unique global ids unless disjoint; checked by the caller)."""
    cap = _capacity(opts, sum(v.numel() for v in seed.values()))
    rel = {t: make_relabeler(graph.num_nodes[t], opts.disjoint, opts.backend, pool=opts.pools.get(t),
                             capacity=min(cap, graph.num_nodes[t]) + 1) for t in graph.node_types}
    try:
        b = _Batch(rel, {et: make_edge_buffer(opts.backend, cap) for et in graph.edge_types})
        _add_seeds(rel, seed, opts.disjoint)
        batch_time = _batch_time(seed_time)
        n_nodes = {t: [rel[t].size] for t in graph.node_types}
        n_edges: Dict[EdgeType, List[int]] = {et: [] for et in graph.edge_types}
        bounds = {t: (0, rel[t].size) for t in graph.node_types}
        for hop in range(opts.num_hops):
            before = {t: rel[t].size for t in graph.node_types}
            tasks, starts = _hop_tasks(graph, opts, b, hop, bounds, batch_time, key)
            done = dict(zip((t.edge_type for t in tasks), await _run_hop(graph, opts, tasks, starts, b, stats)))
            for et in graph.edge_types:
                n_edges[et].append(done.get(et, 0))
            bounds = {t: (before[t], rel[t].size) for t in graph.node_types}
            for t in graph.node_types:
                n_nodes[t].append(rel[t].size - before[t])
        rce = {et: buf.tensors() for et, buf in b.buffers.items()}
        return TypedSample(node={t: rel[t].nodes for t in graph.node_types},
                           row={et: v[0] for et, v in rce.items()}, col={et: v[1] for et, v in rce.items()},
                           edge={et: v[2] for et, v in rce.items()},
                           batch={t: rel[t].batch for t in graph.node_types} if opts.disjoint else None,
                           num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)
    finally:
        for r in rel.values():
            r.close()


def run_sync(coro):
    """Drives a coroutine that never awaits anything pending (an all-local batch) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise PyGDistError("a local sampling step awaited a remote call (use the distributed sampler)")


__all__ = ["HopOptions", "sample_hops", "gather_hop", "sample_task", "serve_one_hop", "run_sync", "check_reply",
           "merge_replies"]
