"""Disjoint link batches (``LinkNeighborLoader(..., disjoint=True)``) with binary and triplet negatives, on
heterogeneous graphs (source type != destination type, source type == destination type, node types reached
only by sampling) and homogeneous ones, against oracles.

PyG's disjoint layout (torch_geometric/sampler/neighbor_sampler.py, ``edge_sample``): every link example is
its own subgraph and ``batch`` is taken ``% num_pos``, so the positive ``i`` and every negative ``j`` with
``j % num_pos == i`` share batch id ``i``. Seeds: with two node types, example ``j``'s source is seed ``j``
of the source type and its destination seed ``j`` of the destination type; with one type, sources then
destinations. Binary: ``edge_label_index`` is ``arange(n).repeat(2).view(2, -1)`` (two types) or
``arange(2n).view(2, -1)`` (one type). Triplet: ``src_index = arange(P)``; ``dst_pos_index = arange(P)``
(two types) or ``arange(P, 2P)``; ``dst_neg_index`` the following destination seeds ``.view(-1, P).t()``.
"""
import math

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

import pyg_dist
from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.sampler import NeighborSampler
from pyg_dist.testing.oracles import typed_stores

HOPS = 2


@pytest.fixture(scope="module")
def hetero():
    return synthetic_graph(300, 5, num_features=4, hetero=True, seed=11)


@pytest.fixture(scope="module")
def homo():
    return synthetic_graph(200, 5, num_features=4, seed=12)


def _store(batch, key):
    return batch[key] if isinstance(batch, HeteroData) else batch


def _reachable(edges, start, hops):
    """Typed ids reachable from ``start`` ({type: set}) along at most ``hops`` in-edges (dst -> src)."""
    seen = {t: set(v) for t, v in start.items()}
    frontier = {t: set(v) for t, v in start.items()}
    for _ in range(hops):
        new = {}
        for et, ei in edges.items():
            if not frontier.get(et[2]):
                continue
            mask = torch.isin(ei[1], torch.tensor(sorted(frontier[et[2]])))
            new.setdefault(et[0], set()).update(ei[0, mask].tolist())
        frontier = {t: v - seen.get(t, set()) for t, v in new.items()}
        for t, v in new.items():
            seen.setdefault(t, set()).update(v)
    return seen


def _endpoints(batch, et, mode, num_pos, amount):
    """Per batch id, the (type, local index) of the seed endpoints of its examples, checking PyG's layout
    of the index tensors on the way."""
    src_t, dst_t = et[0], et[-1]
    one_type = src_t == dst_t
    ends = {b: [] for b in range(num_pos)}
    if mode == "binary":
        n = num_pos + math.ceil(amount * num_pos)
        eli = _store(batch, et).edge_label_index
        want = torch.arange(2 * n).view(2, -1) if one_type else torch.arange(n).repeat(2).view(2, -1)
        assert torch.equal(eli, want)
        for j in range(n):
            ends[j % num_pos] += [(src_t, int(eli[0, j])), (dst_t, int(eli[1, j]))]
        return ends
    src_index, dst_pos = _store(batch, src_t).src_index, _store(batch, dst_t).dst_pos_index
    dst_neg = _store(batch, dst_t).dst_neg_index.view(num_pos, -1)
    first = num_pos if one_type else 0
    assert torch.equal(src_index, torch.arange(num_pos))
    assert torch.equal(dst_pos, torch.arange(first, first + num_pos))
    start = first + num_pos
    assert torch.equal(dst_neg, torch.arange(start, start + amount * num_pos).view(-1, num_pos).t())
    for i in range(num_pos):
        ends[i] += [(src_t, int(src_index[i])), (dst_t, int(dst_pos[i]))]
        ends[i] += [(dst_t, int(k)) for k in dst_neg[i]]
    return ends


