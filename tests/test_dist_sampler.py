"""DistNeighborSampler pieces in one process: routing and merging (pure), the one-hop service, a
one-partition folder (no RPC needed) against the one-process sampler, and argument errors."""
from __future__ import annotations

import pickle

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist.datasets import synthetic_graph
from pyg_dist.distributed import (DistNeighborSampler, FeatureBatch, HopTask, OneHopRequest, SamplerStats,
                                  register_callees)
from pyg_dist.distributed.hops import PartitionGraph, serve_one_hop
from pyg_dist.distributed.plan import merge_one_hop, plan_hop, route_frontier
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.ops import CSC, OneHop, one_hop
from pyg_dist.partition import Partitioner, load_original_ids
from pyg_dist.sampler import NeighborSampler
from pyg_dist.store import load_stores


# ----------------------------------------------------------------------------------------- routing
def test_route_and_merge_restore_frontier_order():
    """Splitting a frontier over 3 owners and merging the per-owner results equals sampling it whole."""
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 90, (2, 600), generator=gen)
    csc = CSC.from_edge_index(ei, num_dst=90)
    frontier = torch.randperm(90, generator=gen)[:40]
    owner = lambda ids: ids // 30  # noqa: E731  partition p owns [30p, 30p + 30)
    route = route_frontier(frontier, (30, 60), owner)
    assert set(route.remote) == {0, 2} and route.num_local == int(((frontier >= 30) & (frontier < 60)).sum())
    whole = one_hop(csc, frontier, -1)
    local = one_hop(csc, route.local_ids, -1)
    remote = {p: one_hop(csc, frontier[pos], -1) for p, pos in route.remote.items()}
    merged = merge_one_hop(route, local, remote)
    assert torch.equal(merged.count, whole.count)
    assert torch.equal(merged.nbr, whole.nbr) and torch.equal(merged.edge, whole.edge)
    with pytest.raises(PyGDistError, match="one-hop reply"):
        merge_one_hop(route, local, {**remote, 0: OneHop(torch.zeros(1, dtype=torch.long),
                                                        torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.long))})


def test_plan_groups_edge_types_into_one_request_per_partition():
    owner = lambda ids: ids // 10  # noqa: E731
    tasks = [HopTask(("a", "r", "b"), torch.tensor([1, 15, 25, 3]), 5, torch.tensor([7, 8, 9, 10])),
             HopTask(("b", "s", "b"), torch.tensor([12, 2]), -1)]
    plan = plan_hop(tasks, [(0, 10), (0, 10)], [owner, owner], OneHopRequest(-1, [], replace=True))
    assert sorted(plan.requests) == [1, 2] and plan.slots == {1: [0, 1], 2: [0]}
    req = plan.requests[1]
    assert req.partition == 1 and req.replace and [t.seeds.tolist() for t in req.tasks] == [[15], [12]]
    assert req.tasks[0].seed_time.tolist() == [8] and req.tasks[1].seed_time is None
    assert plan.num_remote_seeds == 3 and plan.routes[1].local_ids.tolist() == [2]
    everything_here = plan_hop(tasks, [(0, 30), (0, 30)], [owner, owner], OneHopRequest(-1, []))
    assert everything_here.requests == {} and everything_here.routes[0].local_pos is None


# ---------------------------------------------------------------------------------- one partition
@pytest.fixture(scope="module")
def one_part(tmp_path_factory):
    spec = dict(num_nodes=500, avg_degree=5, num_features=4, community_size=40, edge_dim=2, edge_weight=True,
                node_time=True, seed=5)
    data = synthetic_graph(**spec)
    root = tmp_path_factory.mktemp("dist1") / "p1"
    Partitioner(data, 1, method="random").save(root, progress=False)
    orig = load_original_ids(root)
    gs, fs = load_stores(root, 0)
    return data, orig, gs, fs


