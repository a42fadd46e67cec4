"""The distributed hop loop, and the one-hop service a partition offers its peers.

:class:`PartitionGraph` is what sampling reads from this process's ``LocalGraphStore``: per edge type
the CSC (and the destination range it covers), the full node time per type, the partition book.
:func:`sample_hops_async` runs the hops of one batch: per hop it plans (pure, :mod:`.plan`), issues one
request per remote partition for all edge types at once, samples the local part with
:func:`pyg_dist.ops.one_hop` meanwhile, awaits, merges in frontier order and relabels. Homogeneous and
heterogeneous graphs run the same loop (one node type and one edge type). :func:`serve_one_hop` answers
peers' requests with the same kernel.
"""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.distributed.messages import ONE_HOP_OP, HopTask, OneHopReply, OneHopRequest, tensor_bytes
from pyg_dist.distributed.plan import merge_one_hop, plan_hop
from pyg_dist.distributed.stats import SamplerStats
from pyg_dist.errors import PyGDistError
from pyg_dist.ops import CSC, OneHop, make_relabeler, one_hop
from pyg_dist.sampler.hops import _add_seeds, _batch_time
from pyg_dist.sampler.output import TypedSample


@dataclass(frozen=True)
class PartitionGraph:
    """The sampling view of one partition (built from a ``LocalGraphStore``; GLOBAL ids throughout).

    Attributes:
        partition: This partition.
        node_types / edge_types: Typed, in the folder's order.
        num_nodes: Nodes per type in the whole graph.
        csc: Per edge type, the in-edges of the destinations in ``dst_range[et]`` (weights and edge time
            included when the folder has them).
        dst_range: Per edge type, ``(start, end)`` of the destinations the CSC is indexed by.
        local_range: Per edge type, the destinations whose in-edges the CSC holds entirely: the owned
            range (``dst_range``), or all nodes in hybrid folders; ``None`` in folders written by PyG
            (``dst_range`` spans all nodes but only owned ones have edges: the book decides).
        node_time: Per node type with node time, the time of every node (index = global id).
        book: The folder's partition book.
    """
    partition: int
    node_types: List[NodeType]
    edge_types: List[EdgeType]
    num_nodes: Dict[NodeType, int]
    csc: Dict[EdgeType, CSC]
    dst_range: Dict[EdgeType, Tuple[int, int]]
    local_range: Dict[EdgeType, Optional[Tuple[int, int]]]
    node_time: Dict[NodeType, Tensor]
    book: object

    @staticmethod
    def from_store(graph_store) -> "PartitionGraph":
        """The view of a :class:`~pyg_dist.store.LocalGraphStore` (typed keys, no copies)."""
        ets = list(graph_store.partition_meta.edge_types)
        nts = list(graph_store.partition_meta.node_types)
        meta = graph_store.partition_meta
        pub_e = (lambda et: et) if meta.is_hetero else (lambda et: None)
        pub_n = (lambda t: t) if meta.is_hetero else (lambda t: None)
        node_time = {t: graph_store.node_time(pub_n(t)) for t in nts}
        dst_range = {et: graph_store.dst_range(pub_e(et)) for et in ets}
        by_range = meta.is_native or meta.hybrid
        return PartitionGraph(graph_store.partition, nts, ets, dict(meta.num_nodes),
                              {et: graph_store.local_csc(pub_e(et)) for et in ets}, dst_range,
                              {et: dst_range[et] if by_range else None for et in ets},
                              {t: v for t, v in node_time.items() if v is not None}, graph_store.book)

    def sampling_csc(self, et: EdgeType, weighted: bool, time_level: Optional[str]) -> CSC:
        """The CSC with only the per-edge fields this sampling uses (the kernel reads what it gets)."""
        csc = self.csc[et]
        keep_w, keep_t = weighted and csc.weight is not None, time_level == "edge"
        if (csc.weight is not None) == keep_w and (csc.edge_time is not None) == keep_t:
            return csc
        return dataclasses.replace(csc, weight=csc.weight if keep_w else None,
                                   edge_time=csc.edge_time if keep_t else None)

    def holds(self, et: EdgeType, ids: Tensor) -> bool:
        """Whether this partition holds every in-edge of the destinations ``ids`` of ``et``."""
        if et not in self.csc:
            return False
        if not ids.numel():
            return True
        rng = self.local_range[et]
        if rng is None:
            return bool((self.book.owner(et[2], ids) == self.partition).all())
        return rng[0] <= int(ids.min()) and int(ids.max()) < rng[1]

    def owner_fn(self, ntype: NodeType):
        return lambda ids: self.book.owner(ntype, ids)

    def is_temporal_type(self, et: EdgeType, time_level: Optional[str]) -> bool:
        """Whether sampling ``et`` compares times (edge time of ``et``, or node time of its source)."""
        if time_level == "edge":
            return self.csc[et].edge_time is not None
        return time_level == "node" and et[0] in self.node_time


