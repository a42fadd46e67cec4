"""pyg_dist.NeighborLoader: batches against oracles (k_hop_subgraph, original tensors, PyG's loader)."""
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
from torch_geometric.utils import k_hop_subgraph

import pyg_dist
from pyg_dist.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def homo():
    return pyg_dist.synthetic_graph(300, 6, num_features=8, num_classes=4, community_size=50, edge_dim=3,
                                    seed=3)


@pytest.fixture(scope="module")
def hetero():
    return pyg_dist.synthetic_graph(360, 6, num_features=8, num_classes=4, community_size=60, hetero=True,
                                    node_types=("paper", "author"), edge_dim=2, seed=4)


def _check_homo_rows(data, batch):
    """x / y / edge_attr are the original rows of n_id / e_id, and edges map back exactly."""
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)
    assert batch.n_id.unique().numel() == batch.n_id.numel()


def test_full_fanout_equals_k_hop_subgraph(homo):
    seeds = torch.tensor([5, 17, 42, 99, 250])
    loader = pyg_dist.NeighborLoader(homo, [-1, -1], input_nodes=seeds, batch_size=5)
    batch = next(iter(loader))
    _check_homo_rows(homo, batch)
    two_hop, _, _, _ = k_hop_subgraph(seeds, 2, homo.edge_index, num_nodes=homo.num_nodes)
    one_hop, _, _, _ = k_hop_subgraph(seeds, 1, homo.edge_index, num_nodes=homo.num_nodes)
    assert torch.equal(batch.n_id.sort().values, two_hop)
    expected_edges = torch.isin(homo.edge_index[1], one_hop).nonzero().view(-1)
    assert torch.equal(batch.e_id.sort().values, expected_edges)
    assert torch.equal(batch.n_id[:5], seeds)
    assert batch.batch_size == 5
    assert batch.num_sampled_nodes[0] == 5


def test_sampled_batches_are_exact_subgraphs(homo):
    loader = pyg_dist.NeighborLoader(homo, [4, 2], input_nodes=homo.train_mask, batch_size=50)
    for batch in loader:
        _check_homo_rows(homo, batch)
        # fanout respected: every node of hop 0 / 1 has at most 4 / 2 sampled in-edges
        dst = batch.edge_index[1]
        counts = torch.bincount(dst, minlength=batch.n_id.numel())
        hop0 = batch.num_sampled_nodes[0]
        assert int(counts[:hop0].max()) <= 4
        rest = counts[hop0:]
        assert rest.numel() == 0 or int(rest.max()) <= 2


def _assert_batches_equal(a, b):
    assert type(a) is type(b)
    stores_a, stores_b = a.stores, b.stores
    assert len(stores_a) == len(stores_b)
    for sa, sb in zip(stores_a, stores_b):
        assert sorted(sa.keys()) == sorted(sb.keys())
        for key in sa.keys():
            va, vb = sa[key], sb[key]
            if isinstance(va, torch.Tensor):
                assert torch.equal(va, vb), key
            else:
                assert va == vb, key


@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_fields_equal_pyg_loader(kind, homo, hetero):
    """Our loader == PyG's NeighborLoader building the batch (its filter_fn) from the same seeds and key."""
    from pyg_dist.sampler.neighbor import NeighborSampler
    data = homo if kind == "homo" else hetero
    inputs = data.train_mask if kind == "homo" else ("paper", data["paper"].train_mask)
    fan = [-1, 3]
    ours = pyg_dist.NeighborLoader(data, fan, input_nodes=inputs, batch_size=40, shuffle=True, seed=11)
    theirs = PyGNeighborLoader(data, fan, input_nodes=inputs, batch_size=40,
                               neighbor_sampler=NeighborSampler(data, fan))
    got = list(ours)
    plan = ours.batch_plan
    order = plan.order(plan.epoch).tolist()
    assert len(got) == len(plan) > 1
    for i, a in enumerate(got):
        idx = order[i * 40:(i + 1) * 40]
        out = theirs.node_sampler.sample_from_nodes(theirs.input_data[idx], key=plan.batch_key(plan.epoch, i))
        _assert_batches_equal(a, theirs.filter_fn(out))


