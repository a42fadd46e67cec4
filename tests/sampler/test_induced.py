"""``subgraph_type='induced'`` against oracles (one machine, a one-partition folder, a 2-partition world),
and the sampler-level input errors with PyG's exception classes and key phrases.

Oracle: the nodes are those of directional sampling with the same key; the edges, as global
``(src, dst, edge id)`` triples, are every edge of the input graph between sampled nodes (a brute-force
filter; PyG's ``subgraph`` for homogeneous graphs).
"""
import contextlib

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput
from torch_geometric.sampler.base import NumNeighbors, SubgraphType
from torch_geometric.utils import subgraph

import pyg_dist
from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed
from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import load_original_ids
from pyg_dist.ops import available_backends
from pyg_dist.partition import Partitioner
from pyg_dist.sampler import NeighborSampler
from pyg_dist.sampler.induced import first_position, per_hop_counts
from pyg_dist.store import load_stores
from pyg_dist.testing import check_edges_and_features, relabelled, served_folders, spawn_world
from pyg_dist.testing.oracles import check_repeats, typed_stores

BACKENDS = [b for b in ("numba", "torch") if b in available_backends()]
HOMO = dict(num_nodes=400, avg_degree=6, num_features=4, edge_dim=2, node_time=True, seed=3)
HETERO = dict(num_nodes=450, avg_degree=6, num_features=4, hetero=True, seed=4)


@pytest.fixture(scope="module")
def graphs():
    return {"homo": synthetic_graph(**HOMO), "hetero": synthetic_graph(**HETERO)}


def oracle(data, node):
    """Per edge type, the (src, dst, edge id) triples of every edge between the nodes ``node`` (typed)."""
    out = {}
    for et, s in typed_stores(data)[1].items():
        ei = s.edge_index
        keep = (torch.isin(ei[0], node[et[0]]) & torch.isin(ei[1], node[et[2]])).nonzero().view(-1)
        out[et] = sorted(zip(ei[0, keep].tolist(), ei[1, keep].tolist(), keep.tolist()))
    return out


def triples(node, row, col, edge):
    """The sampled edges as sorted global (src, dst, edge id) triples per edge type."""
    return {et: sorted(zip(node[et[0]][row[et]].tolist(), node[et[2]][col[et]].tolist(), edge[et].tolist()))
            for et in row}


def check_induced(sample, data, num_hops):
    """An induced TypedSample: oracle edges, no duplicate, sorted by destination, consistent counts."""
    got = triples(sample.node, sample.row, sample.col, sample.edge)
    assert got == oracle(data, sample.node)
    for et, col in sample.col.items():
        assert bool((col[1:] >= col[:-1]).all()), et
        counts = sample.num_sampled_edges[et]
        assert len(counts) == num_hops and sum(counts) == col.numel(), et
    return sum(len(v) for v in got.values())


# ------------------------------------------------------------------------------------- one machine
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["homo", "hetero"])
def test_induced_equals_directional_nodes_and_all_their_edges(graphs, name, backend):
    data = graphs[name]
    seed_type = "paper" if name == "hetero" else HOMO_NODE
    directional = NeighborSampler(data, [2, 2], backend=backend)
    induced = NeighborSampler(data, [2, 2], subgraph_type="induced", backend=backend)
    gen = torch.Generator().manual_seed(0)
    more = 0
    for trial in range(5):
        seeds = {seed_type: torch.randperm(100, generator=gen)[:6]}
        d = directional.sample_typed(seeds, key=40 + trial)
        i = induced.sample_typed(seeds, key=40 + trial)
        assert all(torch.equal(d.node[t], i.node[t]) for t in d.node)          # same nodes, same order
        assert d.num_sampled_nodes == i.num_sampled_nodes
        total = check_induced(i, data, 2)
        mine, theirs = triples(d.node, d.row, d.col, d.edge), triples(i.node, i.row, i.col, i.edge)
        assert all(set(mine[et]) <= set(theirs[et]) for et in mine)            # directional edges included
        more += total - d.total_edges
    assert more > 0  # the oracle is not the directional sample