def sample_task(graph: PartitionGraph, task: HopTask, req: OneHopRequest, seeds: Tensor,
                seed_time: Optional[Tensor], backend: str = "auto") -> OneHop:
    """Samples ``seeds`` (global ids inside the CSC's range) of one task here, with the kernel."""
    et = task.edge_type
    start = graph.dst_range[et][0]
    temporal = seed_time is not None and graph.is_temporal_type(et, req.time_level)
    node_time = graph.node_time.get(et[0]) if temporal and req.time_level == "node" else None
    return one_hop(graph.sampling_csc(et, req.weighted, req.time_level), seeds - start, task.num_neighbors,
                   replace=req.replace, node_time=node_time, seed_time=seed_time if temporal else None,
                   temporal_strategy=req.temporal_strategy, backend=backend)


def serve_one_hop(graph: PartitionGraph, req: OneHopRequest) -> OneHopReply:
    """Answers a peer's :class:`OneHopRequest` (runs on an RPC thread of the serving process)."""
    if req.partition != graph.partition:
        raise PyGDistError(f"one-hop request for partition {req.partition} reached partition {graph.partition} "
                           "(is every process serving the partition its context names?)")
    results = []
    for task in req.tasks:
        if not graph.holds(task.edge_type, task.seeds):
            raise PyGDistError(f"one-hop request names destinations of {task.edge_type!r} whose in-edges "
                               f"partition {graph.partition} does not hold (same folder everywhere?)")
        results.append(sample_task(graph, task, req, task.seeds, task.seed_time))
    return OneHopReply(graph.partition, results)


@dataclass(frozen=True)
class DistHopOptions:
    """Validated options of distributed sampling."""
    fanouts: Dict[EdgeType, List[int]]
    num_hops: int
    replace: bool = False
    disjoint: bool = False
    temporal_strategy: str = "uniform"
    time_level: Optional[str] = None
    weighted: bool = False
    backend: str = "auto"
    timeout: float = 60.0
    pools: Dict[NodeType, list] = dataclasses.field(default_factory=dict)

    def request_template(self) -> OneHopRequest:
        return OneHopRequest(-1, [], self.replace, self.temporal_strategy, self.time_level, self.weighted)


