"""NeighborSampler against oracles: k_hop_subgraph, the input edges, PyG's output semantics."""
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler import HeteroSamplerOutput, NodeSamplerInput, SamplerOutput
from torch_geometric.utils import k_hop_subgraph

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import available_backends
from pyg_dist.sampler import NeighborSampler

BACKENDS = [b for b in ("numba", "torch") if b in available_backends()]


@pytest.fixture(scope="module")
def homo():
    return synthetic_graph(300, 6, num_features=4, node_time=True, edge_weight=True, seed=1)


@pytest.fixture(scope="module")
def hetero():
    return synthetic_graph(300, 6, num_features=4, hetero=True, seed=2)


def _check_semantics(out, ei, num_hops):
    """Every edge exists with its true id; hop structure and counts are consistent (homo output)."""
    node, row, col, edge = out.node, out.row, out.col, out.edge
    assert (ei[0, edge] == node[row]).all() and (ei[1, edge] == node[col]).all()
    assert len(out.num_sampled_nodes) == num_hops + 1 and len(out.num_sampled_edges) == num_hops
    assert sum(out.num_sampled_nodes) == node.numel() and sum(out.num_sampled_edges) == row.numel()
    node_hop = torch.repeat_interleave(torch.arange(num_hops + 1), torch.tensor(out.num_sampled_nodes))
    edge_hop = torch.repeat_interleave(torch.arange(num_hops), torch.tensor(out.num_sampled_edges))
    assert (node_hop[col] == edge_hop).all()          # hop-h edges start from hop-h frontier nodes
    assert (node_hop[row] <= edge_hop + 1).all()      # and reach at most one hop further


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_fanout_equals_k_hop_subgraph(homo, backend):
    sampler = NeighborSampler(homo, [-1, -1], backend=backend)
    seeds = torch.tensor([3, 17, 42, 99])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
    subset, _, _, _ = k_hop_subgraph(seeds, 2, homo.edge_index, num_nodes=homo.num_nodes)
    assert isinstance(out, SamplerOutput)
    assert out.node[:4].tolist() == seeds.tolist()
    assert out.node.unique().numel() == out.node.numel()
    assert sorted(out.node.tolist()) == sorted(subset.tolist())
    _check_semantics(out, homo.edge_index, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hetero_full_fanout_equals_homogeneous_k_hop(hetero, backend):
    sampler = NeighborSampler(hetero, [-1, -1], backend=backend)
    seeds = torch.tensor([0, 5, 9])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds, input_type="author"))
    assert isinstance(out, HeteroSamplerOutput)
    homo = hetero.to_homogeneous()
    types = hetero.node_types
    offset = dict(zip(types, torch.cumsum(torch.tensor([0] + [hetero[t].num_nodes for t in types]), 0).tolist()))
    subset, _, _, _ = k_hop_subgraph(seeds + offset["author"], 2, homo.edge_index, num_nodes=homo.num_nodes)
    got = sorted(int(v) + offset[t] for t in types for v in out.node[t])
    assert got == sorted(subset.tolist())
    assert out.node["author"][:3].tolist() == seeds.tolist()
    for et in hetero.edge_types:
        ei = hetero[et].edge_index
        assert (ei[0, out.edge[et]] == out.node[et[0]][out.row[et]]).all()
        assert (ei[1, out.edge[et]] == out.node[et[2]][out.col[et]]).all()
        assert sum(out.num_sampled_edges[et]) == out.row[et].numel()
    for t in types:
        assert sum(out.num_sampled_nodes[t]) == out.node[t].numel() == out.node[t].unique().numel()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("replace", [False, True])
def test_fanout_respected_and_no_duplicates(homo, backend, replace):
    sampler = NeighborSampler(homo, [4, 3], replace=replace, backend=backend)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(0, 300, 7)))
    _check_semantics(out, homo.edge_index, 2)
    per_dst = torch.bincount(out.col, minlength=out.node.numel())
    assert per_dst.max() <= 4
    if not replace:
        pairs = out.col * homo.edge_index.size(1) + out.edge
        assert pairs.unique().numel() == pairs.numel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_weight_edges_never_sampled(homo, backend):
    data = homo.clone()
    data.edge_weight = torch.where(torch.arange(data.num_edges) % 3 == 0, 0.0, data.edge_weight)
    sampler = NeighborSampler(data, [5, 5], weight_attr="edge_weight", backend=backend)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(0, 300, 3)))
    _check_semantics(out, data.edge_index, 2)
    assert out.edge.numel() > 0 and (data.edge_weight[out.edge] > 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_node_time(homo, backend, strategy):
    sampler = NeighborSampler(homo, [3, 3], time_attr="time", temporal_strategy=strategy, backend=backend)
    assert sampler.disjoint  # temporal forces disjoint, like PyG
    seeds = torch.arange(0, 300, 5)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
    seed_time = homo.time[seeds]
    assert (homo.time[out.node] <= seed_time[out.batch]).all()
    assert (out.batch[out.row] == out.batch[out.col]).all()
    if strategy == "last":  # first hop: the 3 most recent allowed in-neighbours of each seed
        ei, first = homo.edge_index, out.num_sampled_edges[0]
        for i, s in enumerate(seeds.tolist()):
            nbr_t = homo.time[ei[0, ei[1] == s]]
            allowed = nbr_t[nbr_t <= seed_time[i]].sort(descending=True).values[:3]
            got = homo.time[out.node[out.row[:first][out.col[:first] == i]]]
            assert sorted(got.tolist()) == sorted(allowed.tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_temporal_edge_time_with_given_seed_time(backend):
    data = synthetic_graph(200, 6, edge_time=True, seed=4)
    sampler = NeighborSampler(data, [4, 4], time_attr="edge_time", backend=backend)
    seeds = torch.arange(0, 200, 4)
    t = torch.full((seeds.numel(),), 40)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds, time=t))
    assert out.metadata[1] is t
    assert out.edge.numel() > 0 and (data.edge_time[out.edge] <= 40).all()
    with pytest.raises(InvalidArgumentError, match="seed_time"):
        sampler.sample_from_nodes(NodeSamplerInput(None, seeds))