def test_homo_matches_pyg_subgraph(graphs):
    data = graphs["homo"]
    sampler = NeighborSampler(data, [3, 2], subgraph_type="induced")
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([4, 80, 150])), key=9)
    _, _, mask = subgraph(out.node, data.edge_index, num_nodes=data.num_nodes, return_edge_mask=True)
    assert sorted(out.edge.tolist()) == mask.nonzero().view(-1).tolist()
    assert torch.equal(out.node[out.row], data.edge_index[0, out.edge])
    assert torch.equal(out.node[out.col], data.edge_index[1, out.edge])
    assert len(out.num_sampled_edges) == 2 and sum(out.num_sampled_edges) == out.edge.numel()


def test_repeated_seeds_get_their_in_edges_at_every_position(graphs):
    data = graphs["homo"]
    seeds = torch.tensor([5, 9, 5, 2, 9, 5])
    out = NeighborSampler(data, [2, 2], subgraph_type="induced").sample_from_nodes(NodeSamplerInput(None, seeds),
                                                                                    key=5)
    repeats, checked = check_repeats(out.node, torch.stack([out.row, out.col]), seeds.numel(), seeds)
    assert repeats == 3 and checked > 0
    got = set(zip(out.node[out.row].tolist(), out.node[out.col].tolist(), out.edge.tolist()))
    assert sorted(got) == oracle(data, {HOMO_NODE: out.node})[HOMO_EDGE]
    assert sum(out.num_sampled_edges) == out.edge.numel() and bool((out.col[1:] >= out.col[:-1]).all())


def test_bidirectional_and_directional_unchanged_and_helpers(graphs):
    data = graphs["homo"]
    out = NeighborSampler(data, [2], subgraph_type="bidirectional").sample_from_nodes(
        NodeSamplerInput(None, torch.tensor([1, 2])), key=1)
    assert out.row.numel() % 2 == 0
    found, pos = first_position(torch.tensor([7, 3, 7, 3]), torch.tensor([3, 9, 7, 3]))
    assert found.tolist() == [True, False, True, True] and pos.tolist() == [1, 0, 1]
    assert per_hop_counts(torch.tensor([0, 1, 1, 3]), [1, 2, 1], 2) == [1, 3]
    assert per_hop_counts(torch.tensor([0, 2, 2]), [2, 1], 1) == [3]


@pytest.mark.parametrize("name", ["homo", "hetero"])
def test_neighbor_loader_induced_batches(graphs, name):
    data = graphs[name]
    hetero = name == "hetero"
    inputs = ("paper", torch.arange(60)) if hetero else torch.arange(60)
    loader = pyg_dist.NeighborLoader(data, [2, 2], subgraph_type="induced", input_nodes=inputs, batch_size=16,
                                     seed=3)
    stores = typed_stores(data)[1]
    for n, batch in enumerate(loader):
        node = {t: (batch[t] if hetero else batch).n_id for t in (data.node_types if hetero else [HOMO_NODE])}
        want = oracle(data, node)
        for et, s in stores.items():
            b = batch[et] if hetero else batch
            ei, e_id = b.edge_index, b.e_id
            assert torch.equal(node[et[0]][ei[0]], s.edge_index[0, e_id]), et       # real edges, true ids
            assert torch.equal(node[et[2]][ei[1]], s.edge_index[1, e_id]), et
            assert sorted(e_id.tolist()) == [e for _, _, e in want[et]], et          # all of them
        if n == 2:
            break


