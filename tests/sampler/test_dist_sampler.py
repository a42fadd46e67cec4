"""DistNeighborSampler pieces in one process: routing and merging (pure), the one-hop service, a
one-partition folder (no RPC needed) against the one-process sampler, and argument errors."""
from __future__ import annotations

import pickle

import pytest
import torch
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format import PartitionBook, load_original_ids
from pyg_dist.ops import CSC, OneHop, available_backends, make_edge_buffer, make_relabeler, one_hop
from pyg_dist.partition import Partitioner
from pyg_dist.sampler import NeighborSampler
from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.hops import serve_one_hop
from pyg_dist.sampler.messages import FeatureBatch, HopTask, OneHopRequest
from pyg_dist.sampler.plan import plan_hop
from pyg_dist.sampler.stats import SamplerStats
from pyg_dist.store import load_stores
from pyg_dist.store.routing import route_ids, segment_pieces
from pyg_dist.testing import write_pyg_homo


# ----------------------------------------------------------------------------------------- routing
@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("disjoint", [False, True])
def test_route_and_merge_restore_frontier_order(backend, disjoint):
    """Splitting a frontier over 3 owners and merging the per-owner pieces into the batch's edge buffer
    equals sampling the frontier whole and appending it (edges, relabelled rows, subgraph ids)."""
    if backend == "numba" and "numba" not in available_backends():
        pytest.skip("numba is not installed")
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 90, (2, 600), generator=gen)
    csc = CSC.from_edge_index(ei, num_dst=90)
    frontier = torch.randperm(90, generator=gen)[:40]
    book = PartitionBook({"_N": torch.tensor([0, 30, 60, 90])})  # partition p owns [30p, 30p + 30)
    route = route_ids(book, 1, "_N", frontier, local_range=(30, 60))
    assert set(route.remote) == {0, 2} and route.num_local == int(((frontier >= 30) & (frontier < 60)).sum())
    assert torch.equal(route.local_rows + 30, frontier[route.local_pos])
    local = one_hop(csc, frontier[route.local_pos], -1)
    remote = {p: one_hop(csc, frontier[pos], -1) for p, pos in route.remote.items()}
    batch = torch.arange(40) % 7 if disjoint else None
    outs = []
    for merge in (False, True):
        rel, buf = make_relabeler(90, disjoint, backend, capacity=91), make_edge_buffer(backend, 8)
        rel.add(frontier, batch)
        if merge:
            buf.append_pieces(40, segment_pieces(route, local, remote), 3, rel, batch)
        else:
            buf.append_one_hop(one_hop(csc, frontier, -1), 3, rel, batch)
        outs.append((buf.tensors(), rel.nodes.clone(), None if batch is None else rel.batch.clone()))
        rel.close()
    (want, want_nodes, want_batch), (got, got_nodes, got_batch) = outs
    assert want[0].numel() == int(csc.colptr[frontier + 1].sum() - csc.colptr[frontier].sum()) > 0
    assert all(torch.equal(a, b) for a, b in zip(want, got)) and torch.equal(want_nodes, got_nodes)
    assert want_batch is None or torch.equal(want_batch, got_batch)
    with pytest.raises(PyGDistError, match="one-hop reply"):
        one = torch.ones(1, dtype=torch.long)
        segment_pieces(route, local, {**remote, 0: OneHop(one * 0, one * 0, one)})


def test_merged_pieces_must_add_up():
    """A piece whose counts do not match the samples it holds fails loudly (never a silent short batch)."""
    if "numba" not in available_backends():
        pytest.skip("numba is not installed")
    rel, buf = make_relabeler(10, False, "numba", capacity=11), make_edge_buffer("numba", 8)
    two = torch.tensor([2, 0])
    with pytest.raises(PyGDistError, match="count 3 samples and hold 2"):
        buf.append_pieces(2, [(torch.tensor([1]), OneHop(two, two, torch.tensor([2]))),
                              (torch.tensor([0]), OneHop(two[:0], two[:0], torch.tensor([1])))], 0, rel, None)
    rel.close()