def check_batch(data, batch, et, mode, amount, label_index):
    """The oracle checks of one disjoint link batch (see the module docstring)."""
    node_types = data.node_types if isinstance(data, HeteroData) else [HOMO_NODE]
    edges = {k: s.edge_index for k, s in typed_stores(data)[1].items()}
    n_id = {t: _store(batch, t).n_id for t in node_types}
    bid = {t: _store(batch, t).batch for t in node_types}
    input_id = _store(batch, et).input_id
    num_pos = input_id.numel()
    for t in node_types:
        assert bid[t].shape == n_id[t].shape and bool(((bid[t] >= 0) & (bid[t] < num_pos)).all()), t
    for k in edges:                                    # every sampled edge stays inside one subgraph
        s = _store(batch, k)
        assert torch.equal(bid[k[0]][s.edge_index[0]], bid[k[2]][s.edge_index[1]]), k
        assert torch.equal(n_id[k[0]][s.edge_index[0]], edges[k][0, s.e_id]), k
        assert torch.equal(n_id[k[2]][s.edge_index[1]], edges[k][1, s.e_id]), k
    ends = _endpoints(batch, et, mode, num_pos, amount)
    want = label_index[:, input_id]                    # the requested positives sit where the indices say
    src_t, dst_t = et[0], et[-1]
    if mode == "binary":
        eli = _store(batch, et).edge_label_index
        assert torch.equal(n_id[src_t][eli[0, :num_pos]], want[0])
        assert torch.equal(n_id[dst_t][eli[1, :num_pos]], want[1])
    else:
        assert torch.equal(n_id[src_t][_store(batch, src_t).src_index], want[0])
        assert torch.equal(n_id[dst_t][_store(batch, dst_t).dst_pos_index], want[1])
    for b, seeds in ends.items():
        for t, i in seeds:                             # seed endpoints carry their example's batch id
            assert int(bid[t][i]) == b, (t, i, b)
        start = {}
        for t, i in seeds:
            start.setdefault(t, set()).add(int(n_id[t][i]))
        near = _reachable(edges, start, HOPS)
        for t in node_types:                           # every node of subgraph b is near b's endpoints
            ids = set(n_id[t][bid[t] == b].tolist())
            assert ids <= near.get(t, set()), (t, b, ids - near.get(t, set()))


CASES = [("hetero", ("paper", "to", "author")), ("hetero", ("paper", "to", "paper")), ("homo", HOMO_EDGE)]


@pytest.mark.parametrize("mode,amount", [("binary", 1), ("binary", 2), ("triplet", 1), ("triplet", 2)])
@pytest.mark.parametrize("graph,et", CASES)
def test_disjoint_link_loader(graph, et, mode, amount, hetero, homo):
    data = hetero if graph == "hetero" else homo
    is_hetero = graph == "hetero"
    label_index = (data[et] if is_hetero else data).edge_index[:, :18]
    loader = pyg_dist.LinkNeighborLoader(data, num_neighbors=[2] * HOPS, batch_size=4, disjoint=True, seed=1,
                                         edge_label_index=(et, label_index) if is_hetero else label_index,
                                         neg_sampling=NegativeSampling(mode, amount))
    batches = 0
    for batch in loader:
        check_batch(data, batch, et if is_hetero else HOMO_EDGE, mode, amount, label_index)
        batches += 1
    assert batches == math.ceil(18 / 4)


def test_a_type_reached_only_by_sampling_gets_batch_ids(hetero):
    """The reported crash: nodes of 'field' (neither endpoint type) and seed types of different lengths."""
    et = ("paper", "to", "author")
    sampler = NeighborSampler(hetero, [2, 2], disjoint=True)
    ei = hetero[et].edge_index[:, :5]
    for neg in (NegativeSampling("binary", 1.5), NegativeSampling("triplet", 3), None):
        out = sampler.sample_from_edges(EdgeSamplerInput(None, ei[0], ei[1], input_type=et), neg, key=3)
        assert set(out.batch) == set(hetero.node_types) and out.node["field"].numel() > 0
        for t, b in out.batch.items():
            assert b.shape == out.node[t].shape and bool(((b >= 0) & (b < 5)).all()), t
        for k, row in out.row.items():
            assert torch.equal(out.batch[k[0]][row], out.batch[k[2]][out.col[k]]), k