def test_one_partition_equals_one_process_sampler(one_part):
    """Without RPC (everything local) the batch equals NeighborSampler's, features included."""
    data, orig, gs, fs = one_part
    stats = SamplerStats()
    dist = DistNeighborSampler(gs, fs, [4, 3], stats=stats, serve=False)
    seeds = torch.tensor([3, 77, 150, 499])
    torch.manual_seed(7)
    out = dist.sample_from_nodes(NodeSamplerInput(torch.arange(4), seeds))
    assert out.node[:4].tolist() == seeds.tolist()
    o = orig["_N"]
    assert torch.equal(data.edge_index[0, orig[("_N", "_E", "_N")][out.edge]], o[out.node[out.row]])
    fb = out.metadata.features
    assert isinstance(fb, FeatureBatch) and torch.equal(fb.node["_N"]["x"], data.x[o[out.node]])
    assert torch.equal(fb.node_attr("y")["_N"], data.y[o[out.node]])
    assert torch.equal(fb.edge_attr("edge_attr")[("_N", "_E", "_N")], data.edge_attr[orig[("_N", "_E", "_N")][out.edge]])
    assert out.metadata.input_id.tolist() == [0, 1, 2, 3] and out.metadata.seed_time is None
    s = stats.summary()
    assert s["batches"] == 1 and s["local_node_frac"] == 1.0 and s["requests_per_batch"] == 0
    assert s["hop_seeds_local"] == 4 + out.num_sampled_nodes[1]
    rows = dist.lookup_rows({"_N": torch.tensor([7, 0])}, {("_N", "_E", "_N"): torch.tensor([3])})
    assert torch.equal(rows.node["_N"]["x"], data.x[o[torch.tensor([7, 0])]]) and "y" in rows.node["_N"]
    assert torch.equal(rows.edge[("_N", "_E", "_N")]["edge_attr"], data.edge_attr[orig[("_N", "_E", "_N")][[3]]])
    only_x = DistNeighborSampler(gs, fs, [2], node_attrs=["x"], edge_attrs=["edge_weight"], serve=False)
    fb = only_x.sample_from_nodes(NodeSamplerInput(None, seeds)).metadata.features
    assert list(fb.node["_N"]) == ["x"] and list(fb.edge[("_N", "_E", "_N")]) == ["edge_weight"]


def test_bidirectional_disjoint_and_link_outputs(one_part):
    data, orig, gs, fs = one_part
    bi = DistNeighborSampler(gs, fs, [3, 2], subgraph_type="bidirectional", serve=False)
    out = bi.sample_from_nodes(NodeSamplerInput(None, torch.tensor([1, 2, 3])))
    assert out.metadata.features.edge[("_N", "_E", "_N")]["edge_attr"].size(0) == out.edge.numel()
    dis = DistNeighborSampler(gs, fs, [2], disjoint=True, serve=False)
    out = dis.sample_from_nodes(NodeSamplerInput(None, torch.tensor([5, 5, 9])))
    assert out.batch[:3].tolist() == [0, 1, 2] and out.node[:3].tolist() == [5, 5, 9]
    inp = EdgeSamplerInput(None, torch.tensor([0, 1]), torch.tensor([2, 3]), label=torch.tensor([1.0, 1.0]))
    out = dis.sample_from_edges(inp, NegativeSampling("binary", 2))
    assert out.metadata.edge_label.tolist() == [1, 1, 0, 0, 0, 0] and out.metadata.features is not None


def test_serve_one_hop_checks_routing(one_part):
    _, _, gs, _ = one_part
    graph = PartitionGraph.from_store(gs)
    et = ("_N", "_E", "_N")
    reply = serve_one_hop(graph, OneHopRequest(0, [HopTask(et, torch.tensor([4, 8]), -1)]))
    csc = gs.local_csc()
    want = one_hop(csc, torch.tensor([4, 8]), -1)
    assert torch.equal(reply.results[0].nbr, want.nbr) and torch.equal(reply.results[0].count, want.count)
    with pytest.raises(PyGDistError, match="reached partition 0"):
        serve_one_hop(graph, OneHopRequest(1, []))
    with pytest.raises(PyGDistError, match="does not hold"):
        serve_one_hop(graph, OneHopRequest(0, [HopTask(et, torch.tensor([10 ** 6]), -1)]))


def test_pickled_sampler_reopens_its_folder(one_part):
    _, _, gs, fs = one_part
    sampler = DistNeighborSampler(gs, fs, [2, 2], serve=False)
    clone = pickle.loads(pickle.dumps(sampler))
    torch.manual_seed(3)
    a = sampler.sample_typed({"_N": torch.tensor([1, 2])})
    torch.manual_seed(3)
    b = clone.sample_typed({"_N": torch.tensor([1, 2])})
    assert torch.equal(a.node["_N"], b.node["_N"]) and torch.equal(a.edge[("_N", "_E", "_N")], b.edge[("_N", "_E", "_N")])