async def _run_hop(graph: PartitionGraph, opts: DistHopOptions, tasks: List[HopTask],
                   stats: Optional[SamplerStats]) -> List[OneHop]:
    """One hop of every task: remote requests first, local sampling meanwhile, then merge."""
    from pyg_dist import rpc
    plan = plan_hop(tasks, [graph.local_range[t.edge_type] for t in tasks],
                    [graph.owner_fn(t.edge_type[2]) for t in tasks], opts.request_template(), graph.partition)
    futures = {p: rpc.call_async(p, ONE_HOP_OP, req, timeout=opts.timeout) for p, req in plan.requests.items()}
    local, template = [], opts.request_template()
    for task, route in zip(tasks, plan.routes):
        st = task.seed_time if route.local_pos is None or task.seed_time is None \
            else task.seed_time.index_select(0, route.local_pos)
        local.append(sample_task(graph, task, template, route.local_ids, st, opts.backend))
    replies = dict(zip(futures, await asyncio.gather(*futures.values()))) if futures else {}
    per_task: List[Dict[int, OneHop]] = [{} for _ in tasks]
    for p, reply in replies.items():
        if len(reply.results) != len(plan.slots[p]):
            raise PyGDistError(f"partition {p} answered {len(reply.results)} one-hop tasks of {len(plan.slots[p])}")
        for ti, res in zip(plan.slots[p], reply.results):
            per_task[ti][p] = res
    if stats is not None:
        stats.record_hop(plan, sum(tensor_bytes(r) for r in plan.requests.values()),
                         sum(tensor_bytes(r) for r in replies.values()))
    return [merge_one_hop(route, loc, rem) for route, loc, rem in zip(plan.routes, local, per_task)]


async def sample_hops_async(graph: PartitionGraph, opts: DistHopOptions, seed: Dict[NodeType, Tensor],
                            seed_time: Optional[Dict[NodeType, Tensor]] = None,
                            stats: Optional[SamplerStats] = None) -> TypedSample:
    """Runs ``opts.num_hops`` distributed hops from ``seed`` (global ids, validated by the caller)."""
    rel = {t: make_relabeler(graph.num_nodes[t], opts.disjoint, opts.backend, pool=opts.pools.get(t))
           for t in graph.node_types}
    try:
        _add_seeds(rel, seed, opts.disjoint)
        batch_time = _batch_time(seed, seed_time)
        out = {et: ([], [], []) for et in graph.edge_types}
        n_nodes = {t: [rel[t].size] for t in graph.node_types}
        n_edges = {et: [] for et in graph.edge_types}
        bounds = {t: (0, rel[t].size) for t in graph.node_types}
        for hop in range(opts.num_hops):
            starts = {t: rel[t].size for t in graph.node_types}
            tasks, spans = [], []
            for et in graph.edge_types:
                k, (lo, hi) = opts.fanouts[et][hop], bounds[et[2]]
                if k == 0 or hi == lo:
                    continue
                sb = rel[et[2]].batch[lo:hi].clone() if opts.disjoint else None
                st = batch_time[sb] if batch_time is not None and graph.is_temporal_type(et, opts.time_level) else None
                tasks.append(HopTask(et, rel[et[2]].nodes[lo:hi].clone(), k, st))
                spans.append((lo, hi, sb))
            results = await _run_hop(graph, opts, tasks, stats) if tasks else []
            done = {}
            for task, (lo, hi, sb), res in zip(tasks, spans, results):
                et = task.edge_type
                batch = None if sb is None else torch.repeat_interleave(sb, res.count)
                out[et][0].append(rel[et[0]].add(res.nbr, batch))
                out[et][1].append(torch.repeat_interleave(torch.arange(lo, hi), res.count))
                out[et][2].append(res.edge)
                done[et] = res.nbr.numel()
            for et in graph.edge_types:
                n_edges[et].append(done.get(et, 0))
            bounds = {t: (starts[t], rel[t].size) for t in graph.node_types}
            for t in graph.node_types:
                n_nodes[t].append(rel[t].size - starts[t])
        cat = lambda parts: torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)  # noqa: E731
        return TypedSample(
            node={t: rel[t].nodes.clone() for t in graph.node_types},
            row={et: cat(v[0]) for et, v in out.items()}, col={et: cat(v[1]) for et, v in out.items()},
            edge={et: cat(v[2]) for et, v in out.items()},
            batch={t: rel[t].batch.clone() for t in graph.node_types} if opts.disjoint else None,
            num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)
    finally:
        for r in rel.values():
            r.close()


__all__ = ["PartitionGraph", "DistHopOptions", "sample_hops_async", "serve_one_hop", "sample_task"]
