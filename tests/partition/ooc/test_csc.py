"""One partition's in-edges sorted by destination within a memory budget (:mod:`pyg_dist.partition.ooc.csc`).

Oracles: ``np.lexsort`` over (input order, edge time, destination) of the whole bucket; the same bucket sorted in
one slice; the in-memory partitioner's folder, bit for bit, written by the out-of-core one in many slices."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dist.partition import Partitioner
from pyg_dist.partition.ooc import csc
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.partition.ooc.spill import Buckets
from tests.partition.ooc.test_out_of_core import assert_same_folder
from tests.partition.test_partition import _hetero, _homo


def test_slice_starts_keep_each_slice_within_the_edges_allowed():
    colptr = np.array([0, 3, 3, 9, 10])
    assert csc.slice_starts(colptr, 4) == [0, 2, 3, 4]           # [3 + 0 edges], [6 edges: alone], [1 edge]
    assert csc.slice_starts(colptr, 100) == [0, 4]
    assert csc.slice_starts(np.array([0]), 5) == [0]              # no destination: no slice
    rng = np.random.default_rng(0)
    colptr = np.concatenate([[0], np.cumsum(rng.integers(0, 30, 500))])
    starts = csc.slice_starts(colptr, 40)
    sizes = np.diff(colptr[starts])
    heavy = np.diff(colptr)[starts[:-1]] > 40
    assert starts[0] == 0 and starts[-1] == 500 and all(np.diff(starts) > 0)
    assert all(s <= 40 for s, h in zip(sizes, heavy) if not h)   # only a destination above 40 stands alone


def _bucket(tmp_path, rng, n, d_lo, d_hi, time, shuffled):
    cols = {"row": np.int32, "col": np.int32, "eid": np.int64}
    if time:
        cols["time"] = np.int64
    b = Buckets(tmp_path / "bucket", 1, cols)
    eid = np.arange(1000, 1000 + n)
    if shuffled:  # shipped by several ranks: arrival order is not input order
        eid = rng.permutation(eid)
    rows = {"row": rng.integers(0, 5000, n).astype(np.int32), "col": rng.integers(d_lo, d_hi, n).astype(np.int32),
            "eid": eid}
    if time:
        rows["time"] = rng.integers(0, 20, n)
    for lo in range(0, n, 333):  # appended in chunks, as spilling does
        b.append(np.zeros(min(333, n - lo), dtype=np.int64), **{k: v[lo:lo + 333] for k, v in rows.items()})
    return b, rows


@pytest.mark.parametrize("time", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
def test_many_slices_sort_like_one_and_like_lexsort(tmp_path, time, shuffled):
    n, d_lo, d_hi = 4000, 700, 1500
    out = {}
    for budget in (1 << 30, 50 * csc.BYTES_PER_EDGE):            # one slice; slices of at most 50 edges
        b, rows = _bucket(tmp_path / str(budget), np.random.default_rng(3), n, d_lo, d_hi, time, shuffled)
        seen = []
        s = csc.SortedInEdges(b, 0, d_lo, d_hi, tmp_path / str(budget), tmp_path / str(budget) / "perm_x_0.npy",
                              budget, on_slice=seen.append)
        out[budget] = (np.array(s.row), np.array(s.col), np.load(s.perm_path), s.colptr.copy(), s.num_slices, seen)
        s.close()
        b.close()
    one, many = out[1 << 30], out[50 * csc.BYTES_PER_EDGE]
    assert one[4] == 1 and many[4] > 10
    keys = (rows["eid"], rows["time"], rows["col"]) if time else (rows["eid"], rows["col"])
    order = np.lexsort(keys)                                     # last key first: destination, time, input order
    for got in (one, many):
        assert np.array_equal(got[0], rows["row"][order].astype(np.int64))
        assert np.array_equal(got[1], rows["col"][order].astype(np.int64))
        assert np.array_equal(got[2], rows["eid"][order])
        assert np.array_equal(got[3], np.concatenate([[0], np.cumsum(np.bincount(rows["col"] - d_lo,
                                                                                  minlength=d_hi - d_lo))]))
        assert np.array_equal(np.sort(np.concatenate(got[5])), np.sort(rows["row"].astype(np.int64)))
    assert not list((tmp_path / str(50 * csc.BYTES_PER_EDGE)).glob("*.row.npy"))  # scratch removed


def test_an_empty_partition_sorts_to_nothing(tmp_path):
    b = Buckets(tmp_path / "b", 2, {"row": np.int32, "col": np.int32, "eid": np.int64})
    s = csc.SortedInEdges(b, 1, 10, 14, tmp_path, tmp_path / "perm_x_1.npy", 1 << 20)
    assert s.row.size == 0 and s.colptr.tolist() == [0, 0, 0, 0, 0]
    s.close()
    b.close()


@pytest.mark.parametrize("make,parts", [(_homo, 3), (_hetero, 2)])
def test_a_tiny_budget_writes_the_in_memory_folder_bit_for_bit(tmp_path, make, parts):
    data = make()
    Partitioner(data, parts, "random", seed=4).save(tmp_path / "mem", progress=False)
    OutOfCorePartitioner(data, parts, "random", seed=4, chunk_size=97, memory_budget="6KB").save(
        tmp_path / "ooc", progress=False)                        # about 96 edges a slice: every partition sliced
    assert_same_folder(tmp_path / "mem", tmp_path / "ooc")
    edges = torch.load(tmp_path / "ooc" / "part_0" / "graph.pt", weights_only=True)
    sizes = [edges["row"].numel()] if "row" in edges else [e["row"].numel() for e in edges.values()]
    assert max(sizes) > 2 * 96                                   # so at least one edge type went in 3+ slices
