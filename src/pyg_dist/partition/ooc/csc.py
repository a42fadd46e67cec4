"""One partition's in-edges sorted by destination (CSC) within a memory budget, for the out-of-core writer.

A partition's bucket (:class:`~pyg_dist.partition.ooc.spill.Buckets`: its edges' ``row``, ``col``, ``eid`` and
``time`` columns in arrival order) is read through memory maps, never whole:

1. one pass counts every destination's in-edges (the CSC pointers, 8 bytes per destination);
2. the destinations are cut into slices of at most ``budget // BYTES_PER_EDGE`` edges (a destination with more
   edges is a slice of its own), and a second pass routes each edge to its slice's bucket, in arrival order
   (one slice: no second pass);
3. each slice is sorted as the whole bucket would be (input order first, then by edge time where there is one,
   then by destination: all stable) and written at its place in memory-mapped outputs: ``row`` and ``col``
   (int64) and the original edge ids (the ``.npy`` the edge maps are built from).

Slices cover disjoint destination ranges in order, so their concatenation is exactly the whole bucket sorted at
once. Working memory: the pointers plus one slice's columns and sort (``BYTES_PER_EDGE`` per edge); the outputs
are file pages the kernel can write back and drop. A partition of 200 M edges, sorted whole, needed about 60
bytes per edge of anonymous memory (12 GB); within a 2 GB budget it needs about 2 GB.

Example:
    >>> slice_starts(np.array([0, 3, 3, 9, 10]), 4)    # 4 destinations: [0, 1] (3 edges), [2] (6: alone), [3]
    [0, 2, 3, 4]
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from pyg_dist import _fsio
from pyg_dist.partition.ooc.spill import Buckets, stable_order

#: Working bytes per edge of the slice being sorted: its columns read (up to 24 with time), the sort's keys and
#: order (torch: 16), the order kept (8), one gathered output column (8), with room to spare.
BYTES_PER_EDGE = 64


def slice_starts(colptr: np.ndarray, max_edges: int) -> List[int]:
    """Destination indices where slices start, and the end: consecutive destinations while their edges fit
    ``max_edges`` (a destination with more edges alone)."""
    starts, n = [0], colptr.size - 1
    while starts[-1] < n:
        lo = starts[-1]
        hi = int(np.searchsorted(colptr, colptr[lo] + max_edges, side="right")) - 1
        starts.append(min(max(hi, lo + 1), n))
    return starts


def mapped(path: Path, n: int, dtype=np.int64) -> np.ndarray:
    """A writable array of ``n`` values backed by the file ``path`` (typed error when the disk is full)."""
    with _fsio.writing(path, needed=n * np.dtype(dtype).itemsize):
        if n == 0:
            return np.zeros(0, dtype=dtype)
        return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,))


def _order(rows: Dict[str, np.ndarray]) -> np.ndarray:
    """The CSC order of one slice: input order (``eid``) first, then edge time, then destination; all stable."""
    eid = rows["eid"]
    first = None
    if eid.size > 1 and not bool((eid[1:] > eid[:-1]).all()):  # shipped by several ranks
        first = stable_order(eid)
    col = rows["col"] if first is None else rows["col"][first]
    if "time" in rows:
        time = rows["time"] if first is None else rows["time"][first]
        by_time = stable_order(time)
        order = by_time[stable_order(col[by_time])]
    else:
        order = stable_order(col)
    return order if first is None else first[order]


class SortedInEdges:
    """Partition ``p``'s in-edges of one edge type in CSC order (see the module docstring).

    Attributes:
        row / col / eid: int64 arrays over files under ``scratch`` (``eid`` is the ``.npy`` at ``perm_path``).
        colptr: CSC pointers over ``[d_lo, d_hi)``.
    """

    def __init__(self, buckets: Buckets, p: int, d_lo: int, d_hi: int, scratch: Path, perm_path: Path,
                 budget: int, on_slice=None):
        self.scratch, self.perm_path = Path(scratch), Path(perm_path)
        src = buckets.mapped(p)
        n, max_edges = int(buckets.counts[p]), max(1, int(budget) // BYTES_PER_EDGE)
        counts = np.zeros(d_hi - d_lo, dtype=np.int64)
        for lo in range(0, n, max_edges):
            counts += np.bincount(src["col"][lo:lo + max_edges] - d_lo, minlength=d_hi - d_lo)
        self.colptr = np.zeros(d_hi - d_lo + 1, dtype=np.int64)
        np.cumsum(counts, out=self.colptr[1:])
        del counts
        starts = slice_starts(self.colptr, max_edges)
        self.num_slices = len(starts) - 1
        tag = perm_path.stem
        self.row = mapped(self.scratch / f"{tag}.row.npy", n)
        self.col = mapped(self.scratch / f"{tag}.col.npy", n)
        self.eid = mapped(self.perm_path, n)
        if self.num_slices == 1:  # the bucket fits the budget: sorted at once
            del src
            rows = buckets.read(p)
            buckets.drop(p)
            self._write(rows, 0, on_slice)
            return
        slices = self._route(buckets, p, src, starts, d_lo, max_edges)
        del src
        buckets.drop(p)
        try:
            for k in range(self.num_slices):
                self._write(slices.read(k), int(self.colptr[starts[k]]), on_slice)
                slices.drop(k)
        finally:
            slices.close()

    def _route(self, buckets: Buckets, p: int, src, starts: List[int], d_lo: int, max_edges: int) -> Buckets:
        """Every edge to its slice's bucket, chunk by chunk, in arrival order."""
        slices = Buckets(self.scratch / f"{self.perm_path.stem}.slices", self.num_slices, buckets.columns)
        first = np.asarray(starts[:-1], dtype=np.int64)
        n = int(buckets.counts[p])
        for lo in range(0, n, max_edges):
            chunk = {c: np.asarray(v[lo:lo + max_edges]) for c, v in src.items()}
            slices.append(np.searchsorted(first, chunk["col"] - d_lo, side="right") - 1, **chunk)
        return slices

    def _write(self, rows: Dict[str, np.ndarray], at: int, on_slice) -> None:
        order = _order(rows)
        end = at + order.size
        self.col[at:end] = rows.pop("col")[order]
        self.eid[at:end] = rows.pop("eid")[order]
        row = rows.pop("row")[order].astype(np.int64)
        self.row[at:end] = row
        if on_slice is not None:
            on_slice(row)

    def close(self) -> None:
        """Writes the original edge ids' file out; removes the ``row`` / ``col`` scratch files."""
        if isinstance(self.eid, np.memmap):
            self.eid.flush()
        self.row = self.col = self.eid = None  # type: ignore[assignment]
        for name in ("row", "col"):
            (self.scratch / f"{self.perm_path.stem}.{name}.npy").unlink(missing_ok=True)


def edge_range(bounds, p: int) -> Tuple[int, int]:
    """``[lo, hi)`` of partition ``p``'s edges in the new edge order."""
    return int(bounds[p]), int(bounds[p + 1])


__all__ = ["BYTES_PER_EDGE", "slice_starts", "mapped", "SortedInEdges", "edge_range"]