@pytest.mark.parametrize("name", ["homo", "hetero"])
def test_link_loader_induced_batches(graphs, name):
    data = graphs[name]
    hetero = name == "hetero"
    et = ("paper", "to", "author") if hetero else HOMO_EDGE
    ei = (data[et] if hetero else data).edge_index[:, :40]
    loader = pyg_dist.LinkNeighborLoader(data, [2, 2], subgraph_type="induced", neg_sampling="binary",
                                         edge_label_index=(et, ei) if hetero else ei, batch_size=8, seed=4)
    for n, batch in enumerate(loader):
        node = {t: (batch[t] if hetero else batch).n_id for t in (data.node_types if hetero else [HOMO_NODE])}
        want = oracle(data, node)
        for typ, s in typed_stores(data)[1].items():
            b = batch[typ] if hetero else batch
            assert torch.equal(node[typ[0]][b.edge_index[0]], s.edge_index[0, b.e_id]), typ
            assert sorted(b.e_id.tolist()) == [e for _, _, e in want[typ]], typ
        label = batch[et] if hetero else batch
        pos = label.input_id.numel()
        eli = label.edge_label_index[:, :pos]
        pairs = torch.stack([node[et[0]][eli[0]], node[et[2]][eli[1]]])
        assert torch.equal(pairs, ei[:, label.input_id])
        if n == 2:
            break


def test_directed_false_means_induced_with_pyg_warning(graphs):
    with pytest.warns(UserWarning, match="subgraph_type='induced'"):
        sampler = NeighborSampler(graphs["homo"], [2], directed=False)
    assert sampler.subgraph_type == "induced"
    check_induced(sampler.sample_typed({HOMO_NODE: torch.tensor([3, 4])}, key=2), graphs["homo"], 1)


@pytest.mark.parametrize("kwargs", [dict(disjoint=True), dict(time_attr="time"), dict(directed=False, disjoint=True)])
def test_induced_with_disjoint_or_temporal_is_refused_like_pyg(graphs, kwargs):
    """PyG: ValueError "'disjoint' sampling not supported for neighbor sampling with
    `subgraph_type='induced'`" (torch_geometric/sampler/neighbor_sampler.py, _sample); temporal is
    disjoint there too."""
    args = dict(subgraph_type="induced", **kwargs) if "directed" not in kwargs else kwargs
    with pytest.warns(UserWarning) if "directed" in kwargs else contextlib.nullcontext():
        with pytest.raises(ValueError, match="'disjoint' sampling not supported") as err:
            NeighborSampler(graphs["homo"], [2], **args)
    assert isinstance(err.value, InvalidArgumentError) and err.value.name == "subgraph_type"


# --------------------------------------------------------------- PyG's exception classes and phrases
def _pyg_message(fn):
    with pytest.raises(ValueError) as err:
        fn()
    return str(err.value)


def test_sampler_input_errors_match_pyg(graphs):
    hetero, homo = graphs["hetero"], graphs["homo"]
    ets = hetero.edge_types
    cases = [
        ({ets[0]: [2, 2], **{et: [2] for et in ets[1:]}}, "Number of hops must be the same across all edge types"),
        ({("paper", "cites", "nobody"): [2]}, "Not all edge types specified in 'num_neighbors' exist in the graph"),
        ({ets[0]: [2]}, "Missing number of neighbors for edge type"),
    ]
    for values, phrase in cases:
        assert phrase in _pyg_message(lambda: NumNeighbors(values).get_values(ets))   # PyG's own words
        with pytest.raises(InvalidArgumentError, match=phrase):
            NeighborSampler(hetero, values)
    assert "is not a valid SubgraphType" in _pyg_message(lambda: SubgraphType("sideways"))
    with pytest.raises(InvalidArgumentError, match="is not a valid SubgraphType"):
        NeighborSampler(homo, [2], subgraph_type="sideways")
    sampler = NeighborSampler(homo, [2])
    neg = NegativeSampling("binary", src_weight=torch.ones(3))
    # PyG 2.8's NegativeSampling.sample means ValueError("The 'weight' attribute in 'NegativeSampling' needs to
    # match the number of nodes ...") but its f-string reads self.weight and raises AttributeError instead.
    inp = EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(InvalidArgumentError, match="needs to match the number of nodes"):
        sampler.sample_from_edges(inp, neg)


# ----------------------------------------------------------------------------- partitioned graphs
def _same(a, b):
    for name in ("node", "row", "col", "edge"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), name
    assert a.num_sampled_edges == b.num_sampled_edges and a.num_sampled_nodes == b.num_sampled_nodes