def test_register_callees_serves_both_ops(one_part):
    from pyg_dist import rpc
    from pyg_dist.distributed import ONE_HOP_OP
    from pyg_dist.store import LOOKUP_OP
    _, _, gs, fs = one_part
    try:
        register_callees((gs, fs))
        assert {ONE_HOP_OP, LOOKUP_OP} <= set(rpc.registered_callees())
    finally:
        rpc.unregister_callee(ONE_HOP_OP)
        rpc.unregister_callee(LOOKUP_OP)
    with pytest.raises(InvalidArgumentError, match="sampler_or_stores"):
        register_callees("nope")


@pytest.mark.parametrize("kwargs, name", [
    (dict(time_attr="stamp"), "time_attr"), (dict(time_attr="edge_time"), "time_attr"),
    (dict(weight_attr="w"), "weight_attr"), (dict(concurrency=0), "concurrency"),
    (dict(directed=False), "directed"), (dict(subgraph_type="induced"), "subgraph_type"),
    (dict(temporal_strategy="first"), "temporal_strategy"), (dict(backend="gpu"), "backend"),
    (dict(timeout=0), "timeout"), (dict(stats={}), "stats"), (dict(node_attrs=["x", "colour"]), "node_attrs"),
    (dict(edge_attrs="edge_attr"), "edge_attrs"),
])
def test_bad_arguments_are_named(one_part, kwargs, name):
    _, _, gs, fs = one_part
    with pytest.raises(InvalidArgumentError, match=f"'{name}'"):
        DistNeighborSampler(gs, fs, [2], serve=False, **kwargs)


def test_bad_inputs_are_named(one_part):
    _, _, gs, fs = one_part
    with pytest.raises(InvalidArgumentError, match="'graph_store'"):
        DistNeighborSampler(fs, fs, [2], serve=False)
    with pytest.raises(InvalidArgumentError, match="'feature_store'"):
        DistNeighborSampler(gs, None, [2], serve=False)
    with pytest.raises(InvalidArgumentError, match="'num_neighbors'"):
        DistNeighborSampler(gs, fs, [2, -5], serve=False)
    sampler = DistNeighborSampler(gs, fs, [2], serve=False)
    with pytest.raises(InvalidArgumentError, match="'seed'"):
        sampler.sample_typed({"_N": torch.tensor([500])})
    with pytest.raises(InvalidArgumentError, match="'seed_time'"):
        sampler.sample_typed({"_N": torch.tensor([1])}, {"_N": torch.tensor([3])})
    temporal = DistNeighborSampler(gs, fs, [2], time_attr="time", serve=False)
    with pytest.raises(InvalidArgumentError, match="'seed_time'"):
        temporal.sample_typed({"_N": torch.tensor([1, 2])}, {"_N": torch.tensor([3])})
    out = temporal.sample_typed({"_N": torch.tensor([1, 2])})  # defaults to the seeds' node time
    assert out.batch is not None


def test_pyg_written_folder_routes_by_owner(tmp_path):
    """In a folder written by PyG every partition's CSC spans all nodes but holds only the in-edges of
    the nodes it owns: routing must follow the book, and the local part equals the original graph."""
    from test_partition_pyg_format import write_pyg_homo
    data = synthetic_graph(300, 6, node_time=True, edge_time=True, edge_dim=2, seed=1)
    owner = torch.randint(0, 2, (300,), generator=torch.Generator().manual_seed(0))
    write_pyg_homo(data, owner, tmp_path / "pyg", 2)
    gs, fs = load_stores(tmp_path / "pyg", 0)
    graph = PartitionGraph.from_store(gs)
    et = ("_N", "_E", "_N")
    ids = torch.arange(300)
    route = route_frontier(ids, graph.local_range[et], graph.owner_fn("_N"), 0)
    assert torch.equal(route.local_ids, (owner == 0).nonzero().view(-1)) and set(route.remote) == {1}
    seeds = (owner == 0).nonzero().view(-1)[:10]
    out = DistNeighborSampler(gs, fs, [-1], fetch_features=False, serve=False).sample_from_nodes(
        NodeSamplerInput(None, seeds))
    want = NeighborSampler(data, [-1]).sample_from_nodes(NodeSamplerInput(None, seeds))
    assert sorted(out.node.tolist()) == sorted(want.node.tolist()) and out.metadata.features is None
    assert torch.equal(data.edge_index[0, out.edge], out.node[out.row])
    assert torch.equal(data.edge_index[1, out.edge], out.node[out.col])