@pytest.mark.parametrize("backend", BACKENDS)
def test_disjoint_subgraphs_do_not_mix(homo, backend):
    sampler = NeighborSampler(homo, [3, 2], disjoint=True, backend=backend)
    seeds = torch.tensor([7, 7, 8])  # a repeated seed is its own subgraph
    out = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(3), seeds))
    assert out.node[:3].tolist() == [7, 7, 8] and out.batch[:3].tolist() == [0, 1, 2]
    assert (out.batch[out.row] == out.batch[out.col]).all()
    key = out.batch * homo.num_nodes + out.node
    assert key.unique().numel() == key.numel()
    _check_semantics(out, homo.edge_index, 2)
    assert out.metadata[0].tolist() == [0, 1, 2]


def test_one_type_hetero_equals_homo(homo):
    het = HeteroData()
    het["n"].num_nodes = homo.num_nodes
    het["n", "to", "n"].edge_index = homo.edge_index
    for backend in BACKENDS:
        torch.manual_seed(3)
        a = NeighborSampler(homo, [4, 3], backend=backend).sample_from_nodes(NodeSamplerInput(None, torch.arange(9)))
        torch.manual_seed(3)
        b = NeighborSampler(het, [4, 3], backend=backend).sample_from_nodes(
            NodeSamplerInput(None, torch.arange(9), input_type="n"))
        et = ("n", "to", "n")
        assert torch.equal(a.node, b.node["n"]) and torch.equal(a.row, b.row[et])
        assert torch.equal(a.col, b.col[et]) and torch.equal(a.edge, b.edge[et])
        assert a.num_sampled_nodes == b.num_sampled_nodes["n"]


def test_backends_agree_on_full_fanout(homo):
    seeds = torch.arange(0, 300, 11)
    outs = [NeighborSampler(homo, [-1, -1], backend=b).sample_typed({HOMO_NODE: seeds}) for b in BACKENDS]
    for o in outs[1:]:
        assert torch.equal(o.node[HOMO_NODE].sort().values, outs[0].node[HOMO_NODE].sort().values)
        assert torch.equal(o.edge[HOMO_EDGE].sort().values, outs[0].edge[HOMO_EDGE].sort().values)
        assert o.num_sampled_nodes == outs[0].num_sampled_nodes


def test_per_edge_type_fanouts_and_bidirectional(hetero):
    ets = hetero.edge_types
    sampler = NeighborSampler(hetero, {et: ([0, 0] if et[0] == "field" else [2, 2]) for et in ets},
                              subgraph_type="bidirectional")
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(5), input_type="paper"))
    assert all(out.row[et].numel() == 0 for et in ets if et[0] == "field")


def test_invalid_arguments(homo, hetero):
    with pytest.raises(InvalidArgumentError, match="subgraph_type"):
        NeighborSampler(homo, [2], subgraph_type="induced", disjoint=True)
    with pytest.raises(InvalidArgumentError, match="sample_direction"):
        NeighborSampler(homo, [2], sample_direction="backward")
    with pytest.raises(InvalidArgumentError, match="num_neighbors"):
        NeighborSampler(homo, [2, -5])
    with pytest.raises(InvalidArgumentError, match="num_neighbors"):
        NeighborSampler(hetero, {("paper", "cites", "nobody"): [2]})
    with pytest.raises(InvalidArgumentError, match="time_attr"):
        NeighborSampler(homo, [2], time_attr="missing")
    with pytest.raises(InvalidArgumentError, match="subgraph_type"), \
            pytest.warns(UserWarning, match="'directed' argument in 'NeighborSampler' is deprecated"):
        NeighborSampler(homo, [2], directed=False, disjoint=True)  # directed=False means induced (PyG's warning)
    with pytest.raises(InvalidArgumentError, match="backend"):
        NeighborSampler(homo, [2], backend="dgl")
    sampler = NeighborSampler(homo, [2])
    with pytest.raises(InvalidArgumentError, match="seed"):
        sampler.sample_typed({HOMO_NODE: torch.tensor([300])})
    with pytest.raises(InvalidArgumentError, match="seed"):
        sampler.sample_typed({"paper": torch.tensor([0])})


@pytest.mark.timeout(120)
def test_concurrent_batches_from_python_threads(homo):
    """Kernel entry is serialised and scratch maps are per batch: threads never corrupt each other."""
    from concurrent.futures import ThreadPoolExecutor
    sampler = NeighborSampler(homo, [5, 5])
    seeds = [torch.arange(i, 300, 13) for i in range(12)]

    def run(s):
        return s, sampler.sample_from_nodes(NodeSamplerInput(None, s))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, seeds * 3))
    for s, out in results:
        assert out.node[:s.numel()].tolist() == s.tolist()
        assert out.node.unique().numel() == out.node.numel()
        _check_semantics(out, homo.edge_index, 2)


@pytest.mark.parametrize("bad", ["10,5", 5, None, 2.5])
def test_num_neighbors_of_wrong_type_is_a_typed_error(bad):
    from torch_geometric.data import Data

    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.sampler.neighbor import NeighborSampler
    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(InvalidArgumentError, match="num_neighbors"):
        NeighborSampler(data, bad)