def test_every_seed_once_per_epoch_with_shuffle(homo):
    train = homo.train_mask.nonzero().view(-1)
    loader = pyg_dist.NeighborLoader(homo, [3, 3], input_nodes=homo.train_mask, batch_size=37, shuffle=True)
    orders = []
    for _ in range(2):
        seen, ids = [], []
        for batch in loader:
            seen.append(batch.n_id[:batch.batch_size])
            ids.append(batch.input_id)
        seen = torch.cat(seen)
        assert torch.equal(seen.sort().values, train)
        assert torch.equal(torch.cat(ids), seen)  # input_id = the seed ids for a mask input
        orders.append(seen)
    assert not torch.equal(orders[0], orders[1])


def test_temporal_seeds_bound_their_subgraphs():
    data = pyg_dist.synthetic_graph(300, 8, num_features=4, node_time=True, seed=9)
    seeds = torch.arange(0, 300, 3)
    input_time = torch.randint(30, 100, (seeds.numel(),), generator=torch.Generator().manual_seed(0))
    loader = pyg_dist.NeighborLoader(data, [5, 5], input_nodes=seeds, input_time=input_time,
                                     time_attr="time", batch_size=20)
    checked = 0
    for batch in loader:
        assert torch.equal(batch.seed_time, input_time[batch.input_id])
        first = batch.num_sampled_nodes[0]
        bound = batch.seed_time[batch.batch]  # disjoint: every node knows its seed
        assert bool((data.time[batch.n_id[first:]] <= bound[first:]).all())
        checked += batch.n_id.numel() - first
    assert checked > 0


def test_hetero_batches(hetero):
    papers = hetero["paper"].train_mask.nonzero().view(-1)
    loader = pyg_dist.NeighborLoader(hetero, [5, 3], input_nodes=("paper", hetero["paper"].train_mask),
                                     batch_size=64, shuffle=True)
    seen = []
    for batch in loader:
        assert isinstance(batch, HeteroData)
        bs = batch["paper"].batch_size
        seen.append(batch["paper"].n_id[:bs])
        assert torch.equal(batch["paper"].y, hetero["paper"].y[batch["paper"].n_id])
        for t in hetero.node_types:
            assert torch.equal(batch[t].x, hetero[t].x[batch[t].n_id])
        for et in batch.edge_types:
            src, _, dst = et
            ei, e_id = batch[et].edge_index, batch[et].e_id
            mapped = torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]])
            assert torch.equal(mapped, hetero[et].edge_index[:, e_id])
            assert torch.equal(batch[et].edge_attr, hetero[et].edge_attr[e_id])
            assert sum(batch[et].num_sampled_edges) == e_id.numel()
    assert torch.equal(torch.cat(seen).sort().values, papers)


@pytest.mark.parametrize("context", [None, "spawn"])
def test_num_workers(context, homo):
    """Workers (fork by default, and spawn) give the same batches as the main process."""
    kwargs = dict(input_nodes=homo.val_mask, batch_size=25)
    main = list(pyg_dist.NeighborLoader(homo, [-1, -1], **kwargs))  # samples in this process first
    extra = {"multiprocessing_context": context} if context else {}
    workers = list(pyg_dist.NeighborLoader(homo, [-1, -1], num_workers=2, **kwargs, **extra))
    assert len(main) == len(workers)
    for a, b in zip(main, workers):
        _assert_batches_equal(a, b)
    if context == "spawn":
        return  # spawning is slow; the sampled check below runs with fork only
    sampled = list(pyg_dist.NeighborLoader(homo, [3, 2], num_workers=2, **kwargs))
    seeds = torch.cat([b.n_id[:b.batch_size] for b in sampled])
    assert torch.equal(seeds, homo.val_mask.nonzero().view(-1))
    for batch in sampled:
        _check_homo_rows(homo, batch)


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_neighbors="10,5"), "num_neighbors"),
    (dict(num_neighbors=[10, 0.5]), "num_neighbors"),
    (dict(num_neighbors=[-2]), "num_neighbors"),
    (dict(input_nodes=torch.tensor([0, 300])), "input_nodes"),
    (dict(input_nodes=torch.tensor([-1])), "input_nodes"),
    (dict(input_nodes=torch.tensor([0.0, 1.0])), "input_nodes"),
    (dict(input_nodes=torch.ones(5, dtype=torch.bool)), "input_nodes"),
    (dict(input_nodes=torch.zeros(2, 2, dtype=torch.long)), "input_nodes"),
    (dict(input_nodes=[1, 2], input_time=torch.tensor([1, 2])), "input_time"),
    (dict(batch_size=0), "batch_size"),
    (dict(num_workers=-1), "num_workers"),
])
def test_argument_errors_are_typed(kwargs, name, homo):
    args = dict(num_neighbors=[2, 2])
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError) as info:
        pyg_dist.NeighborLoader(homo, **args)
    assert info.value.name.startswith(name)


