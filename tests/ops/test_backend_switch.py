"""One switch for numba: ``$PYG_DIST_BACKEND``, the import-free fallback, and the torch twins of the
partition book's and partitioner's kernels checked against numba and against plain-Python oracles."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import _torch_book, _torch_csr
from pyg_dist.ops import backend as B
from pyg_dist.ops import graph_kernels as K
from pyg_dist.ops import rows as R
from pyg_dist.testing.oracles import sorted_pairs

pytestmark = pytest.mark.timeout(240)

# Bounds with empty ranges, one range, many ranges; the id sets drawn for each.
BOUNDS = [[0, 3, 5, 5, 9], [0, 1000], [0, 10, 20, 30, 40, 50, 60, 70, 80], [0, 4, 4, 11, 30], [0, 0, 7, 7]]


@pytest.fixture
def numba_mods():
    """The numba kernel modules, or a skip saying why they cannot run here."""
    reason = B.numba_unavailable_reason()
    if reason is not None:
        pytest.skip(f"compares with the numba kernels: {reason}")
    from pyg_dist.ops import _numba_book, _numba_csr
    return _numba_book, _numba_csr


def _ids(bounds, n, seed):
    if bounds[-1] == 0 or n == 0:
        return np.empty(0, dtype=np.int64)
    return torch.randint(0, bounds[-1], (n,), generator=torch.Generator().manual_seed(seed)).numpy()


def _ref_split(ids, bounds):
    """Plain-Python oracle of split_by_range."""
    k = len(bounds) - 1
    owner = [max(p for p in range(k) if bounds[p] <= v) for v in ids.tolist()]
    order = [i for p in range(k) for i in range(len(ids)) if owner[i] == p]
    rows = [int(ids[i]) - bounds[owner[i]] for i in order]
    counts = [owner.count(p) for p in range(k)]
    return order, rows, [0] + np.cumsum(counts).tolist(), counts


# ------------------------------------------------------------------------------------------ the switch

def test_switch_unset_auto_and_empty_keep_the_default(monkeypatch):
    monkeypatch.delenv(B.BACKEND_ENV, raising=False)
    default = B.numba_available()
    for value in ("auto", ""):
        monkeypatch.setenv(B.BACKEND_ENV, value)
        assert B.env_backend() == "auto" and B.numba_available() == default
        assert B.resolve_backend("auto") == ("numba" if default else "torch")


def test_switch_torch_behaves_as_if_numba_were_missing(monkeypatch):
    monkeypatch.setenv(B.BACKEND_ENV, "torch")
    assert not B.numba_available() and "numba" not in B.available_backends()
    assert B.resolve_backend("auto") == "torch" and B.resolve_backend("torch") == "torch"
    assert "PYG_DIST_BACKEND=torch" in B.numba_unavailable_reason()
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_BACKEND=torch"):
        B.resolve_backend("numba", where="one_hop")
    from pyg_dist.ops import make_relabeler, warmup
    assert warmup() == 0.0
    assert type(make_relabeler(10)).__name__ == "TorchRelabeler"


@pytest.mark.parametrize("value", ["numba", "Torch", "torch ", "cuda"])
def test_switch_rejects_other_values_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(B.BACKEND_ENV, value)
    for call in (B.env_backend, B.numba_available, lambda: B.resolve_backend("auto"),
                 lambda: K.count_by_range(np.array([1]), np.array([0, 2]))):
        with pytest.raises(InvalidArgumentError, match=r"\$PYG_DIST_BACKEND") as info:
            call()
        assert repr(value) in str(info.value)


@pytest.mark.parametrize("name", ["rows_in_range", "count_by_range", "split_by_range", "split_by_slot",
                                  "symmetric_csr", "relabel_csc"])
def test_dispatch_follows_the_switch(monkeypatch, name):
    """With the switch on torch every dispatcher runs its torch twin (and never loads numba kernels)."""
    module = _torch_book if hasattr(_torch_book, name) else _torch_csr
    real, calls = getattr(module, name), []
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or real(*a))
    monkeypatch.setenv(B.BACKEND_ENV, "torch")
    args = {"rows_in_range": (np.array([3, 4]), 3, 5, np.empty(2, np.int64)),
            "count_by_range": (np.array([3, 4]), np.array([0, 4, 9])),
            "split_by_range": (np.array([3, 4]), np.array([0, 4, 9])),
            "split_by_slot": (np.array([3, 4]), np.array([1, 0]), np.array([-1, 0], dtype=np.int32), 3),
            "symmetric_csr": (torch.tensor([0, 1]), torch.tensor([1, 2]), 3),
            "relabel_csc": (torch.tensor([[0, 1], [1, 2]]), torch.arange(3), torch.arange(3), 3)}[name]
    getattr(K, name)(*args)
    assert calls == [1]


_PROBE = r"""
import importlib, json, pkgutil, sys
tried = []
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numba", "llvmlite"):
            f = sys._getframe(1)
            while f is not None and (f.f_code.co_filename.startswith("<frozen")
                                     or f.f_globals.get("__name__", "").split(".")[0] == "importlib"):
                f = f.f_back
            who = f.f_globals.get("__name__", "?") if f is not None else "?"   # the importing module's name
            tried.append([name, who, f.f_code.co_filename if f is not None else "?"])
            raise ImportError("numba is blocked in this test")
