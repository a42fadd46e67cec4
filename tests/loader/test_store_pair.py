"""The one-machine loaders over any PyG ``(FeatureStore, GraphStore)`` pair (PyG's remote-backend contract).

Oracle: the same loader over the equivalent ``Data`` / ``HeteroData`` with the same seed gives the same
batches, bit for bit (the pair is filled from that graph with PyG's own in-memory test stores, in every
edge layout); the feature store is asked once per batch.
"""
import pytest
import torch
from torch_geometric.data import Data, FeatureStore, HeteroData
from torch_geometric.sampler import NegativeSampling
from torch_geometric.testing import MyFeatureStore, MyGraphStore

import pyg_dist
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.partition import Partitioner
from pyg_dist.sampler.store_pair import pair_view


class CountingStore(MyFeatureStore):
    """PyG's in-memory feature store, counting the calls a batch makes."""

    def __init__(self):
        super().__init__()
        self.multi_calls, self.attrs_asked = 0, 0

    def multi_get_tensor(self, attrs, convert_type=False):
        self.multi_calls += 1
        self.attrs_asked += len(attrs)
        return super().multi_get_tensor(attrs, convert_type)


def _put_layout(gs, edge_index, et, size, layout):
    """Puts ``edge_index`` in ``layout``; returns the permutation of the edges as the layout stores them."""
    if layout == "coo":
        gs.put_edge_index(edge_index, edge_type=et, layout="coo", size=size)
        return torch.arange(edge_index.size(1))
    key = edge_index[1] if layout == "csc" else edge_index[0]
    perm = torch.sort(key, stable=True).indices
    row, col = edge_index[0, perm], edge_index[1, perm]
    if layout == "csc":
        ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(col, minlength=size[1]).cumsum(0)])
        gs.put_edge_index((row, ptr), edge_type=et, layout="csc", size=size)
    else:
        ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(row, minlength=size[0]).cumsum(0)])
        gs.put_edge_index((ptr, col), edge_type=et, layout="csr", size=size)
    return perm


def to_pair(data, layout="coo"):
    """``(feature_store, graph_store, equivalent graph)``: the pair, and ``data`` with its edges in the order
    the layout stores them (edge ids are positions in that order, as in PyG)."""
    fs, gs, same = CountingStore(), MyGraphStore(), data.clone()
    hetero = isinstance(data, HeteroData)
    for store in data.node_stores:
        for k, v in store.items():
            if torch.is_tensor(v) and store.is_node_attr(k):
                fs.put_tensor(v, group_name=store._key if hetero else None, attr_name=k, index=None)
    for store in data.edge_stores:
        et = store._key if hetero else None
        size = (data[et[0]].num_nodes, data[et[2]].num_nodes) if hetero else (data.num_nodes, data.num_nodes)
        perm = _put_layout(gs, store.edge_index, et, size, layout)
        target = same[et] if hetero else same
        for k, v in store.items():
            if torch.is_tensor(v) and store.is_edge_attr(k):
                target[k] = v[:, perm] if k == "edge_index" else v[perm]
                if k != "edge_index":
                    fs.put_tensor(v[perm], group_name=et if hetero else (None, None), attr_name=k, index=None)
    return fs, gs, same


def _same(a, b):
    for store_a, store_b in zip(a.stores, b.stores):
        for k, v in store_a.items():
            if torch.is_tensor(v):
                assert k in store_b, k
                assert torch.equal(v, store_b[k]), k
            else:
                assert v == store_b[k], k


#: Graphs with node time and edge features (every attribute kind a pair carries).
GRAPHS = {"homo": dict(num_nodes=300, seed=5, community_size=50),
          "hetero": dict(num_nodes=360, seed=6, community_size=60, hetero=True, node_types=("paper", "author"))}


@pytest.fixture(scope="module", params=["homo"])
def homo(request):
    return pyg_dist.synthetic_graph(avg_degree=6, num_features=8, num_classes=4, edge_dim=3, node_time=True,
                                    **GRAPHS[request.param])


@pytest.fixture(scope="module")
def hetero():
    return pyg_dist.synthetic_graph(avg_degree=6, num_features=8, num_classes=4, edge_dim=3, node_time=True,
                                    **GRAPHS["hetero"])