def test_hetero_argument_errors_are_typed(hetero):
    for bad in ("venue", ("venue", None), torch.tensor([0, 1]), ("paper", torch.tensor([10_000]))):
        with pytest.raises(InvalidArgumentError, match="input_nodes"):
            pyg_dist.NeighborLoader(hetero, [2], input_nodes=bad)
    with pytest.raises(InvalidArgumentError, match="data"):
        pyg_dist.NeighborLoader({"x": 1}, [2])


def test_repeated_seeds_have_pyg_layout_and_the_same_outputs(homo):
    """Oversampled input_nodes: the batch's first rows are the seeds as given (repeats included), y is the
    original, and a GNN's output for every repeat equals its output for the first occurrence."""
    from torch_geometric.nn import GraphSAGE

    from pyg_dist.testing import check_repeats, first_occurrence
    train = homo.train_mask.nonzero().view(-1)
    seeds = torch.cat([train, train[:40], train[5:15], train[:3]])
    torch.manual_seed(0)
    model = GraphSAGE(homo.num_features, 16, 2, 4).eval()
    loader = pyg_dist.NeighborLoader(homo, [5, 3], input_nodes=seeds, batch_size=64, shuffle=True)
    positions, repeats = [], 0
    for batch in loader:
        bs = batch.batch_size
        got, _ = check_repeats(batch.n_id, batch.edge_index, bs, seeds[batch.input_id])
        repeats += got
        assert torch.equal(batch.y[:bs], homo.y[seeds[batch.input_id]]) and torch.equal(batch.x, homo.x[batch.n_id])
        with torch.no_grad():
            out = model(batch.x, batch.edge_index)[:bs]
        assert torch.equal(out, out[first_occurrence(batch.n_id[:bs])])
        positions.append(batch.input_id)
    assert repeats > 0 and torch.equal(torch.cat(positions).sort().values, torch.arange(seeds.numel()))


def test_repeated_seeds_hetero_and_full_fanout(hetero):
    from pyg_dist.testing import check_repeats
    papers = hetero["paper"].train_mask.nonzero().view(-1)[:20]
    seeds = torch.cat([papers, papers.flip(0)[:7]])
    loader = pyg_dist.NeighborLoader(hetero, [-1, -1], input_nodes=("paper", seeds), batch_size=seeds.numel())
    batch = next(iter(loader))
    assert batch["paper"].batch_size == seeds.numel()
    checked = 0
    for et in batch.edge_types:
        if et[-1] == "paper":
            checked += check_repeats(batch["paper"].n_id, batch[et].edge_index, seeds.numel(), seeds,
                                     batch[et[0]].n_id)[1]
    assert checked > 0
    assert torch.equal(batch["paper"].y[:seeds.numel()], hetero["paper"].y[seeds])


@pytest.mark.timeout(120)
def test_batches_are_the_same_whatever_the_workers(homo):
    """With a fixed loader seed, every epoch's batches are bit-identical with 0 or 2 workers, persistent or
    not (keys travel with the index batches; the global RNG does not matter)."""
    def epochs(**kw):
        torch.manual_seed(kw.get("num_workers", 0) + 10 * kw.get("persistent_workers", False))
        loader = pyg_dist.NeighborLoader(homo, [4, 2], input_nodes=homo.train_mask, batch_size=32, shuffle=True,
                                         seed=9, **kw)
        return [(b.n_id.clone(), b.edge_index.clone()) for _ in range(2) for b in loader]

    want = epochs()
    for kw in (dict(num_workers=2), dict(num_workers=2, persistent_workers=True)):
        got = epochs(**kw)
        assert len(got) == len(want) and all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                                             for a, b in zip(got, want)), kw
    assert not torch.equal(want[0][0], want[len(want) // 2][0])  # epoch 2 is another permutation


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_iterating_never_draws_from_the_global_generator(homo, workers):
    """A training step's randomness (dropout) must not depend on the loader: an epoch leaves torch's
    global generator untouched, with or without workers (torch's own DataLoader would draw from it)."""
    loader = pyg_dist.NeighborLoader(homo, [4, 2], input_nodes=homo.train_mask, batch_size=32, shuffle=True,
                                     num_workers=workers, seed=1)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    assert sum(b.batch_size for b in loader) == int(homo.train_mask.sum())
    assert torch.equal(torch.get_rng_state(), before)