def _graph_of(book, part, local_range):
    ets = [("a", "r", "b"), ("b", "s", "b")]
    return SamplingGraph(part, ["a", "b"], ets, {"a": 30, "b": 30}, {et: None for et in ets},
                         {et: local_range for et in ets}, {et: local_range for et in ets}, {}, book)


def test_plan_groups_edge_types_into_one_request_per_partition():
    book = PartitionBook({"a": torch.tensor([0, 10, 20, 30]), "b": torch.tensor([0, 10, 20, 30])})
    tasks = [HopTask(("a", "r", "b"), torch.tensor([1, 15, 25, 3]), 5, 9, torch.tensor([7, 8, 9, 10])),
             HopTask(("b", "s", "b"), torch.tensor([12, 2]), -1, 4)]
    plan = plan_hop(tasks, _graph_of(book, 0, (0, 10)), OneHopRequest(-1, (), replace=True))
    assert sorted(plan.requests) == [1, 2] and plan.slots == {1: [0, 1], 2: [0]}
    req = plan.requests[1]
    assert req.partition == 1 and req.replace and [t.seeds.tolist() for t in req.tasks] == [[15], [12]]
    assert req.tasks[0].seed_time.tolist() == [8] and req.tasks[1].seed_time is None
    assert [t.key for t in req.tasks] == [9, 4]  # every partition draws from the task's key
    assert plan.num_remote_seeds == 3 and plan.rows[1].tolist() == [2]
    everything_here = plan_hop(tasks, _graph_of(book, 0, (0, 30)), OneHopRequest(-1, ()))
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
    dist = DistNeighborSampler(gs, fs, [4, 3], stats=stats)
    seeds = torch.tensor([3, 77, 150, 499])
    torch.manual_seed(7)
    out = dist.sample_from_nodes(NodeSamplerInput(torch.arange(4), seeds))
    assert out.node[:4].tolist() == seeds.tolist()
    o = orig["_N"]
    assert torch.equal(data.edge_index[0, orig[("_N", "_E", "_N")][out.edge]], o[out.node[out.row]])
    fb = out.metadata.features
    assert isinstance(fb, FeatureBatch) and torch.equal(fb.node["_N"]["x"], data.x[o[out.node]])
    assert torch.equal(fb.node_attr("y")["_N"], data.y[o[out.node]])
    et = ("_N", "_E", "_N")
    assert torch.equal(fb.edge_attr("edge_attr")[et], data.edge_attr[orig[et][out.edge]])
    assert out.metadata.input_id.tolist() == [0, 1, 2, 3] and out.metadata.seed_time is None
    s = stats.summary()
    assert s["batches"] == 1 and s["local_node_frac"] == 1.0 and s["requests_per_batch"] == 0
    assert s["hop_seeds_local"] == 4 + out.num_sampled_nodes[1]
    rows = dist.lookup_rows({"_N": torch.tensor([7, 0])}, {("_N", "_E", "_N"): torch.tensor([3])})
    assert torch.equal(rows.node["_N"]["x"], data.x[o[torch.tensor([7, 0])]]) and "y" in rows.node["_N"]
    assert torch.equal(rows.edge[("_N", "_E", "_N")]["edge_attr"], data.edge_attr[orig[("_N", "_E", "_N")][[3]]])
    only_x = DistNeighborSampler(gs, fs, [2], node_attrs=["x"], edge_attrs=["edge_weight"])
    fb = only_x.sample_from_nodes(NodeSamplerInput(None, seeds)).metadata.features
    assert list(fb.node["_N"]) == ["x"] and list(fb.edge[("_N", "_E", "_N")]) == ["edge_weight"]


