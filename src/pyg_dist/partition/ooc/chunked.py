"""Graphs read from disk in chunks, for the out-of-core partitioner (:mod:`pyg_dist.partition.ooc.partitioner`).

A :class:`ChunkedGraph` never holds its edge list: each edge type is an :class:`EdgeSource` that yields
``(start, src, dst)`` chunks in input order, and node / edge attributes are arrays that are only indexed
(``.npy`` files read row by row through :class:`NpyRows`, numpy arrays, or tensors). Sources:

- :class:`ArrayEdges`: a ``[2, E]`` or ``[E, 2]`` array (an ``.npy`` file is read chunk by chunk);
- :class:`FileChunkEdges`: a list of ``.npy`` / ``.pt`` chunk files, each ``[2, e]`` or ``[e, 2]``;
- :class:`CsvEdges`: a text edge list (``.csv``, ``.txt``, optionally ``.gz``, e.g. OGB's ``edge.csv.gz``),
  parsed block by block;
- :class:`ParquetEdges`: Parquet files with two integer columns, read batch by batch with ``pyarrow``.

:func:`open_chunked` builds a homogeneous graph from a folder; :func:`chunked_from_data` wraps an in-memory
``Data`` / ``HeteroData`` (tests compare both partitioners on it).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, require
from pyg_dist.partition.source import NodeShape

_WHERE = "ChunkedGraph"
Chunk = Tuple[int, np.ndarray, np.ndarray]
Keep = Optional[Callable[[int], bool]]
NODE_FILES = ("x", "y", "time", "train_mask", "val_mask", "test_mask")
EDGE_FILES = ("edge_attr", "edge_weight", "edge_time")


def _pairs(arr, name: str) -> Tuple[Any, bool]:
    """``(array, rows_first)`` for a ``[2, E]`` (rows_first) or ``[E, 2]`` integer array."""
    shape = tuple(arr.shape)
    dtype = arr.dtype
    floating = dtype.is_floating_point if isinstance(arr, Tensor) else np.issubdtype(dtype, np.floating)
    if len(shape) != 2 or 2 not in shape or floating:
        raise InvalidArgumentError(_WHERE, name, f"shape {shape}, dtype {dtype}", "integer edges [2, E] or [E, 2]")
    return arr, shape[0] == 2 and not (shape[1] == 2 and shape[0] != 2)


def _np(a) -> np.ndarray:
    return a.numpy() if isinstance(a, Tensor) else np.asarray(a)


class EdgeSource:
    """Edges of one type, read in chunks in input order. Subclasses define :meth:`_blocks`."""
    name: str = "edges"
    _count: Optional[int] = None

    @property
    def num_edges(self) -> int:
        """Number of edges (a text source counts them with one pass the first time)."""
        if self._count is None:
            self._count = sum(s.size for _, s, _ in self.chunks(1 << 22))
        return self._count

    def _blocks(self, chunk_size: int) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        raise NotImplementedError

    def chunks(self, chunk_size: int, keep: Keep = None) -> Iterator[Chunk]:
        """Yields ``(start, src, dst)``: int64 arrays of at most ``chunk_size`` edges from edge ``start``;
        with ``keep``, only chunks ``i`` with ``keep(i)`` (the others are not even read where the format
        allows: ``.npy`` / ``.pt`` sources; text and Parquet are parsed and skipped)."""
        start, i = 0, 0
        for src, dst in self._blocks(chunk_size):
            for lo in range(0, src.size, chunk_size):
                s = np.ascontiguousarray(src[lo:lo + chunk_size], dtype=np.int64)
                if keep is None or keep(i):
                    yield start, s, np.ascontiguousarray(dst[lo:lo + chunk_size], dtype=np.int64)
                start, i = start + s.size, i + 1
        self._count = start


class NpyRows:
    """Rows of an ``.npy`` file, read on demand: each read maps the file, copies the rows and unmaps it, so
    the pages read are never counted as the process's memory (as a long-lived memory map's would be)."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            self.shape, self.fortran, self.dtype = read(f)
            self.offset = f.tell()

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, idx) -> np.ndarray:
        rows = np.load(self.path, mmap_mode="r", allow_pickle=False)
        return np.array(rows[idx])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self[:].astype(dtype) if dtype is not None else self[:]

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` consecutive values from position ``start`` in file order (C or Fortran; plain reads)."""
        return np.fromfile(self.path, dtype=self.dtype, count=count, offset=self.offset + start * self.dtype.itemsize)


class ArrayEdges(EdgeSource):
    """Edges from one array: a tensor, a numpy array, or an ``.npy`` path (read chunk by chunk from the file)."""

    def __init__(self, edges: Union[str, Path, np.ndarray, Tensor], name: str = "edges"):
        self.name = str(edges) if isinstance(edges, (str, Path)) else name
        arr = NpyRows(edges) if isinstance(edges, (str, Path)) else edges
        self.arr, self.rows_first = _pairs(arr, self.name)
        self._count = int(arr.shape[1] if self.rows_first else arr.shape[0])

    def chunks(self, chunk_size: int, keep: Keep = None) -> Iterator[Chunk]:
        """See :meth:`EdgeSource.chunks` (skipped chunks are not read)."""
        total = self._count or 0
        for i, lo in enumerate(range(0, total, chunk_size)):
            if keep is None or keep(i):
                src, dst = self._read(lo, min(lo + chunk_size, total), total)
                yield lo, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64)

    def _read(self, lo: int, hi: int, total: int) -> Tuple[np.ndarray, np.ndarray]:
        if isinstance(self.arr, NpyRows) and self.rows_first != self.arr.fortran:  # sources, then destinations
            return self.arr.read(lo, hi - lo), self.arr.read(total + lo, hi - lo)
        if isinstance(self.arr, NpyRows):
            pairs = self.arr.read(2 * lo, 2 * (hi - lo)).reshape(-1, 2)
            return pairs[:, 0], pairs[:, 1]
        part = self.arr[:, lo:hi] if self.rows_first else self.arr[lo:hi].T
        return _np(part[0]), _np(part[1])


class FileChunkEdges(EdgeSource):
    """Edges from chunk files (``.npy`` / ``.pt``, each ``[2, e]`` or ``[e, 2]``), in the given order."""

    def __init__(self, paths: Sequence[Union[str, Path]]):
        self.paths = [Path(p) for p in paths]
        self.name = str(self.paths[0].parent) if self.paths else "edges"
        self._count = sum(self._open(p).num_edges for p in self.paths)

    @staticmethod
    def _open(path: Path) -> ArrayEdges:
        if path.suffix == ".npy":
            return ArrayEdges(path)
        value = torch.load(path, weights_only=True, mmap=True)
        if not isinstance(value, Tensor):
            raise InvalidArgumentError(_WHERE, "edge chunk", str(path), "a tensor [2, e] or [e, 2]")
        return ArrayEdges(value, str(path))

    def chunks(self, chunk_size: int, keep: Keep = None) -> Iterator[Chunk]:
        """See :meth:`EdgeSource.chunks` (skipped chunks are not read)."""
        start, first = 0, 0  # edge and chunk index of the file's first chunk
        for path in self.paths:
            arrays = self._open(path)
            count = arrays.num_edges
            shifted = (lambda i, f=first: keep(f + i)) if keep is not None else None
            for lo, src, dst in arrays.chunks(chunk_size, shifted):
                yield start + lo, src, dst
            start, first = start + count, first - (-count // chunk_size)


class CsvEdges(EdgeSource):
    """A text edge list (two integer columns, ``,`` / whitespace separated, ``.gz`` allowed), streamed."""

    def __init__(self, path: Union[str, Path], block_bytes: int = 1 << 26):
        self.path, self.name, self.block_bytes = Path(path), str(path), block_bytes
        if not self.path.is_file():
            raise InvalidArgumentError(_WHERE, "edges", str(path), "an existing file")

    def _blocks(self, chunk_size: int):
        opener = gzip.open if self.path.suffix == ".gz" else open
        rest = b""
        with opener(self.path, "rb") as f:
            while True:
                data = f.read(self.block_bytes)
                text, rest = (rest + data, b"") if not data else _split_last_line(rest + data)
                if text.strip():
                    yield self._parse(text)
                if not data:
                    return

    def _parse(self, text: bytes) -> Tuple[np.ndarray, np.ndarray]:
        lines = [ln for ln in text.split(b"\n") if ln.strip() and not ln.lstrip().startswith(b"#")]
        flat = np.array(b" ".join(lines).replace(b",", b" ").split(), dtype=np.int64)
        if flat.size % 2:
            raise InvalidArgumentError(_WHERE, "edges", self.name, "two integer columns on every line")
        return flat[0::2], flat[1::2]


def _split_last_line(data: bytes) -> Tuple[bytes, bytes]:
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


class ParquetEdges(EdgeSource):
    """Edges from Parquet files with integer columns ``columns`` (source, destination), via ``pyarrow``."""

    def __init__(self, paths: Sequence[Union[str, Path]], columns: Tuple[str, str] = ("src", "dst")):
        pq = require("pyarrow.parquet", "reading Parquet edge chunks", "pip install pyarrow")
        self.paths, self.columns = [Path(p) for p in paths], tuple(columns)
        self.name = str(self.paths[0]) if self.paths else "edges"
        self._count = 0
        for p in self.paths:
            f = pq.ParquetFile(p)
            missing = [c for c in self.columns if c not in f.schema_arrow.names]
            if missing:
                raise InvalidArgumentError(_WHERE, "columns", list(self.columns),
                                           f"columns of {p} (it has {f.schema_arrow.names})")
            self._count += f.metadata.num_rows

    def _blocks(self, chunk_size: int):
        import pyarrow.parquet as pq
        for p in self.paths:
            for batch in pq.ParquetFile(p).iter_batches(batch_size=chunk_size, columns=list(self.columns)):
                yield (batch.column(0).to_numpy(zero_copy_only=False),
                       batch.column(1).to_numpy(zero_copy_only=False))


@dataclass
class ChunkedGraph(NodeShape):
    """A graph on disk: per-type edge sources and row-indexable attributes (see the module docstring).

    Attributes mirror :class:`~pyg_dist.partition.source.TypedGraph` (``num_nodes``, ``node_attrs``,
    ``node_time``, ``edge_attrs``, ``edge_time``, ``graph_attrs``), with ``edges`` instead of
    ``edge_index``; an attribute is a tensor, a numpy array or :class:`NpyRows`, one row per node / edge
    in input order.
    """
    num_nodes: Dict[NodeType, int]
    edges: Dict[EdgeType, EdgeSource]
    node_attrs: Dict[NodeType, Dict[str, Any]] = field(default_factory=dict)
    node_time: Dict[NodeType, Any] = field(default_factory=dict)
    edge_attrs: Dict[EdgeType, Dict[str, Any]] = field(default_factory=dict)
    edge_time: Dict[EdgeType, Any] = field(default_factory=dict)
    is_hetero: bool = False
    graph_attrs: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        for t in self.num_nodes:
            self.node_attrs.setdefault(t, {})
        for et in self.edges:
            self.edge_attrs.setdefault(et, {})

    @property
    def edge_types(self) -> List[EdgeType]:
        return list(self.edges)

    def num_edges(self, edge_type: EdgeType) -> int:
        """Number of edges of ``edge_type``."""
        return self.edges[edge_type].num_edges

    def check(self) -> "ChunkedGraph":
        """Raises :class:`InvalidArgumentError` on an attribute whose row count is wrong; returns self."""
        for t, attrs in list(self.node_attrs.items()) + [(t, {"time": v}) for t, v in self.node_time.items()]:
            for k, v in attrs.items():
                if len(v) != self.num_nodes[t]:
                    raise InvalidArgumentError(_WHERE, f"node attribute {t}.{k}", f"{len(v)} rows",
                                               f"one row per node ({self.num_nodes[t]})")
        for et, attrs in list(self.edge_attrs.items()) + [(e, {"edge_time": v}) for e, v in self.edge_time.items()]:
            for k, v in attrs.items():
                if len(v) != self.num_edges(et):
                    raise InvalidArgumentError(_WHERE, f"edge attribute {et}.{k}", f"{len(v)} rows",
                                               f"one row per edge ({self.num_edges(et)})")
        return self


def take_rows(arr, idx: np.ndarray, dtype: Optional[torch.dtype] = None) -> Tensor:
    """Rows ``idx`` of a tensor, numpy array or :class:`NpyRows` (which reads only those rows) as a tensor; rows
    computed on demand (an object with ``take_rows``, e.g. generated features) are made in ``dtype`` if given."""
    if isinstance(arr, Tensor):
        return arr.index_select(0, torch.from_numpy(idx))
    if hasattr(arr, "take_rows"):  # rows computed on demand, in their own dtype
        return arr.take_rows(idx, dtype)
    return torch.from_numpy(np.ascontiguousarray(arr[idx]))


def check_ids(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int, source: EdgeSource, start: int) -> None:
    """Raises :class:`InvalidArgumentError` naming the source and edge range when an id is out of range."""
    for ids, n, row in ((src, num_src, "source"), (dst, num_dst, "destination")):
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise InvalidArgumentError(_WHERE, f"{source.name} edges {start}..{start + ids.size}",
                                       f"{row} ids in [{int(ids.min())}, {int(ids.max())}]", f"ids in [0, {n})")


def chunked_from_data(data) -> ChunkedGraph:
    """A :class:`ChunkedGraph` over an in-memory ``Data`` / ``HeteroData`` (validated like the partitioner's)."""
    from pyg_dist.partition.source import typed_graph
    g = typed_graph(data)
    return ChunkedGraph(num_nodes=dict(g.num_nodes), edges={et: ArrayEdges(ei) for et, ei in g.edge_index.items()},
                        node_attrs=g.node_attrs, node_time=g.node_time, edge_attrs=g.edge_attrs,
                        edge_time=g.edge_time, is_hetero=g.is_hetero, graph_attrs=g.graph_attrs)


def _edge_source(folder: Path, columns: Tuple[str, str]) -> EdgeSource:
    for name in ("edges.npy", "edges.pt"):
        if (folder / name).is_file():
            return ArrayEdges(folder / name) if name.endswith(".npy") else FileChunkEdges([folder / name])
    if (folder / "edges").is_dir():
        files = sorted(p for p in (folder / "edges").iterdir() if p.suffix in (".npy", ".pt", ".parquet"))
        kinds = {p.suffix == ".parquet" for p in files}
        if not files or len(kinds) > 1:
            raise InvalidArgumentError(_WHERE, "root", str(folder / "edges"),
                                       "a folder of .npy / .pt chunks or of .parquet files (not both)")
        return ParquetEdges(files, columns) if True in kinds else FileChunkEdges(files)
    for name in ("edges.csv", "edges.csv.gz", "edges.txt", "edges.txt.gz", "edge.csv.gz", "raw/edge.csv.gz"):
        if (folder / name).is_file():
            return CsvEdges(folder / name)
    raise InvalidArgumentError(_WHERE, "root", str(folder), "a folder with edges.npy / edges.pt / edges/ "
                               "(chunks) / edges.csv[.gz] / edge.csv.gz (OGB raw)")


def _attr(path: Path):
    if path.name.endswith(".rows.json"):  # rows computed on demand (the papers100M-shaped generator's features)
        from pyg_dist.datasets.papers_like import GeneratedRows
        return GeneratedRows(path)
    if path.suffix == ".npy":
        return NpyRows(path)
    return torch.load(path, weights_only=True, mmap=True)


def _find(folder: Path, stem: str) -> Optional[Path]:
    for ext in (".npy", ".pt", ".rows.json"):
        if (folder / f"{stem}{ext}").is_file():
            return folder / f"{stem}{ext}"
    return None


def _ogb_num_nodes(folder: Path) -> Optional[int]:
    for path in (folder / "num-node-list.csv.gz", folder / "raw" / "num-node-list.csv.gz"):
        if path.is_file():
            with gzip.open(path, "rt") as f:
                return int(f.read().split()[0])
    return None


def open_chunked(root: Union[str, Path], num_nodes: Optional[int] = None,
                 columns: Tuple[str, str] = ("src", "dst")) -> ChunkedGraph:
    """A homogeneous :class:`ChunkedGraph` from a folder.

    The edges are ``edges.npy`` (read in chunks), ``edges.pt``, a folder ``edges/`` of ``.npy`` / ``.pt``
    chunk files or of Parquet files (columns ``columns``), or a text list ``edges.csv[.gz]`` /
    ``edge.csv.gz`` (OGB's raw layout, ``raw/`` too). Node attributes ``x``, ``y``, ``time`` and the
    masks, and edge attributes ``edge_attr``, ``edge_weight``, ``edge_time``, are picked up as ``.npy``
    (:class:`NpyRows`) or ``.pt`` (memory-mapped) files by name. ``num_nodes`` defaults to OGB's
    ``num-node-list.csv.gz``, else the rows of a node file, else the largest id + 1 (one pass over the edges).
    """
    folder = Path(root)
    if not folder.is_dir():
        raise InvalidArgumentError(_WHERE, "root", str(root), "an existing folder")
    edges = _edge_source(folder, columns)
    nodes = {k: _attr(p) for k in NODE_FILES if (p := _find(folder, k)) is not None}
    per_edge = {k: _attr(p) for k in EDGE_FILES if (p := _find(folder, k)) is not None}
    if num_nodes is None:
        num_nodes = _ogb_num_nodes(folder)
    if num_nodes is None and nodes:
        num_nodes = len(next(iter(nodes.values())))
    if num_nodes is None:
        num_nodes = max((int(max(s.max(), d.max())) + 1 for _, s, d in edges.chunks(1 << 22) if s.size), default=0)
    time = nodes.pop("time", None)
    edge_time = per_edge.pop("edge_time", None)
    return ChunkedGraph(num_nodes={HOMO_NODE: int(num_nodes)}, edges={HOMO_EDGE: edges},
                        node_attrs={HOMO_NODE: nodes}, node_time={HOMO_NODE: time} if time is not None else {},
                        edge_attrs={HOMO_EDGE: per_edge},
                        edge_time={HOMO_EDGE: edge_time} if edge_time is not None else {}).check()
