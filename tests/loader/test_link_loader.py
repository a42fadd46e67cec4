"""pyg_dist.LinkNeighborLoader: link batches against the original graph and PyG's loader."""
import math

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader
from torch_geometric.sampler import NegativeSampling

import pyg_dist
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.sampler.links import contains_edges, edge_keys


@pytest.fixture(scope="module")
def homo():
    return pyg_dist.synthetic_graph(300, 6, num_features=8, num_classes=4, community_size=50, edge_dim=3,
                                    node_time=True, seed=5)


@pytest.fixture(scope="module")
def hetero():
    return pyg_dist.synthetic_graph(360, 6, num_features=8, num_classes=4, community_size=60, hetero=True,
                                    node_types=("paper", "author"), node_time=True, seed=6)


def _check_rows(data, batch):
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])


@pytest.mark.parametrize("amount", [1, 2.5])
def test_binary_batches(amount, homo):
    loader = pyg_dist.LinkNeighborLoader(homo, [4, 2], batch_size=64, shuffle=True,
                                         neg_sampling=NegativeSampling("binary", amount))
    ids = []
    for batch in loader:
        _check_rows(homo, batch)
        pos = batch.input_id.numel()
        num_neg = math.ceil(amount * pos)
        assert batch.edge_label_index.shape == (2, pos + num_neg)
        assert batch.edge_label.dtype == torch.float
        assert batch.edge_label.tolist() == [1.0] * pos + [0.0] * num_neg
        pairs = batch.n_id[batch.edge_label_index]
        assert torch.equal(pairs[:, :pos], homo.edge_index[:, batch.input_id])  # real, in input order
        assert bool((pairs[:, pos:] < homo.num_nodes).all())
        ids.append(batch.input_id)
    assert torch.equal(torch.cat(ids).sort().values, torch.arange(homo.num_edges))  # each edge once


def test_user_labels_shift_like_pyg(homo):
    sel = torch.arange(0, 200, 2)
    label = torch.arange(sel.numel()) % 3  # classes 0..2 -> 1..3, 0 = negative
    loader = pyg_dist.LinkNeighborLoader(homo, [2], edge_label_index=homo.edge_index[:, sel], edge_label=label,
                                         batch_size=30, neg_sampling="binary")
    for batch in loader:
        pos = batch.input_id.numel()
        assert torch.equal(batch.edge_label[:pos], label[batch.input_id] + 1)
        assert not batch.edge_label[pos:].any()
        assert torch.equal(batch.n_id[batch.edge_label_index[:, :pos]], homo.edge_index[:, sel[batch.input_id]])
    plain = pyg_dist.LinkNeighborLoader(homo, [2], edge_label_index=homo.edge_index[:, sel], edge_label=label,
                                        batch_size=30)
    batch = next(iter(plain))
    assert torch.equal(batch.edge_label, label[batch.input_id])  # no negatives: labels untouched


@pytest.mark.parametrize("disjoint", [False, True])
def test_triplet_batches(disjoint, homo):
    loader = pyg_dist.LinkNeighborLoader(homo, [3, 2], batch_size=50, disjoint=disjoint,
                                         neg_sampling=NegativeSampling("triplet", 3))
    for batch in loader:
        pos = batch.input_id.numel()
        assert batch.src_index.shape == (pos,) and batch.dst_pos_index.shape == (pos,)
        assert batch.dst_neg_index.shape == (pos, 3)
        assert "edge_label_index" not in batch and "edge_label" not in batch
        real = torch.stack([batch.n_id[batch.src_index], batch.n_id[batch.dst_pos_index]])
        assert torch.equal(real, homo.edge_index[:, batch.input_id])
        if disjoint:  # each triplet's nodes live in the subgraph of its positive
            assert torch.equal(batch.batch[batch.src_index], torch.arange(pos))
            assert torch.equal(batch.batch[batch.dst_neg_index], torch.arange(pos).view(-1, 1).expand(-1, 3))


def test_disjoint_binary_subgraphs(homo):
    loader = pyg_dist.LinkNeighborLoader(homo, [3, 2], batch_size=20, disjoint=True, neg_sampling="binary")
    batch = next(iter(loader))
    pos = batch.input_id.numel()
    assert batch.batch.numel() == batch.n_id.numel() and int(batch.batch.max()) < pos
    ex = torch.arange(2 * pos) % pos
    assert torch.equal(batch.batch[batch.edge_label_index[0]], ex)
    assert torch.equal(batch.batch[batch.edge_label_index[1]], ex)
    # sampled edges stay inside one subgraph
    assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]])