def test_bidirectional_disjoint_and_link_outputs(one_part):
    data, orig, gs, fs = one_part
    bi = DistNeighborSampler(gs, fs, [3, 2], subgraph_type="bidirectional")
    out = bi.sample_from_nodes(NodeSamplerInput(None, torch.tensor([1, 2, 3])))
    assert out.metadata.features.edge[("_N", "_E", "_N")]["edge_attr"].size(0) == out.edge.numel()
    dis = DistNeighborSampler(gs, fs, [2], disjoint=True)
    out = dis.sample_from_nodes(NodeSamplerInput(None, torch.tensor([5, 5, 9])))
    assert out.batch[:3].tolist() == [0, 1, 2] and out.node[:3].tolist() == [5, 5, 9]
    inp = EdgeSamplerInput(None, torch.tensor([0, 1]), torch.tensor([2, 3]), label=torch.tensor([1.0, 1.0]))
    out = dis.sample_from_edges(inp, NegativeSampling("binary", 2))
    md = out.metadata
    assert md.edge_label.tolist() == [1, 1, 0, 0, 0, 0]
    assert out.node[md.edge_label_index[:, :2]].tolist() == [[0, 1], [2, 3]]  # the positives, then negatives
    assert torch.equal(md.features.node["_N"]["x"], data.x[orig["_N"][out.node]])  # a row for every node


def test_serve_one_hop_checks_routing(one_part):
    _, _, gs, _ = one_part
    graph = SamplingGraph.from_store(gs)
    et = ("_N", "_E", "_N")
    reply = serve_one_hop(graph, OneHopRequest(0, (HopTask(et, torch.tensor([4, 8]), -1),)))
    csc = gs.local_csc()
    want = one_hop(csc, torch.tensor([4, 8]), -1, key=0)
    assert torch.equal(reply.results[0].nbr, want.nbr) and torch.equal(reply.results[0].count, want.count)
    with pytest.raises(PyGDistError, match="reached partition 0"):
        serve_one_hop(graph, OneHopRequest(1, ()))
    with pytest.raises(PyGDistError, match="does not hold"):
        serve_one_hop(graph, OneHopRequest(0, (HopTask(et, torch.tensor([10 ** 6]), -1),)))


def test_pickled_sampler_reopens_its_folder(one_part):
    _, _, gs, fs = one_part
    sampler = DistNeighborSampler(gs, fs, [2, 2])
    clone = pickle.loads(pickle.dumps(sampler))
    a = sampler.sample_typed({"_N": torch.tensor([1, 2])}, key=3)
    b = clone.sample_typed({"_N": torch.tensor([1, 2])}, key=3)
    et = ("_N", "_E", "_N")
    assert torch.equal(a.node["_N"], b.node["_N"]) and torch.equal(a.edge[et], b.edge[et])


def test_serve_partition_serves_both_ops(one_part):
    from pyg_dist import rpc
    from pyg_dist.sampler.messages import ONE_HOP_OP
    from pyg_dist.store import LOOKUP_OP
    _, _, gs, fs = one_part
    try:
        serve_partition(gs, fs)
        assert {ONE_HOP_OP, LOOKUP_OP} <= set(rpc.registered_callees())
    finally:
        rpc.unregister_callee(ONE_HOP_OP)
        rpc.unregister_callee(LOOKUP_OP)
    with pytest.raises(InvalidArgumentError, match="graph_store"):
        serve_partition("nope", fs)
    with pytest.raises(InvalidArgumentError, match="feature_store"):
        serve_partition(gs, None)


@pytest.mark.parametrize("kwargs, name", [
    (dict(time_attr="stamp"), "time_attr"), (dict(time_attr="edge_time"), "time_attr"),
    (dict(weight_attr="w"), "weight_attr"), (dict(concurrency=0), "concurrency"),
    (dict(subgraph_type="induced", disjoint=True), "subgraph_type"),
    (dict(temporal_strategy="first"), "temporal_strategy"), (dict(backend="gpu"), "backend"),
    (dict(timeout=0), "timeout"), (dict(stats={}), "stats"), (dict(node_attrs=["x", "colour"]), "node_attrs"),
    (dict(edge_attrs="edge_attr"), "edge_attrs"),
])
def test_bad_arguments_are_named(one_part, kwargs, name):
    _, _, gs, fs = one_part
    with pytest.raises(InvalidArgumentError, match=f"'{name}'"):
        DistNeighborSampler(gs, fs, [2], **kwargs)