@pytest.mark.parametrize("layout", ["coo", "csc", "csr"])
def test_node_batches_equal_the_data_path(homo, layout):
    fs, gs, same = to_pair(homo, layout)
    kw = dict(num_neighbors=[4, 2], batch_size=32, shuffle=True, seed=11)
    ref = list(pyg_dist.NeighborLoader(same, input_nodes=homo.train_mask, **kw))
    got = list(pyg_dist.NeighborLoader((fs, gs), input_nodes=homo.train_mask, **kw))
    assert len(got) == len(ref) > 1
    for a, b in zip(ref, got):
        _same(a, b)
        assert "edge_attr" in b and "time" in b  # edge rows by e_id and node time, like the Data path
    assert fs.multi_calls == len(got)  # ONE feature-store call per batch


@pytest.mark.parametrize("layout", ["coo", "csc"])
def test_hetero_node_batches_equal_the_data_path(hetero, layout):
    fs, gs, same = to_pair(hetero, layout)
    kw = dict(num_neighbors=[3, 2], batch_size=40, seed=4, input_nodes=("paper", hetero["paper"].train_mask))
    ref, got = list(pyg_dist.NeighborLoader(same, **kw)), list(pyg_dist.NeighborLoader((fs, gs), **kw))
    assert len(got) == len(ref) > 1
    for a, b in zip(ref, got):
        _same(a, b)
        assert b["author"].x.size(0) == b["author"].n_id.size(0)
    assert fs.multi_calls == len(got)


@pytest.mark.parametrize("time_level", ["node", "edge"])
def test_temporal_pairs_read_time_from_the_feature_store(hetero, time_level):
    data = hetero.clone()
    if time_level == "edge":
        for t in data.node_types:
            del data[t].time
        for et in data.edge_types:
            data[et].time = torch.randint(0, 50, (data[et].num_edges,))
    fs, gs, same = to_pair(data)
    seeds = torch.arange(60)
    kw = dict(num_neighbors=[3, 3], batch_size=20, seed=2, time_attr="time",
              input_nodes=("paper", seeds), input_time=torch.full((60,), 25))
    for a, b in zip(pyg_dist.NeighborLoader(same, **kw), pyg_dist.NeighborLoader((fs, gs), **kw)):
        _same(a, b)
        if time_level == "node":
            sampled = torch.cat([b["paper"].time[b["paper"].batch_size:], b["author"].time])
            assert sampled.numel() and bool((sampled <= 25).all())  # no neighbour newer than its seed


def test_weighted_pair_samples_only_positive_weight_edges(homo):
    data = homo.clone()
    data.w = (torch.arange(data.num_edges) % 2).double()
    fs, gs, same = to_pair(data)
    fs.put_tensor(data.w, group_name=(None, None), attr_name="w", index=None)
    kw = dict(num_neighbors=[3], batch_size=50, seed=1, weight_attr="w")
    for a, b in zip(pyg_dist.NeighborLoader(same, **kw), pyg_dist.NeighborLoader((fs, gs), **kw)):
        _same(a, b)
        assert bool((data.w[b.e_id] > 0).all())


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_link_batches_equal_the_data_path(homo, hetero, mode):
    for data, eli in ((homo, None), (hetero, ("paper", "to", "author"))):
        fs, gs, same = to_pair(data)
        kw = dict(num_neighbors=[3, 2], batch_size=32, seed=8, neg_sampling=NegativeSampling(mode, 2),
                  edge_label_index=eli)
        ref, got = list(pyg_dist.LinkNeighborLoader(same, **kw)), list(pyg_dist.LinkNeighborLoader((fs, gs), **kw))
        assert len(got) == len(ref) > 1
        for a, b in zip(ref, got):
            _same(a, b)
        assert fs.multi_calls == len(got)


def test_filter_false_negatives_over_a_pair(homo):
    fs, gs, same = to_pair(homo)
    kw = dict(num_neighbors=[2], batch_size=64, seed=3, neg_sampling="binary", filter_false_negatives=True)
    for a, b in zip(pyg_dist.LinkNeighborLoader(same, **kw), pyg_dist.LinkNeighborLoader((fs, gs), **kw)):
        _same(a, b)