sys.meta_path.insert(0, Block())
import torch, pyg_dist
failed = []
for m in pkgutil.walk_packages(pyg_dist.__path__, "pyg_dist."):
    if not m.name.startswith("pyg_dist.ops._numba_"):
        try:
            importlib.import_module(m.name)
        except Exception as exc:
            failed.append([m.name, repr(exc)])
from pyg_dist.datasets import synthetic_graph
from pyg_dist.ops import available_backends, warmup
from pyg_dist.format import PartitionBook
from pyg_dist.partition import Partitioner
from pyg_dist.sampler import NeighborSampler
from torch_geometric.sampler import NodeSamplerInput
warmup()
data = synthetic_graph(300, 5, seed=1)
Partitioner(data, 2, method="metis").save(sys.argv[1], progress=False)
out = NeighborSampler(data, [3, 2]).sample_from_nodes(NodeSamplerInput(None, torch.arange(8)))
book = PartitionBook({"_N": torch.tensor([0, 100, 300])})
ids = torch.tensor([250, 3, 120])
book.split_by_owner("_N", ids); book.count_by_owner("_N", ids); book.rows_if_owned("_N", 1, ids)
edges_ok = torch.equal(data.edge_index[:, out.edge], torch.stack([out.node[out.row], out.node[out.col]]))
print(json.dumps({"failed": failed, "tried": tried, "backends": available_backends(),
                  "numba_loaded": "numba" in sys.modules, "nodes": int(out.node.numel()),
                  "first": out.node[:8].tolist(), "edges_ok": edges_ok}))