@pytest.mark.parametrize("neg", [None, NegativeSampling("binary", 2), NegativeSampling("triplet", 2)])
def test_temporal_links_never_see_the_future(neg, homo):
    time = homo.time
    label_time = torch.maximum(time[homo.edge_index[0]], time[homo.edge_index[1]])
    loader = pyg_dist.LinkNeighborLoader(homo, [5, 5], edge_label_time=label_time, time_attr="time",
                                         batch_size=40, neg_sampling=neg)
    checked = 0
    for batch in loader:
        pos = batch.input_id.numel()
        seed_time = batch.edge_label_time if neg is None or neg.is_binary() else batch.seed_time
        assert torch.equal(seed_time[:pos], label_time[batch.input_id])
        bound = label_time[batch.input_id][batch.batch]  # per node: its subgraph's seed edge time
        first = batch.num_sampled_nodes[0]
        assert bool((time[batch.n_id[first:]] <= bound[first:]).all())
        if neg is not None:  # negatives respect the seed time too
            neg_nodes = (batch.edge_label_index[:, pos:].reshape(-1) if neg.is_binary()
                         else batch.dst_neg_index.reshape(-1))
            assert bool((time[batch.n_id[neg_nodes]] <= bound[neg_nodes]).all())
        checked += batch.n_id.numel() - first
    assert checked > 0


def test_hetero_temporal_links(hetero):
    et = ("paper", "to", "author")
    index = hetero[et].edge_index
    label_time = torch.maximum(hetero["paper"].time[index[0]], hetero["author"].time[index[1]])
    loader = pyg_dist.LinkNeighborLoader(hetero, [4, 4], edge_label_index=et, edge_label_time=label_time,
                                         time_attr="time", batch_size=50, neg_sampling="binary")
    for batch in loader:
        bound = label_time[batch[et].input_id]
        for t in hetero.node_types:
            first = batch[t].num_sampled_nodes[0]
            node_time = hetero[t].time[batch[t].n_id]
            assert bool((node_time[first:] <= bound[batch[t].batch][first:]).all())
        pos = bound.numel()
        neg_dst = batch[et].edge_label_index[1, pos:]
        assert bool((hetero["author"].time[batch["author"].n_id[neg_dst]] <= bound.repeat(2)[pos:]).all())


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_hetero_link_batches(mode, hetero):
    et = ("paper", "to", "author")
    index = hetero[et].edge_index
    loader = pyg_dist.LinkNeighborLoader(hetero, [3, 2], edge_label_index=et, batch_size=32, shuffle=True,
                                         neg_sampling=NegativeSampling(mode, 2))
    ids = []
    for batch in loader:
        assert isinstance(batch, HeteroData)
        for t in hetero.node_types:
            assert torch.equal(batch[t].x, hetero[t].x[batch[t].n_id])
        for e in batch.edge_types:
            ei = batch[e].edge_index
            mapped = torch.stack([batch[e[0]].n_id[ei[0]], batch[e[2]].n_id[ei[1]]])
            assert torch.equal(mapped, hetero[e].edge_index[:, batch[e].e_id])
        input_id = batch[et].input_id
        pos = input_id.numel()
        if mode == "binary":
            eli = batch[et].edge_label_index
            assert eli.shape == (2, 3 * pos)
            pairs = torch.stack([batch["paper"].n_id[eli[0]], batch["author"].n_id[eli[1]]])
            assert batch[et].edge_label.tolist() == [1.0] * pos + [0.0] * (2 * pos)
        else:
            assert batch["author"].dst_neg_index.shape == (pos, 2)
            pairs = torch.stack([batch["paper"].n_id[batch["paper"].src_index],
                                 batch["author"].n_id[batch["author"].dst_pos_index]])
        assert torch.equal(pairs[:, :pos], index[:, input_id])
        ids.append(input_id)
    assert torch.equal(torch.cat(ids).sort().values, torch.arange(index.size(1)))


def test_filter_false_negatives(homo):
    keys = edge_keys(homo.edge_index[0], homo.edge_index[1], homo.num_nodes)
    loader = pyg_dist.LinkNeighborLoader(homo, [2], batch_size=100, filter_false_negatives=True,
                                         neg_sampling=NegativeSampling("binary", 3))
    for batch in loader:
        pos = batch.input_id.numel()
        s, d = batch.n_id[batch.edge_label_index[:, pos:]]
        assert not contains_edges(keys, s, d, homo.num_nodes).any()