def test_pyg_dist_partition_stores_as_a_pair(tmp_path, homo):
    from pyg_dist.store import LocalFeatureStore, LocalGraphStore
    Partitioner(homo, 1, method="random").save(tmp_path / "g", progress=False)
    fs = LocalFeatureStore.from_partition(tmp_path / "g", 0)
    gs = LocalGraphStore.from_partition(tmp_path / "g", 0)
    x, (row, col) = fs.get_tensor(None, "x"), gs.get_edge_index(None, "coo")
    edges = set(zip(row.tolist(), col.tolist()))
    loader = pyg_dist.NeighborLoader((fs, gs), [3, 2], input_nodes=torch.arange(40), batch_size=20, seed=0)
    for batch in loader:
        assert torch.equal(batch.x, x[batch.n_id])
        src, dst = batch.n_id[batch.edge_index]
        assert set(zip(src.tolist(), dst.tolist())) <= edges and batch.edge_index.size(1) > 0


def test_topology_is_read_once_per_pair(homo):
    fs, gs, _ = to_pair(homo)
    calls = []
    original = gs.get_edge_index
    gs.get_edge_index = lambda *a, **k: calls.append(1) or original(*a, **k)
    for _ in range(3):
        pyg_dist.NeighborLoader((fs, gs), [2], batch_size=100)
    pyg_dist.LinkNeighborLoader((fs, gs), [2], batch_size=100)
    assert len(calls) == 1
    assert pair_view("test", (fs, gs)).num_nodes == {"_N": homo.num_nodes}


def test_bad_pairs_raise_typed_errors(homo):
    fs, gs, _ = to_pair(homo)
    with pytest.raises(InvalidArgumentError, match="in that order"):
        pyg_dist.NeighborLoader((gs, fs), [2], batch_size=10)
    with pytest.raises(InvalidArgumentError, match="FeatureStore"):
        pyg_dist.NeighborLoader((fs, 3), [2], batch_size=10)
    bad = MyGraphStore()
    bad.put_edge_index(torch.tensor([[0, 1], [1, 999]]), edge_type=None, layout="coo", size=(300, 300))
    with pytest.raises(InvalidArgumentError, match="ids in"):
        pyg_dist.NeighborLoader((fs, bad), [2], batch_size=10)
    with pytest.raises(InvalidArgumentError, match="neither a node-level or edge-level"):
        pyg_dist.NeighborLoader((fs, gs), [2], batch_size=10, time_attr="nope", input_time=torch.zeros(300))


def test_a_store_pair_is_a_pyg_store_pair():
    fs = MyFeatureStore()
    assert isinstance(fs, FeatureStore)
    data = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs = MyGraphStore()
    gs.put_edge_index(data.edge_index, edge_type=None, layout="coo", size=(4, 4))
    batch = next(iter(pyg_dist.NeighborLoader((fs, gs), [-1, -1], input_nodes=torch.tensor([3]), batch_size=1)))
    # hand-computed: 3 <- 2 <- 1 (two hops of in-edges)
    assert batch.n_id.tolist() == [3, 2, 1]
    assert batch.n_id[batch.edge_index].tolist() == [[2, 1], [3, 2]]
    assert torch.equal(batch.x, data.x[[3, 2, 1]])


def test_custom_cls_transforms_and_worker_filtering_over_a_pair(homo):
    class MyData(Data):
        pass

    fs, gs, same = to_pair(homo)
    seen = []

    def tso(out):
        seen.append(out.node.numel())
        return out

    kw = dict(num_neighbors=[3], batch_size=64, seed=5)
    ref = list(pyg_dist.NeighborLoader(same, **kw))
    got = list(pyg_dist.NeighborLoader((fs, gs), custom_cls=MyData, transform_sampler_output=tso,
                                       transform=lambda d: d.update({"tag": 1}) or d, **kw))
    assert all(type(b) is MyData and b.tag == 1 for b in got)
    assert seen == [b.n_id.numel() for b in got]
    for a, b in zip(ref, got):
        _same(a, b)
    workers = list(pyg_dist.NeighborLoader((fs, gs), num_workers=2, filter_per_worker=True, **kw))
    for a, b in zip(ref, workers):
        _same(a, b)


def test_a_feature_store_that_loses_rows_fails_loudly(homo):
    class Lossy(MyFeatureStore):
        def multi_get_tensor(self, attrs, convert_type=False):
            return [t[:-1] for t in super().multi_get_tensor(attrs, convert_type)]

    _, gs, _ = to_pair(homo)
    fs = Lossy()
    fs.put_tensor(homo.x, group_name=None, attr_name="x", index=None)
    with pytest.raises(InvalidArgumentError, match="one per id asked"):
        next(iter(pyg_dist.NeighborLoader((fs, gs), [2], batch_size=10)))