"""


@pytest.mark.parametrize("switch", [None, "torch"])
def test_everything_imports_and_runs_without_numba(tmp_path, switch):
    """numba blocked from importing: every module (but the numba kernels themselves) imports, and
    partitioning, sampling and routing run. With ``PYG_DIST_BACKEND=torch`` numba is never even tried."""
    env = {k: v for k, v in os.environ.items() if k != B.BACKEND_ENV}
    if switch:
        env[B.BACKEND_ENV] = switch
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "parts")], capture_output=True,
                          text=True, timeout=200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["failed"] == [] and res["backends"][0] == "torch" and not res["numba_loaded"]
    assert res["first"] == list(range(8)) and res["nodes"] > 8 and res["edges_ok"]  # seeds first, real edges
    # torch_geometric probes numba on its own: only pyg_dist's attempts count, told by the importing module's
    # name (not by a path: a clone named pyg_dist with its venv inside puts every package under /pyg_dist/)
    ours = [t for t in res["tried"] if t[1] == "pyg_dist" or t[1].startswith("pyg_dist.")]
    if switch == "torch":
        assert not ours, res["tried"]
    else:
        assert ours, res["tried"]


# --------------------------------------------------------------------------------- partition book

@pytest.mark.parametrize("bounds", BOUNDS)
@pytest.mark.parametrize("n", [0, 1, 257])
def test_split_and_count_by_range_match_the_oracle_and_numba(bounds, n, request):
    ids, b = _ids(bounds, n, seed=len(bounds) + n), np.array(bounds, dtype=np.int64)
    order, rows, ptr = _torch_book.split_by_range(ids, b)
    counts = _torch_book.count_by_range(ids, b)
    want_order, want_rows, want_ptr, want_counts = _ref_split(ids, bounds)
    assert order.tolist() == want_order and rows.tolist() == want_rows and ptr.tolist() == want_ptr
    assert counts.tolist() == want_counts
    assert all(a.dtype == np.int64 for a in (order, rows, ptr, counts))
    if B.numba_unavailable_reason() is None:
        nb, _ = request.getfixturevalue("numba_mods")
        for got, want in zip(nb.split_by_range(ids, b), (order, rows, ptr)):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        got = nb.count_by_range(ids, b)
        assert got.dtype == counts.dtype and np.array_equal(got, counts)


def test_range_kernels_agree_with_numba_outside_the_bounds(numba_mods):
    """Ids outside ``[bounds[0], bounds[-1])`` (never passed by the book, which checks first) still land
    in the same range on both backends."""
    nb, _ = numba_mods
    ids, b = np.array([-5, 0, 9, 12, 100], dtype=np.int64), np.array([0, 3, 5, 5, 9], dtype=np.int64)
    for got, want in zip(nb.split_by_range(ids, b), _torch_book.split_by_range(ids, b)):
        assert np.array_equal(got, want)
    assert np.array_equal(nb.count_by_range(ids, b), _torch_book.count_by_range(ids, b))


@pytest.mark.parametrize("n", [0, 1, 300])
def test_split_by_slot_matches_a_loop_and_numba(n, request):
    """Cache lookups: positions whose id has a slot in the table (ids below, inside and above its span)."""
    rng = np.random.default_rng(n)
    ids = rng.integers(-20, 120, size=n).astype(np.int64)
    pos = rng.permutation(n)[: n // 2 + 1 if n else 0].astype(np.int64)
    table = np.where(rng.random(80) < 0.4, rng.permutation(80), -1).astype(np.int32)  # ids 10..89
    want = ([int(p) for p in pos if 0 <= ids[p] - 10 < 80 and table[ids[p] - 10] >= 0],
            [int(table[ids[p] - 10]) for p in pos if 0 <= ids[p] - 10 < 80 and table[ids[p] - 10] >= 0],
            [int(p) for p in pos if not (0 <= ids[p] - 10 < 80 and table[ids[p] - 10] >= 0)])
    impls = [_torch_book.split_by_slot, K.split_by_slot]
    if B.numba_unavailable_reason() is None:
        impls.append(request.getfixturevalue("numba_mods")[0].split_by_slot)
    for impl in impls:
        got = impl(ids, pos, table, 10)
        assert [g.tolist() for g in got] == list(want) and all(g.dtype == np.int64 for g in got)


@pytest.mark.parametrize("ids,start,end,ok", [([9, 4, 7], 4, 10, True), ([9, 3, 7], 4, 10, False),
                                              ([9, 10], 4, 10, False), ([], 4, 10, True), ([4], 4, 5, True),
                                              ([0], 0, 0, False)])
def test_rows_in_range_matches_the_oracle_and_numba(ids, start, end, ok, request):
    a = np.array(ids, dtype=np.int64)
    impls = [_torch_book.rows_in_range, K.rows_in_range]
    if B.numba_unavailable_reason() is None:
        impls.append(request.getfixturevalue("numba_mods")[0].rows_in_range)
    for impl in impls:
        out = np.full(len(ids), -1, dtype=np.int64)
        assert bool(impl(a, start, end, out)) is ok
        if ok:
            assert out.tolist() == [v - start for v in ids]


def test_book_methods_equal_the_generic_ones_on_the_torch_backend(monkeypatch):
    from pyg_dist.format.book import PartitionBook, _BookBase
    monkeypatch.setenv(B.BACKEND_ENV, "torch")
    for bounds in BOUNDS:
        book = PartitionBook({"_N": torch.tensor(bounds)})
        for n in (0, 300):
            ids = torch.from_numpy(_ids(bounds, n, seed=n))
            order, rows, ptr = book.split_by_owner("_N", ids)
            generic = _BookBase.split_by_owner(book, "_N", ids)
            assert torch.equal(order, generic[0]) and torch.equal(rows, generic[1]) and ptr == generic[2]
            assert book.count_by_owner("_N", ids) == _BookBase.count_by_owner(book, "_N", ids)
    book = PartitionBook({"_N": torch.tensor([0, 4, 10])})
    assert book.rows_if_owned("_N", 1, torch.tensor([9, 4, 7])).tolist() == [5, 0, 3]
    assert book.rows_if_owned("_N", 1, torch.tensor([9, 3, 7])) is None


# ------------------------------------------------------------------------------------- partitioner

def _edges(n, m, kind, seed=0):
    """Edges as drawn, or sorted by (source, destination): plain, symmetrised, + self loops, + duplicates."""
    gen = torch.Generator().manual_seed(seed)
    s, d = torch.randint(0, max(n, 1), (m,), generator=gen), torch.randint(0, max(n, 1), (m,), generator=gen)
    if kind is None:
        return s, d
    return sorted_pairs(s, d, n, kind)


def _ref_symmetric(s, d, n):
    """Plain-Python oracle: per node, the sorted set of its neighbours in either direction, no loops."""
    nbrs = [set() for _ in range(n)]
    for a, b in zip(s.tolist(), d.tolist()):
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    ptr = [0] + np.cumsum([len(x) for x in nbrs]).tolist() if n else [0]
    return ptr, [v for x in nbrs for v in sorted(x)]


CSR_CASES = [(0, 0, None), (1, 0, None), (1, 5, None), (40, 300, None), (40, 300, "plain"),
             (40, 300, "symmetric"), (40, 300, "loops"), (40, 300, "duplicates"), (7, 49, None),
             (5, 3, None)]


@pytest.mark.parametrize("n,m,kind", CSR_CASES)
@pytest.mark.parametrize("keyed", [True, False])
def test_symmetric_csr_torch_matches_the_oracle_and_numba(monkeypatch, n, m, kind, keyed, request):
    s, d = _edges(n, m, kind, seed=n + m)
    if not keyed:  # the pair sort used past ~3e9 nodes, where src * n + dst would overflow int64
        monkeypatch.setattr(_torch_csr, "MAX_KEYED_NODES", -1)
    xadj, adj = _torch_csr.symmetric_csr(s.int(), d, n)  # int32 sources: converted like numba does
    want_ptr, want_adj = _ref_symmetric(s, d, n)
    assert xadj.tolist() == want_ptr and adj.tolist() == want_adj
    assert xadj.dtype == adj.dtype == np.int64
    if B.numba_unavailable_reason() is None:
        got_ptr, got_adj = request.getfixturevalue("numba_mods")[1].symmetric_csr(s, d, n)
        assert got_ptr.dtype == got_adj.dtype == np.int64
        assert np.array_equal(got_ptr, xadj) and np.array_equal(got_adj, adj)


def _ref_relabel(ei, inv_s, inv_d, num_dst, order_in):
    """Plain-Python oracle: edges bucketed by new destination, in ``order_in`` order inside a bucket."""
    order = list(range(ei.size(1))) if order_in is None else order_in.tolist()
    buckets = [[] for _ in range(num_dst)]
    for e in order:
        buckets[int(inv_d[ei[1, e]])].append(e)
    perm = [e for b in buckets for e in b]
    ptr = [0] + np.cumsum([len(b) for b in buckets]).tolist() if num_dst else [0]
    return perm, [int(inv_s[ei[0, e]]) for e in perm], [int(inv_d[ei[1, e]]) for e in perm], ptr


@pytest.mark.parametrize("num_src,num_dst,m", [(30, 30, 500), (5, 9, 40), (3, 0, 0), (4, 6, 0), (1, 1, 7)])
@pytest.mark.parametrize("with_order", [False, True])
def test_relabel_csc_torch_matches_the_oracle_and_numba(num_src, num_dst, m, with_order, request):
    gen = torch.Generator().manual_seed(num_src * 7 + m)
    ei = torch.stack([torch.randint(0, num_src, (m,), generator=gen),
                      torch.randint(0, max(num_dst, 1), (m,), generator=gen)])
    inv_s, inv_d = torch.randperm(num_src, generator=gen), torch.randperm(num_dst, generator=gen)
    order_in = torch.randperm(m, generator=gen) if with_order else None
    got = _torch_csr.relabel_csc(ei, inv_s, inv_d, num_dst, order_in)
    want = _ref_relabel(ei, inv_s, inv_d, num_dst, order_in)
    assert [t.tolist() for t in got] == list(want)
    assert all(t.dtype == torch.int64 for t in got)
    if B.numba_unavailable_reason() is None:
        nb = request.getfixturevalue("numba_mods")[1].relabel_csc(ei, inv_s, inv_d, num_dst, order_in)
        assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(nb, got))


def test_relabel_csc_checks_order_in():
    ei = torch.tensor([[0, 1, 1], [1, 0, 1]])
    with pytest.raises(InvalidArgumentError, match="order_in"):
        K.relabel_csc(ei, torch.arange(2), torch.arange(2), 2, torch.tensor([0, 1]))
    with pytest.raises(InvalidArgumentError, match="order_in"):
        K.relabel_csc(ei, torch.arange(2), torch.arange(2), 2, torch.empty(0, dtype=torch.long))


# ------------------------------------------------------------------------------------ row kernels

@pytest.mark.parametrize("segments", [0, 1, 60])
def test_scatter_segments_torch_matches_a_loop(monkeypatch, segments):
    """The torch path of :func:`pyg_dist.ops.rows.scatter_segments` (test_buffers compares both
    backends when numba is present)."""
    monkeypatch.setenv(B.BACKEND_ENV, "torch")
    gen = torch.Generator().manual_seed(segments)
    pos = torch.randperm(segments, generator=gen)
    counts = torch.randint(0, 7, (segments,), generator=gen)
    total = int(counts.sum())
    nbr = torch.randint(0, 10 ** 6, (total,), generator=gen)
    edge = torch.randint(0, 10 ** 6, (total,), generator=gen)
    segs = list(zip(torch.split(nbr, counts.tolist()), torch.split(edge, counts.tolist())))
    src_of = {int(p): j for j, p in enumerate(pos)}
    got = R.scatter_segments(pos, counts.to(torch.int32), nbr, edge)
    assert got[0].tolist() == [v for i in range(segments) for v in segs[src_of[i]][0].tolist()]
    assert got[1].tolist() == [v for i in range(segments) for v in segs[src_of[i]][1].tolist()]
    assert got[2].tolist() == [int(counts[src_of[i]]) for i in range(segments)]
    assert got[2].dtype == torch.int64 and got[0].dtype == nbr.dtype
