"""DistNeighborSampler in spawned RPC worlds (gloo-free: pyg_dist RPC on 127.0.0.1), against oracles.

Each rank samples around seeds of its own and of other partitions and checks, per folder:
* full fanout: the node set equals the k-hop neighbourhood on the ORIGINAL graph (typed BFS; PyG's
  ``k_hop_subgraph`` for homogeneous graphs), and the whole output (nodes in order, row, col, edge ids)
  equals the one-process ``NeighborSampler`` on the same relabelled graph;
* every sampled edge exists in the original graph under its true edge id;
* x, y, node time, edge_attr and edge time in ``metadata.features`` equal the original rows;
* link batches (binary and triplet negatives) point at their positive edges;
* temporal batches never contain a neighbour newer than its seed (node time and edge time);
* hybrid folders make 0 remote sampling rounds (stats), other folders do remote rounds.

Worlds: 2 ranks (homo metis, hetero random, homo hybrid, temporal homo) and 4 ranks (homo random,
hetero metis). Checks are grouped per world because an RPC world costs seconds to start.
"""
from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist import rpc
from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed
from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import RemoteCallError
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.sampler import NeighborSampler
from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
from pyg_dist.sampler.messages import ONE_HOP_OP, HopTask, OneHopRequest
from pyg_dist.sampler.stats import SamplerStats
from pyg_dist.store import load_stores
from pyg_dist.testing import check_edges_and_features, relabelled, typed_k_hop

HOMO = dict(num_nodes=700, avg_degree=5, num_features=6, community_size=50, edge_dim=3, edge_weight=True, seed=21)
HETERO = dict(num_nodes=700, avg_degree=5, num_features=4, community_size=50, hetero=True, edge_dim=2, seed=22)
TEMPORAL = dict(num_nodes=700, avg_degree=5, num_features=4, community_size=50, node_time=True, edge_time=True,
                seed=23)


