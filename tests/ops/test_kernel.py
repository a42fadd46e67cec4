"""Invariants of the one-hop kernel and the relabeler, for every available backend."""
import math

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.ops import CSC, available_backends, make_relabeler, numba_unavailable_reason, one_hop

BACKENDS = [b for b in ("numba", "torch") if b in available_backends()]


def _random_graph(n=60, e=600, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = torch.unique(ei, dim=1)  # no duplicate (src, dst) pairs: lets us check "no duplicates"
    return ei[:, torch.randperm(ei.size(1), generator=g)], n


def _split(out):
    return list(zip(torch.split(out.nbr, out.count.tolist()), torch.split(out.edge, out.count.tolist())))


def _deg(ei, n):
    return torch.bincount(ei[1], minlength=n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [0, 1, 3, 8, -1])
def test_edges_exist_ids_true_fanout_no_duplicates(backend, k):
    ei, n = _random_graph()
    csc = CSC.from_edge_index(ei, n)
    seeds = torch.arange(n)
    out = one_hop(csc, seeds, k, backend=backend)
    deg = _deg(ei, n)
    expect = deg if k < 0 else deg.clamp(max=k)
    assert out.count.tolist() == expect.tolist()
    for s, (nbr, eid) in zip(seeds.tolist(), _split(out)):
        assert (ei[0, eid] == nbr).all() and (ei[1, eid] == s).all()
        assert eid.unique().numel() == eid.numel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_replacement_draws_exactly_k(backend):
    ei, n = _random_graph()
    csc = CSC.from_edge_index(ei, n)
    out = one_hop(csc, torch.arange(n), 20, replace=True, backend=backend)
    deg = _deg(ei, n)
    assert out.count.tolist() == torch.where(deg > 0, 20, 0).tolist()
    assert (ei[1, out.edge] == torch.repeat_interleave(torch.arange(n), out.count)).all()
    assert (ei[0, out.edge] == out.nbr).all()


def _star(leaves, weight=None):
    ei = torch.stack([torch.arange(1, leaves + 1), torch.zeros(leaves, dtype=torch.long)])
    return CSC.from_edge_index(ei, leaves + 1, weight=weight)


def _chi2(counts, expected):
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("leaves,k", [(50, 5), (300, 100)])  # Floyd path and selection-sampling path
def test_uniformity_chi_square_on_star(backend, leaves, k):
    torch.manual_seed(0)
    csc = _star(leaves)
    seeds = torch.zeros(2000, dtype=torch.long)  # 2000 independent draws of k of the leaves
    out = one_hop(csc, seeds, k, backend=backend, seed_batch=torch.arange(2000))  # 2000 subgraphs: own streams
    counts = torch.bincount(out.nbr, minlength=leaves + 1)[1:].double()
    df = leaves - 1
    assert _chi2(counts, torch.full_like(counts, 2000 * k / leaves)) < df + 8 * math.sqrt(2 * df)
    assert all(len(set(nbr.tolist())) == k for nbr, _ in _split(out))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("replace", [True, False])
def test_weighted_zero_weight_never_and_proportional(backend, replace):
    torch.manual_seed(1)
    leaves = 20
    w = torch.arange(leaves, dtype=torch.float64) % 4  # every 4th leaf has weight 0
    out = one_hop(_star(leaves, w), torch.zeros(3000, dtype=torch.long), 3, replace=replace, backend=backend,
                  seed_batch=torch.arange(3000))
    counts = torch.bincount(out.nbr - 1, minlength=leaves).double()
    assert counts[w == 0].sum() == 0
    assert out.count.tolist() == [3] * 3000
    if replace:  # with replacement the frequencies are exactly proportional to the weights
        pos = w > 0
        expected = 9000 * w[pos] / w.sum()
        df = int(pos.sum()) - 1
        assert _chi2(counts[pos], expected) < df + 8 * math.sqrt(2 * df)
    else:  # without replacement heavier leaves are still drawn more often
        assert counts[w == 3].mean() > counts[w == 2].mean() > counts[w == 1].mean()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("level", ["node", "edge"])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_never_newer_and_last_is_most_recent(backend, level, strategy):
    ei, n = _random_graph(seed=3)
    g = torch.Generator().manual_seed(5)
    node_time = torch.randint(0, 50, (n,), generator=g)
    edge_time = torch.randint(0, 50, (ei.size(1),), generator=g)
    csc = CSC.from_edge_index(ei, n, edge_time=edge_time if level == "edge" else None)
    seeds = torch.arange(n)
    seed_time = torch.randint(0, 50, (n,), generator=g)
    out = one_hop(csc, seeds, 3, node_time=node_time if level == "node" else None, seed_time=seed_time,
                  temporal_strategy=strategy, backend=backend)
    for s, (nbr, eid) in zip(seeds.tolist(), _split(out)):
        in_e = (ei[1] == s).nonzero().view(-1)
        times = node_time[ei[0, in_e]] if level == "node" else edge_time[in_e]
        allowed = times[times <= seed_time[s]]
        got = node_time[nbr] if level == "node" else edge_time[eid]
        assert (got <= seed_time[s]).all()
        assert got.numel() == min(3, allowed.numel())
        if strategy == "last":
            assert sorted(got.tolist()) == sorted(allowed.sort(descending=True).values[:3].tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_relabel_first_seen_order(backend):
    r = make_relabeler(20, backend=backend)
    a, b = torch.tensor([5, 3, 9]), torch.tensor([3, 7, 7, 11, 5, 2])
    assert r.add(a).tolist() == [0, 1, 2]
    assert r.add(b).tolist() == [1, 3, 3, 4, 0, 5]
    assert r.nodes.tolist() == [5, 3, 9, 7, 11, 2]
    r.close()
    d = make_relabeler(20, disjoint=True, backend=backend)
    assert d.add(torch.tensor([4, 4]), torch.tensor([0, 1])).tolist() == [0, 1]
    assert d.add(torch.tensor([4, 6, 6, 4]), torch.tensor([1, 0, 1, 0])).tolist() == [1, 2, 3, 0]
    assert d.nodes.tolist() == [4, 4, 6, 6] and d.batch.tolist() == [0, 1, 0, 1]
    d.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("bad", [20, 10**7, -1])
def test_relabel_refuses_ids_outside_the_type_and_stays_clean(backend, disjoint, bad):
    """An id from a corrupt file or reply is an IndexError naming it, not a write outside the map; the
    relabeler (and a pooled dense map) holds only what came before."""
    pool = []
    r = make_relabeler(20, disjoint=disjoint, backend=backend, pool=pool)
    batch = (lambda n: torch.zeros(n, dtype=torch.long)) if disjoint else (lambda n: None)
    assert r.add(torch.tensor([5, 3]), batch(2)).tolist() == [0, 1]
    with pytest.raises(IndexError, match=f"id {bad} at position 1"):
        r.add(torch.tensor([9, bad, 4]), batch(3))
    assert r.nodes.tolist() == [5, 3]
    assert r.add(torch.tensor([4, 5]), batch(2)).tolist() == [2, 0]
    r.close()
    if pool:  # the pooled map remembers nothing of this batch
        again = make_relabeler(20, backend=backend, pool=pool)
        assert not pool and again.add(torch.tensor([4, 5, 3, 9])).tolist() == [0, 1, 2, 3]
        again.close()


def test_relabel_hash_grows_and_dense_pool_is_reset():
    if "numba" not in BACKENDS:
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    ids = torch.randint(0, 5000, (20000,), generator=torch.Generator().manual_seed(0))
    d = make_relabeler(5000, disjoint=True, backend="numba")
    local = d.add(ids, ids % 3)
    assert (d.nodes[local] == ids).all() and (d.batch[local] == ids % 3).all()
    assert d.size == torch.unique(ids * 3 + ids % 3).numel()
    pool = []
    fresh = make_relabeler(5000, backend="numba")
    expect = fresh.add(ids), fresh.nodes.clone()
    fresh.close()
    for _ in range(3):  # batch after batch on one pooled map: every batch relabels as on a fresh one
        r = make_relabeler(5000, backend="numba", pool=pool)
        assert torch.equal(r.add(ids), expect[0]) and torch.equal(r.nodes, expect[1])
        r.close()
        assert len(pool) == 1


def test_a_closed_relabeler_refuses_more_ids():
    if "numba" not in BACKENDS:
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    pool = []
    r = make_relabeler(10, backend="numba", pool=pool)
    r.add(torch.tensor([3]))
    r.close()
    with pytest.raises(PyGDistError, match="closed"):
        r.add(torch.tensor([4]))
    assert len(pool) == 1


def test_dense_scratch_refills_before_its_base_leaves_int32(monkeypatch):
    """The pooled map's base moves past every batch; near the int32 limit the map is refilled (and a
    huge type resets the touched entries instead), and batches stay exact throughout."""
    if "numba" not in BACKENDS:
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    from pyg_dist.ops import relabel as R
    pool = [R.DenseScratch(50)]
    pool[0].base = 2**31 - 1 - 50 - 2  # this batch's 3 nodes fit; the next base would not
    ids = torch.tensor([7, 3, 7, 49])
    for base_after in (0, 3):
        r = make_relabeler(50, backend="numba", pool=pool)
        assert r.add(ids).tolist() == [0, 1, 0, 2] and r.nodes.tolist() == [7, 3, 49]
        r.close()
        assert pool[0].base == base_after
    assert int(pool[0].map.max()) == 2 and int((pool[0].map >= 0).sum()) == 3  # refilled, then one batch
    monkeypatch.setattr(R, "_RESET_ABOVE", 10)  # a "huge" type: touched entries reset, base stays
    r = make_relabeler(50, backend="numba", pool=pool)
    assert r.add(ids).tolist() == [0, 1, 0, 2]
    r.close()
    assert pool[0].base == 3 and int((pool[0].map >= 3).sum()) == 0


def test_numba_and_torch_agree_on_counts_and_numba_is_thread_independent():
    if "numba" not in BACKENDS:
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    ei, n = _random_graph(seed=7)
    csc = CSC.from_edge_index(ei, n)
    seeds = torch.arange(n)
    a = one_hop(csc, seeds, 4, backend="torch")
    threads = torch.get_num_threads()
    try:
        results = []
        for t in (1, 2):
            torch.set_num_threads(t)
            torch.manual_seed(42)
            results.append(one_hop(csc, seeds, 4, backend="numba"))
    finally:
        torch.set_num_threads(threads)
    assert a.count.tolist() == results[0].count.tolist()
    assert torch.equal(results[0].nbr, results[1].nbr) and torch.equal(results[0].edge, results[1].edge)


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_arguments_raise_typed_errors(backend):
    csc = _star(5)
    with pytest.raises(InvalidArgumentError, match="num_neighbors"):
        one_hop(csc, torch.tensor([0]), -2, backend=backend)
    with pytest.raises(InvalidArgumentError, match="seeds"):
        one_hop(csc, torch.tensor([6]), 2, backend=backend)
    with pytest.raises(InvalidArgumentError, match="temporal_strategy"):
        one_hop(csc, torch.tensor([0]), 2, temporal_strategy="latest", backend=backend)
    with pytest.raises(InvalidArgumentError, match="seed_time"):
        one_hop(csc, torch.tensor([0]), 2, seed_time=torch.tensor([1]), backend=backend)
    with pytest.raises(InvalidArgumentError, match="backend"):
        one_hop(csc, torch.tensor([0]), 2, backend="cuda-magic")
    with pytest.raises(InvalidArgumentError, match="weight"):
        CSC.from_edge_index(torch.tensor([[1], [0]]), 2, weight=torch.tensor([-1.0])).validate()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seed_draws_from_its_own_stream(backend):
    """numba: a seed's sample depends on (key, global id[, subgraph]) only, not on the other seeds, its
    position or the CSC offset (what makes distributed batches partition-independent); both backends:
    the same key gives the same sample, another key another one."""
    ei, n = _random_graph(seed=4)
    csc = CSC.from_edge_index(ei, n)
    seeds = torch.arange(n)
    a = one_hop(csc, seeds, 2, backend=backend, key=11)
    b = one_hop(csc, seeds, 2, backend=backend, key=11)
    assert torch.equal(a.nbr, b.nbr) and torch.equal(a.edge, b.edge)
    assert not torch.equal(a.nbr, one_hop(csc, seeds, 2, backend=backend, key=12).nbr)
    if backend != "numba":
        return
    per_seed = {s: e for s, (_, e) in zip(seeds.tolist(), _split(a))}
    sub = torch.tensor([7, 3, 9])
    part = one_hop(csc, sub, 2, backend=backend, key=11)
    assert all(torch.equal(e, per_seed[s]) for s, (_, e) in zip(sub.tolist(), _split(part)))
    shifted = CSC(csc.colptr[3:], csc.row, csc.edge_id, None, None)  # rows of destinations 3.. only
    moved = one_hop(shifted, sub - 3, 2, backend=backend, key=11, id_offset=3)
    assert torch.equal(moved.edge, part.edge)
    apart = one_hop(csc, torch.tensor([5, 5]), 2, backend=backend, key=11, seed_batch=torch.tensor([0, 1]))
    same = one_hop(csc, torch.tensor([5, 5]), 2, backend=backend, key=11)
    nb = _split(same)
    assert torch.equal(nb[0][1], nb[1][1]) and torch.equal(nb[0][1], per_seed[5])
    assert apart.count.tolist() == same.count.tolist()