def test_one_partition_folder_equals_one_machine(tmp_path, graphs):
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    data = graphs["homo"]
    Partitioner(data, 1, method="random").save(tmp_path / "p1", progress=False)
    orig = load_original_ids(tmp_path / "p1")
    gs, fs = load_stores(tmp_path / "p1", 0)
    dist = DistNeighborSampler(gs, fs, [2, 2], subgraph_type="induced")
    local = NeighborSampler(relabelled(data, orig), [2, 2], subgraph_type="induced")
    for key in range(3):
        seeds = {HOMO_NODE: torch.tensor([3, 77, 150, 390]) + key}
        _same(dist.sample_typed(seeds, key=key), local.sample_typed(seeds, key=key))
    out = dist.sample_from_nodes(NodeSamplerInput(None, torch.tensor([1, 2, 3])), key=7)
    check_edges_and_features(out, data, orig, False)        # edge rows fetched for every induced edge
    assert check_induced(local.sample_typed({HOMO_NODE: out.node[:3]}, key=7), relabelled(data, orig), 2) > 0


def induced_world(rank, world_size, jobs):
    """Each rank: induced node and link batches of the 2-partition sampler equal the one-machine sampler's
    on the relabelled graph (same key), and hold every edge among their nodes."""
    from pyg_dist import rpc
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.sampler.stats import SamplerStats
    ctx = DistContext.from_env(num_partitions=world_size)
    report = []
    for root, spec, data, orig, gs, fs in served_folders(jobs, ctx):
        stats = SamplerStats()
        dist = DistNeighborSampler(gs, fs, [2, 2], subgraph_type="induced", backend="numba", stats=stats)
        rel = relabelled(data, orig)
        local = NeighborSampler(rel, [2, 2], subgraph_type="induced", backend="numba")
        t = fs.node_types[0]
        gen = torch.Generator().manual_seed(rank)
        edges = 0
        with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
            for trial in range(3):
                seeds = {t: torch.randperm(fs.num_items(t if fs.is_hetero else None), generator=gen)[:10]}
                key = 100 * rank + trial
                a, b = dist.sample_typed(seeds, key=key), local.sample_typed(seeds, key=key)
                _same(a, b)
                edges += check_induced(a, rel, 2)
            et = fs.edge_types[0]
            ei = (rel[et] if fs.is_hetero else rel).edge_index[:, torch.randperm(20, generator=gen)[:6]]
            inp = EdgeSamplerInput(None, ei[0], ei[1], input_type=et if fs.is_hetero else None)
            out = dist.sample_from_edges(inp, NegativeSampling("binary", 1), key=5)
            want = local.sample_from_edges(inp, NegativeSampling("binary", 1), key=5)
            for name in ("node", "row", "col", "edge"):
                x, y = as_typed(getattr(out, name), 0, fs.is_hetero), as_typed(getattr(want, name), 0, fs.is_hetero)
                assert all(torch.equal(x[k], y[k]) for k in y), name
            assert torch.equal(out.metadata.edge_label_index, want.metadata.edge_label_index)
            check_edges_and_features(out, data, orig, fs.is_hetero)
        report.append((edges, stats.remote_sampling_rounds))
    return report


@pytest.mark.timeout(300)
def test_two_partition_world_equals_one_machine(tmp_path):
    pytest.importorskip("numba")
    jobs = []
    for name, spec, method in (("homo", HOMO, "metis"), ("hetero", HETERO, "random")):
        Partitioner(synthetic_graph(**spec), 2, method=method).save(tmp_path / name, progress=False)
        jobs.append((str(tmp_path / name), spec))
    for report in spawn_world(2, induced_world, jobs, timeout=280):
        for edges, remote_rounds in report:
            assert edges > 0 and remote_rounds > 0


def test_a_data_without_edges_gives_no_induced_edges():
    data = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=5)
    out = NeighborSampler(data, [2, 2], subgraph_type="induced").sample_from_nodes(
        NodeSamplerInput(None, torch.tensor([0, 3])), key=1)
    assert out.node.tolist() == [0, 3] and out.row.numel() == 0 and out.num_sampled_edges == [0, 0]
