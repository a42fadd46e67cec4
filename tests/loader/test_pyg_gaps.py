"""PyG loader semantics the one-machine loaders follow: graphs without edges, partial node time, index
sequences as seeds, PyG's exception classes. Oracles are written from PyG's documented semantics."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NegativeSampling

import pyg_dist


def _label_pairs(batch, store=None):
    s = batch if store is None else batch[store]
    return s.edge_label_index


@pytest.mark.parametrize("hops", [[], [3]])
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_link_loading_on_a_graph_without_edges(hops, neg):
    labels = torch.randint(0, 100, (2, 50), generator=torch.Generator().manual_seed(0))
    loader = pyg_dist.LinkNeighborLoader(Data(num_nodes=100), num_neighbors=hops, edge_label_index=labels,
                                         batch_size=20, neg_sampling=neg, seed=1)
    seen = []
    for batch in loader:
        assert sum(batch.num_sampled_edges) == 0
        if neg == "triplet":
            src, pos = batch.n_id[batch.src_index], batch.n_id[batch.dst_pos_index]
            seen.append(torch.stack([src, pos]))
            assert batch.dst_neg_index.max() < batch.n_id.numel()
        else:
            eli = batch.n_id[batch.edge_label_index]
            pos = eli[:, batch.edge_label == 1] if neg == "binary" else eli
            seen.append(pos)
        assert "edge_index" not in batch or batch.edge_index.size(1) == 0
    assert torch.equal(torch.cat(seen, 1), labels)  # every label edge, once, in order


@pytest.mark.parametrize("neg", [None, "binary"])
def test_hetero_link_loading_without_edges(neg):
    data = HeteroData(paper=dict(num_nodes=100), author=dict(num_nodes=30))
    labels = torch.stack([torch.arange(40) % 100, torch.arange(40) % 30])
    loader = pyg_dist.LinkNeighborLoader(data, num_neighbors=[], edge_label_index=(("paper", "author"), labels),
                                         batch_size=16, neg_sampling=neg)
    got = []
    for batch in loader:
        et = ("paper", "to", "author")
        eli = batch[et].edge_label_index
        pairs = torch.stack([batch["paper"].n_id[eli[0]], batch["author"].n_id[eli[1]]])
        got.append(pairs[:, batch[et].edge_label == 1] if neg else pairs)
    assert torch.equal(torch.cat(got, 1), labels)
    loader = pyg_dist.LinkNeighborLoader(HeteroData(paper=dict(num_nodes=100)), num_neighbors=[],
                                         edge_label_index=(("paper", "paper"), labels % 30), batch_size=16)
    assert next(iter(loader))["paper", "to", "paper"].edge_label_index.size(1) == 16


def test_an_edge_type_with_an_empty_edge_index_still_works():
    data = HeteroData(paper=dict(num_nodes=10, x=torch.randn(10, 2)))
    data["paper", "cites", "paper"].edge_index = torch.empty(2, 0, dtype=torch.long)
    batch = next(iter(pyg_dist.NeighborLoader(data, [2], input_nodes="paper", batch_size=4)))
    assert batch["paper"].n_id.tolist() == [0, 1, 2, 3]


def _partial_time():
    data = HeteroData()
    data["a"].num_nodes = 3
    data["b"].num_nodes, data["b"].time = 5, torch.tensor([0, 1, 2, 3, 4])
    data["c"].num_nodes, data["c"].time = 3, torch.tensor([10, 11, 12])
    data["b", "to", "a"].edge_index = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 1]])
    data["c", "to", "a"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 2]])
    data["a", "to", "b"].edge_index = torch.tensor([[0, 1, 2], [4, 4, 4]])
    return data


def test_node_time_on_some_types_only():
    data = _partial_time()
    loader = pyg_dist.NeighborLoader(data, [-1, -1], input_nodes="a", time_attr="time",
                                     input_time=torch.tensor([2, 3, 20]), batch_size=3)
    batch = next(iter(loader))
    # hand-computed per seed (disjoint, as temporal sampling is): a0 (t=2) reaches b0, b1, b2 (times <= 2);
    # a1 (t=3) reaches b3 (t=3), not b4 (t=4); a2 (t=20) reaches c2 (t=12). c is excluded for a0, a1
    # (every c time is later); type a carries no time, so b4 -> a is never filtered by a's time.
    b_ids = batch["b"].n_id[batch["b"].batch == 0].tolist(), batch["b"].n_id[batch["b"].batch == 1].tolist()
    assert sorted(b_ids[0]) == [0, 1, 2] and b_ids[1] == [3]
    assert batch["c"].n_id.tolist() == [2] and batch["c"].batch.tolist() == [2]
    # hop 2 from b (a has no time: a's in-edges a->b are not time-filtered): b4 is not reached (b4 is not
    # sampled) and the a->b edges point at b4 only, so no a beyond the seeds
    assert batch["a"].n_id.tolist() == [0, 1, 2]


def test_a_type_whose_every_time_is_later_yields_no_nodes():
    data = _partial_time()
    loader = pyg_dist.NeighborLoader(data, [-1], input_nodes="a", time_attr="time",
                                     input_time=torch.full((3,), 5), batch_size=3)
    assert next(iter(loader))["c"].n_id.numel() == 0


@pytest.mark.parametrize("make", [lambda i: range(i.start, i.stop), lambda i: list(i), lambda i: tuple(i),
                                  lambda i: np.arange(i.start, i.stop), lambda i: torch.arange(i.start, i.stop,
                                                                                              dtype=torch.int32)])
def test_index_sequences_as_seeds(make):
    data = pyg_dist.synthetic_graph(200, 5, num_features=4, seed=3)
    hetero = pyg_dist.synthetic_graph(200, 5, num_features=4, hetero=True, node_types=("paper", "author"), seed=3)
    ref = next(iter(pyg_dist.NeighborLoader(data, [3], input_nodes=torch.arange(10, 60), batch_size=50, seed=2)))
    got = next(iter(pyg_dist.NeighborLoader(data, [3], input_nodes=make(range(10, 60)), batch_size=50, seed=2)))
    assert torch.equal(ref.n_id, got.n_id) and torch.equal(ref.edge_index, got.edge_index)
    ref = next(iter(pyg_dist.NeighborLoader(hetero, [3], input_nodes=("paper", torch.arange(10, 60)), batch_size=50)))
    got = next(iter(pyg_dist.NeighborLoader(hetero, [3], input_nodes=("paper", make(range(10, 60))), batch_size=50)))
    assert torch.equal(ref["paper"].n_id[:50], got["paper"].n_id[:50])


def test_bad_index_sequences_raise():
    data = pyg_dist.synthetic_graph(50, 3, seed=1)
    with pytest.raises(ValueError, match="input_nodes"):
        pyg_dist.NeighborLoader(data, [2], input_nodes=[0.5, 1.5], batch_size=2)
    with pytest.raises(ValueError, match="input_nodes"):
        pyg_dist.NeighborLoader(data, [2], input_nodes=range(45, 55), batch_size=2)


def test_pyg_exception_classes_and_phrases():
    data = pyg_dist.synthetic_graph(50, 3, seed=1, node_time=True)
    with pytest.raises(ValueError, match="Received conflicting 'input_time' and 'time_attr' arguments"):
        pyg_dist.NeighborLoader(data, [2], input_time=torch.zeros(50), batch_size=2)
    with pytest.raises(ValueError, match="Received conflicting 'edge_label_time' and 'time_attr' arguments"):
        pyg_dist.LinkNeighborLoader(data, [2], time_attr="time", batch_size=2)
    with pytest.raises(ValueError, match="'edge_label' needs to be undefined for 'triplet'-based"):
        pyg_dist.LinkNeighborLoader(data, [2], edge_label=torch.ones(data.num_edges), batch_size=2,
                                    neg_sampling=NegativeSampling("triplet"))
    with pytest.raises(ValueError, match="neither a node-level or edge-level attribute"):
        pyg_dist.NeighborLoader(data, [2], time_attr="nope", input_time=torch.zeros(50), batch_size=2)
    with pytest.raises(ValueError, match="Expected a 'Data', 'HeteroData', or a tuple of 'FeatureStore'"):
        pyg_dist.NeighborLoader({"x": 1}, [2], batch_size=2)


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_filter_per_worker_gives_the_same_batches(filter_per_worker):
    data = pyg_dist.synthetic_graph(200, 5, num_features=4, seed=3)
    kw = dict(num_neighbors=[3, 2], batch_size=50, seed=9)
    ref = list(pyg_dist.NeighborLoader(data, **kw))
    got = list(pyg_dist.NeighborLoader(data, num_workers=2, filter_per_worker=filter_per_worker, **kw))
    assert len(ref) == len(got) == 4
    for a, b in zip(ref, got):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)


def test_transform_sampler_output_runs_before_the_batch_is_built():
    data = pyg_dist.synthetic_graph(100, 4, num_features=4, seed=3)

    def only_seeds(out):  # keep the seeds and no edges: the batch is built from what it returns
        out.node = out.node[:10]
        out.row, out.col, out.edge = out.row[:0], out.col[:0], out.edge[:0]
        return out

    batch = next(iter(pyg_dist.NeighborLoader(data, [3], batch_size=10, transform_sampler_output=only_seeds)))
    assert batch.n_id.tolist() == list(range(10)) and batch.edge_index.size(1) == 0
    assert torch.equal(batch.x, data.x[:10])