def _seeds(ctx, fs, ntype, gen, count=12):
    """Half owned by this rank's partition, half anywhere (mostly remote)."""
    own = fs.get_global_id(ntype if fs.is_hetero else None)
    mine = own[torch.randperm(own.numel(), generator=gen)[:count // 2]]
    other = torch.randint(0, fs.num_items(ntype if fs.is_hetero else None), (count,), generator=gen)
    return torch.unique(torch.cat([mine, other]))[:count][torch.randperm(count, generator=gen)]


def _same(a, b, is_hetero):
    for name in ("node", "row", "col", "edge"):
        x, y = getattr(a, name), getattr(b, name)
        x, y = (x, y) if is_hetero else ({0: x}, {0: y})
        for k in y:
            assert torch.equal(x[k], y[k]), (name, k)


# ------------------------------------------------------------------------------------- rank checks
def check_static(ctx, root, spec, hybrid):
    data, orig = synthetic_graph(**spec), load_original_ids(root)
    gs, fs = load_stores(root, ctx=ctx, mmap=ctx.rank % 2 == 0)  # odd ranks: compact in-memory CSC
    serve_partition(gs, fs)
    stats = SamplerStats()
    full = DistNeighborSampler(gs, fs, [-1, -1], stats=stats)
    weighted = DistNeighborSampler(gs, fs, [3, 2], weight_attr="edge_weight" if "edge_weight" in spec else None,
                                   )
    local = NeighborSampler(relabelled(data, orig), [-1, -1])
    gen = torch.Generator().manual_seed(ctx.rank)
    ntype = fs.node_types[0]
    report = {}
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        for trial in range(2):
            seeds = _seeds(ctx, fs, ntype, gen)
            inp = NodeSamplerInput(None, seeds, input_type=ntype if fs.is_hetero else None)
            out = full.sample_from_nodes(inp)
            node = as_typed(out.node, HOMO_NODE, fs.is_hetero)
            want = typed_k_hop(data, ntype, orig[ntype][seeds], 2)
            for t in fs.node_types:
                got = orig[t][node[t]].tolist()
                assert len(got) == len(set(got)) and set(got) == want[t], t
            _same(out, local.sample_from_nodes(inp), fs.is_hetero)
            check_edges_and_features(out, data, orig, fs.is_hetero)
            small = weighted.sample_from_nodes(inp)        # sampled fanouts: invariants only
            check_edges_and_features(small, data, orig, fs.is_hetero)
            cols = as_typed(small.col, HOMO_EDGE, fs.is_hetero)
            for et, c in cols.items():
                if c.numel():
                    assert int(torch.bincount(c).max()) <= 3, et
        report["stats"] = stats.summary()
        report["links"] = check_links(full, data, orig, fs, gen)
        report["concurrent"] = check_concurrent(full, local, fs, gen)
        report["error"] = check_remote_error(ctx, fs)
    return report


def check_concurrent(sampler, local, fs, gen):
    """Three batches in flight at once (concurrency=1 and 3) each equal the one-process sample."""
    ntype = fs.node_types[0]
    inputs = [NodeSamplerInput(None, torch.randperm(fs.num_items(ntype if fs.is_hetero else None), generator=gen)[:8],
                               input_type=ntype if fs.is_hetero else None) for _ in range(3)]

    async def together(s):
        return await asyncio.gather(*(s.sample_from_nodes_async(i) for i in inputs))
    wide = DistNeighborSampler(sampler.graph_store, sampler.feature_store, [-1, -1], concurrency=3)
    for s in (sampler, wide):
        for inp, out in zip(inputs, rpc.run_coroutine(together(s), timeout=120)):
            _same(out, local.sample_from_nodes(inp), fs.is_hetero)
    return len(inputs)


def check_remote_error(ctx, fs):
    """A one-hop request routed to the wrong partition fails there and arrives as RemoteCallError."""
    peer = (ctx.partition + 1) % ctx.num_partitions
    bad = OneHopRequest(ctx.partition, (HopTask(fs.edge_types[0], torch.tensor([0]), -1),))
    try:
        rpc.call(peer, ONE_HOP_OP, bad)
    except RemoteCallError as exc:
        assert exc.partition == peer and f"reached partition {peer}" in exc.remote_traceback
        return exc.op
    raise AssertionError("misrouted one-hop request did not fail")


def check_links(sampler, data, orig, fs, gen):
    """Binary and triplet link batches: positives sit at edge_label_index / src,dst_pos index."""
    et = fs.edge_types[0]
    inv_e = orig[et]
    pos = torch.randint(0, inv_e.numel(), (6,), generator=gen)
    g_ei = relabelled(data, orig)
    ei = (g_ei[et] if fs.is_hetero else g_ei).edge_index[:, pos]
    inp = EdgeSamplerInput(None, ei[0], ei[1], input_type=et if fs.is_hetero else None)
    out = sampler.sample_from_edges(inp, NegativeSampling("binary", 1))
    node = as_typed(out.node, HOMO_NODE, fs.is_hetero)
    md = out.metadata
    assert torch.equal(node[et[0]][md.edge_label_index[0, :6]], ei[0])
    assert torch.equal(node[et[2]][md.edge_label_index[1, :6]], ei[1])
    assert md.edge_label.tolist() == [1.0] * 6 + [0.0] * 6
    assert md.features.node[et[0]]["x"].size(0) == node[et[0]].numel()
    check_edges_and_features(out, data, orig, fs.is_hetero)  # the binary batch's edges and rows, too
    out = sampler.sample_from_edges(inp, NegativeSampling("triplet", 2))
    node = as_typed(out.node, HOMO_NODE, fs.is_hetero)
    md = out.metadata
    assert torch.equal(node[et[0]][md.src_index], ei[0]) and torch.equal(node[et[2]][md.dst_pos_index], ei[1])
    assert tuple(md.dst_neg_index.shape) == (6, 2)
    check_edges_and_features(out, data, orig, fs.is_hetero)
    return 2


def _in_folder_order(rel, time_attr):
    """The one-machine sampler over ``rel`` with each destination's in-edges in the order the folder holds
    them (input order), not in PyG's temporal order (by time) it uses by itself; and the edge ids of its
    positions (``is_sorted`` samplers report positions)."""
    perm = torch.sort(rel.edge_index[1], stable=True).indices
    g = rel.clone()
    for key in rel.keys():
        if rel.is_edge_attr(key):
            g[key] = rel[key][:, perm] if key == "edge_index" else rel[key][perm]
    return NeighborSampler(g, [-1, -1], time_attr=time_attr, is_sorted=True), perm


def check_temporal(ctx, root, spec):
    data, orig = synthetic_graph(**spec), load_original_ids(root)
    gs, fs = load_stores(root, ctx=ctx, mmap=ctx.rank % 2 == 0)  # odd ranks: compact in-memory CSC
    serve_partition(gs, fs)
    rel = relabelled(data, orig)
    gen = torch.Generator().manual_seed(50 + ctx.rank)
    done = 0
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        for attr in ("time", "edge_time"):
            dist = DistNeighborSampler(gs, fs, [-1, -1], time_attr=attr)
            local, perm = _in_folder_order(rel, attr)
            seeds = _seeds(ctx, fs, HOMO_NODE, gen)
            seed_time = torch.randint(20, 100, (seeds.numel(),), generator=gen)
            inp = NodeSamplerInput(None, seeds, time=seed_time)
            out = dist.sample_from_nodes(inp)
            want = local.sample_from_nodes(inp)
            _same(out, dataclasses.replace(want, edge=perm[want.edge]), False)
            check_edges_and_features(out, data, orig, False)
            limit = seed_time[out.batch]
            if attr == "time":   # every sampled neighbour is no newer than the seed of its subgraph
                n = seeds.numel()
                assert (rel.time[out.node[n:]] <= limit[n:]).all()
            else:                # every edge is no newer than the seed of its destination's subgraph
                assert (rel.edge_time[out.edge] <= limit[out.col]).all()
            assert out.row.numel() > 0
            for strategy_out in [DistNeighborSampler(gs, fs, [2, 2], time_attr=attr, temporal_strategy="last",
                                                     ).sample_from_nodes(inp)]:
                check_edges_and_features(strategy_out, data, orig, False)
            done += 1
    return done


def world_main(rank, world_size, jobs):
    ctx = DistContext.from_env(num_partitions=world_size)
    out = []
    for kind, root, spec, hybrid in jobs:
        out.append(check_temporal(ctx, root, spec) if kind == "temporal" else check_static(ctx, root, spec, hybrid))
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist_sampler")
    graphs = {"homo": synthetic_graph(**HOMO), "hetero": synthetic_graph(**HETERO),
              "temporal": synthetic_graph(**TEMPORAL)}

    def make(name, graph, parts, method, spec, kind="static"):
        path = root / f"{name}{parts}_{method}"
        Partitioner(graphs[graph], parts, method=method).save(path, progress=False)
        return (kind, str(path), spec, method == "hybrid")
    return {2: [make("homo", "homo", 2, "metis", HOMO), make("hetero", "hetero", 2, "random", HETERO),
                make("homo", "homo", 2, "hybrid", HOMO),
                make("temporal", "temporal", 2, "random", TEMPORAL, "temporal")],
            4: [make("homo", "homo", 4, "random", HOMO), make("hetero", "hetero", 4, "metis", HETERO)]}


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.timeout(300)
def test_distributed_sampling_equals_oracles(folders, world_size):
    from pyg_dist.testing import spawn_world
    jobs = folders[world_size]
    results = spawn_world(world_size, world_main, jobs, timeout=280)
    for per_rank in results:
        for (kind, _, _, hybrid), res in zip(jobs, per_rank):
            if kind == "temporal":
                assert res == 2
                continue
            s = res["stats"]
            assert res["links"] == 2 and res["concurrent"] == 3 and res["error"] == ONE_HOP_OP
            assert s["batches"] == 2
            assert s["feature_requests"] > 0 and s["feature_rows_remote"] > 0
            if hybrid:
                assert s["remote_sampling_rounds"] == 0 and s["hop_seeds_remote"] == 0
            else:
                assert s["remote_sampling_rounds"] > 0 and s["hop_seeds_remote"] > 0