@pytest.mark.parametrize("mode", ["binary", "triplet"])
@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_fields_equal_pyg_loader(mode, kind, homo, hetero):
    """Our loader == PyG's LinkNeighborLoader building the batch (its filter_fn) from the same seed edges and key."""
    from pyg_dist.sampler.neighbor import NeighborSampler
    data, edges = (homo, None) if kind == "homo" else (hetero, ("paper", "to", "author"))
    neg = NegativeSampling(mode, 2)
    ours = pyg_dist.LinkNeighborLoader(data, [-1, 2], edge_label_index=edges, batch_size=64, shuffle=True,
                                       neg_sampling=neg, seed=3)
    theirs = PyGLinkNeighborLoader(data, [-1, 2], edge_label_index=edges, batch_size=64,
                                   neg_sampling=neg, neighbor_sampler=NeighborSampler(data, [-1, 2]))
    got = list(ours)
    plan = ours.batch_plan
    order = plan.order(plan.epoch).tolist()
    want = [theirs.filter_fn(theirs.link_sampler.sample_from_edges(
        theirs.input_data[order[i * 64:(i + 1) * 64]], neg_sampling=theirs.neg_sampling,
        key=plan.batch_key(plan.epoch, i))) for i in range(len(plan))]
    assert len(got) == len(want) > 1
    for a, b in zip(got, want):
        assert len(a.stores) == len(b.stores)
        for sa, sb in zip(a.stores, b.stores):
            assert sorted(sa.keys()) == sorted(sb.keys())
            for key in sa.keys():
                same = torch.equal(sa[key], sb[key]) if isinstance(sa[key], torch.Tensor) else sa[key] == sb[key]
                assert same, key


@pytest.mark.parametrize("ours,theirs", [("NeighborLoader", "NeighborLoader"),
                                         ("LinkNeighborLoader", "LinkNeighborLoader")])
def test_signatures_accept_pyg_arguments(ours, theirs):
    """An existing script works by changing its import: every PyG parameter exists, same default."""
    import inspect

    import torch_geometric.loader as pyg_loader
    mine = inspect.signature(getattr(pyg_dist, ours)).parameters
    for name, param in inspect.signature(getattr(pyg_loader, theirs)).parameters.items():
        assert name in mine, name
        if param.default is not inspect.Parameter.empty:
            assert mine[name].default == param.default, name


@pytest.mark.parametrize("context", [None, "spawn"])
def test_num_workers(context, homo):
    extra = {"multiprocessing_context": context} if context else {}
    loader = pyg_dist.LinkNeighborLoader(homo, [3, 2], batch_size=200, num_workers=2, filter_false_negatives=True,
                                         neg_sampling=NegativeSampling("binary", 1), **extra)
    keys = edge_keys(homo.edge_index[0], homo.edge_index[1], homo.num_nodes)
    ids = []
    for batch in loader:
        _check_rows(homo, batch)
        pos = batch.input_id.numel()
        pairs = batch.n_id[batch.edge_label_index]
        assert torch.equal(pairs[:, :pos], homo.edge_index[:, batch.input_id])
        assert not contains_edges(keys, pairs[0, pos:], pairs[1, pos:], homo.num_nodes).any()
        ids.append(batch.input_id)
    assert torch.equal(torch.cat(ids), torch.arange(homo.num_edges))


@pytest.mark.parametrize("kwargs,name", [
    (dict(edge_label_time=torch.zeros(10, dtype=torch.long)), "edge_label_time"),
    (dict(time_attr="time"), "edge_label_time"),
    (dict(edge_label=torch.ones(3)), "edge_label"),
    (dict(edge_label_index=torch.zeros(3, 4, dtype=torch.long)), "edge_label_index"),
    (dict(edge_label_index=torch.tensor([[0], [300]])), "edge_label_index"),
    (dict(edge_label_index=torch.tensor([[0.0], [1.0]])), "edge_label_index"),
    (dict(neg_sampling="sometimes"), "neg_sampling"),
    (dict(neg_sampling={"mode": "binary", "amount": 0}), "neg_sampling"),
    (dict(neg_sampling_ratio=-1), "neg_sampling_ratio"),
    (dict(neg_sampling="triplet", edge_label=None, filter_false_negatives="yes"), "filter_false_negatives"),
    (dict(filter_false_negatives=True), "filter_false_negatives"),
    (dict(num_neighbors=5), "num_neighbors"),
    (dict(num_neighbors=[2, -3]), "num_neighbors"),
    (dict(batch_size=-4), "batch_size"),
])
def test_argument_errors_are_typed(kwargs, name, homo):
    args = dict(num_neighbors=[2, 2])
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError) as info:
        pyg_dist.LinkNeighborLoader(homo, **args)
    assert info.value.name.startswith(name)


def test_more_argument_errors(homo, hetero):
    labels = torch.zeros(homo.num_edges)
    with pytest.raises(InvalidArgumentError, match="edge_label"):
        pyg_dist.LinkNeighborLoader(homo, [2], edge_label=labels, neg_sampling="triplet")
    weight = NegativeSampling("binary", 1, src_weight=torch.ones(5))
    with pytest.raises(InvalidArgumentError, match="src_weight"):
        pyg_dist.LinkNeighborLoader(homo, [2], neg_sampling=weight)
    for bad in (("paper", "cites", "paper"), torch.zeros(2, 3, dtype=torch.long), "paper"):
        with pytest.raises(InvalidArgumentError, match="edge_label_index"):
            pyg_dist.LinkNeighborLoader(hetero, [2], edge_label_index=bad)
