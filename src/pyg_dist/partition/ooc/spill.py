"""On-disk buckets for the out-of-core partitioner: rows appended chunk by chunk, read back one bucket at a time.

:class:`Buckets` keeps one raw binary file per (bucket, column); :meth:`Buckets.append` routes each row to
its bucket with one stable pass, so a bucket's rows stay in the order they were appended (input order).
:class:`BlockAdjacency` uses it to store the symmetric adjacency of a graph grouped by blocks of node ids,
the input of the streaming assignment methods (:mod:`pyg_dist.partition.ooc.streaming`).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch

from pyg_dist.partition.ooc.chunked import ChunkedGraph, check_ids
from pyg_dist.partition.ooc.comm import Comm


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``, through torch's sort (several times faster on large arrays)."""
    return torch.sort(torch.from_numpy(np.ascontiguousarray(keys)), stable=True).indices.numpy()


def unique_counts(keys: np.ndarray) -> tuple:
    """``np.unique(keys, return_counts=True)`` through torch's sort."""
    s = torch.sort(torch.from_numpy(np.ascontiguousarray(keys))).values.numpy()
    if not s.size:
        return s, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[starts], np.diff(np.r_[starts, s.size])


class Buckets:
    """Columns of rows in ``num_buckets`` bucket files under ``folder``.

    Args:
        folder: A fresh folder for the files (removed by :meth:`close`).
        num_buckets: Number of buckets.
        columns: Column name -> numpy dtype.
    """

    def __init__(self, folder: Path, num_buckets: int, columns: Dict[str, Any]):
        self.folder, self.num_buckets, self.columns = Path(folder), num_buckets, dict(columns)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.counts = np.zeros(num_buckets, dtype=np.int64)
        self._files = {(b, c): open(self._path(b, c), "wb") for b in range(num_buckets) for c in self.columns}

    def _path(self, bucket: int, column: str) -> Path:
        return self.folder / f"b{bucket}_{column}.bin"

    def append(self, bucket: np.ndarray, **cols: np.ndarray) -> None:
        """Appends rows: ``bucket[i]`` is row ``i``'s bucket, ``cols[name][i]`` its values."""
        order = stable_order(bucket)
        ptr = np.concatenate([[0], np.cumsum(np.bincount(bucket, minlength=self.num_buckets))])
        self.counts += np.diff(ptr)
        for name, dtype in self.columns.items():
            values = cols[name][order].astype(dtype, copy=False)
            for b in np.flatnonzero(np.diff(ptr)).tolist():
                values[ptr[b]:ptr[b + 1]].tofile(self._files[(b, name)])

    def read(self, bucket: int) -> Dict[str, np.ndarray]:
        """All rows of ``bucket``, in append order, one array per column."""
        for c in self.columns:
            self._files[(bucket, c)].flush()
        return {c: np.fromfile(self._path(bucket, c), dtype=d) for c, d in self.columns.items()}

    def mapped(self, bucket: int) -> Dict[str, np.ndarray]:
        """``bucket``'s columns as read-only memory maps (nothing read until used), in append order."""
        out: Dict[str, np.ndarray] = {}
        for c, d in self.columns.items():
            self._files[(bucket, c)].flush()
            path = self._path(bucket, c)
            out[c] = np.memmap(path, dtype=d, mode="r") if path.stat().st_size else np.zeros(0, dtype=d)
        return out

    def drop(self, bucket: int) -> None:
        """Deletes ``bucket``'s files (after it was read for the last time)."""
        for c in self.columns:
            self._files[(bucket, c)].close()
            self._path(bucket, c).unlink(missing_ok=True)

    def close(self) -> None:
        """Closes and deletes every bucket file."""
        for f in self._files.values():
            f.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class BlockAdjacency:
    """The symmetric adjacency of a graph (every edge both ways, self loops dropped, duplicates kept),
    over the concatenated id space of all node types, grouped in blocks of ``block_size`` node ids.

    Built with one pass over the edge chunks. Across ranks (``comm``), each rank reads its share of the
    chunks and ships every entry to the rank holding its block (block ``b`` on rank ``b % world``).
    :meth:`blocks` yields ``(start, n, ptr, nbr)`` for every block in order: the neighbours of node
    ``start + i`` are ``nbr[ptr[i]:ptr[i + 1]]`` (int32 below 2**31 nodes, else int64); ``ptr`` and ``nbr``
    are ``None`` for a block another rank holds, whose results arrive through :meth:`sync`. Within a row,
    neighbours may come in any order (every consumer counts them).
    """

    def __init__(self, g: ChunkedGraph, folder: Path, block_size: int, chunk_size: int, progress=None,
                 comm: Optional[Comm] = None):
        self.comm = comm or Comm()
        self.num_nodes, self.block_size = g.total_nodes(), max(1, int(block_size))
        self.num_blocks = max(1, -(-self.num_nodes // self.block_size))
        self.dtype = np.int32 if self.num_nodes < 2 ** 31 else np.int64
        self.buckets = Buckets(folder, self.num_blocks, {"u": self.dtype, "v": self.dtype})
        off = g.offsets()
        for et, source in g.edges.items():
            for chunk in self.comm.rounds(source.chunks(chunk_size, self.comm.mine)):
                u = v = np.zeros(0, dtype=np.int64)
                if chunk is not None:
                    start, src, dst = chunk
                    check_ids(src, dst, g.num_nodes[et[0]], g.num_nodes[et[2]], source, start)
                    u, v = src + off[et[0]], dst + off[et[2]]
                    keep = u != v
                    u, v = u[keep], v[keep]
                    if progress is not None:
                        progress.update(src.size)
                both = {"u": np.concatenate([u, v]), "v": np.concatenate([v, u])}
                block = both["u"] // self.block_size
                got = self.comm.exchange(block % self.comm.world, both)
                self.buckets.append(got["u"] // self.block_size, **got)
        self._entries = int(self.comm.all_reduce_(np.array([self.buckets.counts.sum()]))[0])

    @property
    def num_entries(self) -> int:
        """Adjacency entries (twice the non-loop edges)."""
        return self._entries

    def blocks(self) -> Iterator[Tuple[int, int, Optional[np.ndarray], Optional[np.ndarray]]]:
        """``(start, n, ptr, nbr)`` per block (see the class docstring). The first read of a block sorts it
        and writes it back in CSR form, so later passes only read."""
        for b in range(self.num_blocks):
            start = b * self.block_size
            n = min(self.block_size, self.num_nodes - start)
            if not self.comm.mine(b):
                yield start, n, None, None
                continue
            ptr_file, nbr_file = self.buckets.folder / f"csr{b}_ptr.bin", self.buckets.folder / f"csr{b}_nbr.bin"
            if ptr_file.is_file():
                yield start, n, np.fromfile(ptr_file, dtype=np.int64), np.fromfile(nbr_file, dtype=self.dtype)
                continue
            rows = self.buckets.read(b)
            self.buckets.drop(b)
            u = rows["u"].astype(np.int64) - start
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(u, minlength=n), out=ptr[1:])
            nbr = rows["v"][stable_order(u)]
            del rows, u
            nbr.tofile(nbr_file)
            ptr.tofile(ptr_file)
            yield start, n, ptr, nbr

    def sync(self, start: int, *arrays: np.ndarray) -> None:
        """After a block: every rank gets the holder's ``arrays`` (contiguous; e.g. the block's slice of the
        assignment, and the loads)."""
        if self.comm.world > 1:
            for a in arrays:
                self.comm.broadcast_(a, self.comm.owner(start // self.block_size))

    def close(self) -> None:
        """Deletes the spill files."""
        self.buckets.close()