def test_bad_inputs_are_named(one_part):
    data, orig, gs, fs = one_part
    with pytest.raises(InvalidArgumentError, match="'graph_store'"):
        DistNeighborSampler(fs, fs, [2])
    with pytest.raises(InvalidArgumentError, match="'feature_store'"):
        DistNeighborSampler(gs, None, [2])
    with pytest.raises(InvalidArgumentError, match="'num_neighbors'"):
        DistNeighborSampler(gs, fs, [2, -5])
    sampler = DistNeighborSampler(gs, fs, [2])
    with pytest.raises(InvalidArgumentError, match="'seed'"):
        sampler.sample_typed({"_N": torch.tensor([500])})
    with pytest.raises(InvalidArgumentError, match="'seed_time'"):
        sampler.sample_typed({"_N": torch.tensor([1])}, {"_N": torch.tensor([3])})
    temporal = DistNeighborSampler(gs, fs, [2], time_attr="time")
    with pytest.raises(InvalidArgumentError, match="'seed_time'"):
        temporal.sample_typed({"_N": torch.tensor([1, 2])}, {"_N": torch.tensor([3])})
    seeds = torch.tensor([1, 2])
    out = temporal.sample_typed({"_N": seeds}, key=11)  # defaults to the seeds' node time
    node, batch, et = out.node["_N"], out.batch["_N"], ("_N", "_E", "_N")
    assert batch.shape == node.shape and batch[:2].tolist() == [0, 1]  # seeds map to themselves
    assert bool(((batch >= 0) & (batch < seeds.numel())).all())       # every node: a valid seed position
    assert out.row[et].numel() > 0 and torch.equal(batch[out.row[et]], batch[out.col[et]])  # disjoint subgraphs
    node_time = data.time[orig["_N"][node]]
    assert bool((node_time <= node_time[:2][batch]).all())            # nothing newer than its subgraph's seed
    explicit = temporal.sample_typed({"_N": seeds}, {"_N": node_time[:2]}, key=11)
    assert torch.equal(explicit.node["_N"], node) and torch.equal(explicit.batch["_N"], batch)


def test_pyg_written_folder_routes_by_owner(tmp_path):
    """In a folder written by PyG every partition's CSC spans all nodes but holds only the in-edges of
    the nodes it owns: routing must follow the book, and the local part equals the original graph."""
    data = synthetic_graph(300, 6, node_time=True, edge_time=True, edge_dim=2, seed=1)
    owner = torch.randint(0, 2, (300,), generator=torch.Generator().manual_seed(0))
    write_pyg_homo(data, owner, tmp_path / "pyg", 2)
    gs, fs = load_stores(tmp_path / "pyg", 0)
    graph = SamplingGraph.from_store(gs)
    et = ("_N", "_E", "_N")
    ids = torch.arange(300)
    plan = plan_hop([HopTask(et, ids, -1)], graph, OneHopRequest(-1, ()))
    assert graph.local_range[et] is None
    assert torch.equal(plan.routes[0].local_pos, (owner == 0).nonzero().view(-1)) and set(plan.requests) == {1}
    assert torch.equal(plan.rows[0], (owner == 0).nonzero().view(-1))  # CSC rows: the dst range starts at 0
    seeds = (owner == 0).nonzero().view(-1)[:10]
    out = DistNeighborSampler(gs, fs, [-1], fetch_features=False).sample_from_nodes(
        NodeSamplerInput(None, seeds))
    want = NeighborSampler(data, [-1]).sample_from_nodes(NodeSamplerInput(None, seeds))
    assert sorted(out.node.tolist()) == sorted(want.node.tolist()) and out.metadata.features is None
    assert torch.equal(data.edge_index[0, out.edge], out.node[out.row])
    assert torch.equal(data.edge_index[1, out.edge], out.node[out.col])
