"""META.json <-> :class:`PartitionMeta`, and the only place that knows the folder's file names.

The top level of META.json carries PyG's keys (``num_parts``, ``node_types``, ``edge_types``,
``node_offset``, ``is_hetero``, ``is_sorted``) so PyG's own readers keep working; everything pyg_dist
adds lives under ``"pyg_dist"``. A folder without that section was written by PyG's ``Partitioner``
(``is_native=False``); :mod:`pyg_dist.format.reader` reads it with a dense partition book. The section also
lists every file's size and content digest (``"files"``) and the folder id derived from them (``"fingerprint"``):
:mod:`pyg_dist.format.digests`.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import torch
from torch import Tensor

from pyg_dist._fsio import write_text
from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, edge_type_str, str_edge_type
from pyg_dist.errors import PartitionFormatError

FORMAT_VERSION = 1
META_FILE = "META.json"
_PYG_KEYS = ("num_parts", "node_types", "edge_types", "is_hetero")


# ----------------------------------------------------------------------------------------- file names
def meta_path(root) -> Path:
    """``root/META.json``."""
    return Path(root) / META_FILE


def part_dir(root, part: int) -> Path:
    """``root/part_<part>/``: the folder of one partition."""
    return Path(root) / f"part_{part}"


def graph_path(root, part: int) -> Path:
    """``part_<part>/graph.pt``: in-edges (CSC by destination) of the nodes ``part`` owns."""
    return part_dir(root, part) / "graph.pt"


def node_feats_path(root, part: int) -> Path:
    """``part_<part>/node_feats.pt``: global ids, features and time of the owned nodes."""
    return part_dir(root, part) / "node_feats.pt"


def edge_feats_path(root, part: int) -> Path:
    """``part_<part>/edge_feats.pt``: global ids, features and time of the owned edges."""
    return part_dir(root, part) / "edge_feats.pt"


def part_stamp_path(root, part: int) -> Path:
    """``part_<part>/pyg_dist.json``: the folder's fingerprint and this partition's item counts."""
    return part_dir(root, part) / "pyg_dist.json"


def feature_cache_path(root, part: int) -> Path:
    """``part_<part>/feature_cache.pt``: copies of remote feature rows (``pyg-dist-partition --cache-ratio``)."""
    return part_dir(root, part) / "feature_cache.pt"


def topology_cache_path(root, part: int) -> Path:
    """``part_<i>/topology_cache.pt``: in-edges of the cached remote nodes (``--cache-topology``)."""
    return part_dir(root, part) / "topology_cache.pt"


def node_map_path(root, ntype: NodeType, is_hetero: bool) -> Path:
    """Node id -> partition map of ``ntype``: ``node_map/<ntype>.pt`` (hetero) or ``node_map.pt``."""
    return Path(root) / "node_map" / f"{ntype}.pt" if is_hetero else Path(root) / "node_map.pt"


def edge_map_path(root, etype: EdgeType, is_hetero: bool) -> Path:
    """Edge id -> partition map of ``etype``: ``edge_map/<src>__<rel>__<dst>.pt`` (hetero) or ``edge_map.pt``."""
    return (Path(root) / "edge_map" / f"{edge_type_str(etype)}.pt" if is_hetero
            else Path(root) / "edge_map.pt")


def original_node_ids_path(root, ntype: NodeType) -> Path:
    """The input graph's ids of ``ntype``'s nodes, indexed by partitioned id (to map back)."""
    return Path(root) / "pyg_dist" / "original_ids" / "node" / f"{ntype}.pt"


def original_edge_ids_path(root, etype: EdgeType) -> Path:
    """The input graph's ids of ``etype``'s edges, indexed by partitioned id (to map back)."""
    return Path(root) / "pyg_dist" / "original_ids" / "edge" / f"{edge_type_str(etype)}.pt"


def full_node_time_path(root, ntype: NodeType) -> Path:
    """The time of every node of ``ntype`` (all partitions), indexed by partitioned id."""
    return Path(root) / "pyg_dist" / "node_time" / f"{ntype}.pt"


def regular_size(path, missing: str = "file is missing") -> int:
    """Byte size of ``path`` after one ``os.stat`` (symlinks followed), before anything opens it: a FIFO, a
    device or a socket would block a read or never end, so it is a :class:`PartitionFormatError` naming it, as
    is a missing file (``missing``: the problem then)."""
    try:
        st = os.stat(path)
    except OSError:
        raise PartitionFormatError(path, missing) from None
    if not stat.S_ISREG(st.st_mode):
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}.get(stat.S_IFMT(st.st_mode), "not a file")
        raise PartitionFormatError(path, f"is {kind}, not a regular file: a partition folder holds only regular "
                                   "files (nothing was opened)")
    return st.st_size


# ------------------------------------------------------------------------------------------- the meta
@dataclass(frozen=True)
class PartitionMeta:
    """What a reader needs to know about a partition folder (validated by :func:`read_meta`).

    Attributes:
        root: The folder.
        num_parts: Number of partitions (machines).
        node_types / edge_types: Typed, in order; a homogeneous graph has ``["_N"]`` /
            ``[("_N", "_E", "_N")]``.
        is_hetero: Whether the partitioned graph was a ``HeteroData``.
        method: ``"metis"``, ``"random"``, ``"supernode"``, ``"hybrid"``, or ``"pyg"`` for a folder
            written by PyG's own ``Partitioner``.
        base_method: For ``hybrid``, the method that decided node ownership; else equal to ``method``.
        hybrid: Every partition stores the whole topology (features are still partitioned).
        sub_parts: Trainers per partition in a two-level split (1 = single level).
        num_nodes / num_edges: Per type.
        node_bounds / edge_bounds: Per type, ``[num_parts + 1]`` int64 range table (partition ``p``
            owns ids ``[bounds[p], bounds[p + 1])``); empty for PyG-written folders.
        sub_node_bounds: Per node type, ``[num_parts * sub_parts + 1]`` bounds of the trainer ranges
            (sub-part ``s`` of part ``p`` is index ``p * sub_parts + s``).
        node_time_types / edge_time_types / weight_types: Types that carry node time, edge time and an
            ``edge_weight``.
        is_native: Written by pyg_dist (contiguous ranges) rather than PyG.
        extra: The raw ``"pyg_dist"`` section (stats, constraints, feature keys, ...).
    """
    root: Path
    num_parts: int
    node_types: List[NodeType]
    edge_types: List[EdgeType]
    is_hetero: bool
    method: str
    base_method: str
    hybrid: bool
    sub_parts: int
    num_nodes: Dict[NodeType, int]
    num_edges: Dict[EdgeType, int]
    node_bounds: Dict[NodeType, Tensor] = field(default_factory=dict)
    edge_bounds: Dict[EdgeType, Tensor] = field(default_factory=dict)
    sub_node_bounds: Dict[NodeType, Tensor] = field(default_factory=dict)
    node_time_types: List[NodeType] = field(default_factory=list)
    edge_time_types: List[EdgeType] = field(default_factory=list)
    weight_types: List[EdgeType] = field(default_factory=list)
    is_native: bool = True
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def stats(self) -> Dict[str, Any]:
        return self.extra.get("stats", {})


def build_meta_json(meta: PartitionMeta) -> Dict[str, Any]:
    """The META.json dict for a pyg_dist-written folder (PyG keys + the ``pyg_dist`` section)."""
    offsets, acc = [], 0
    for t in meta.node_types:
        offsets.append(acc)
        acc += meta.num_nodes[t]
    section = dict(meta.extra)
    section.update({
        "format_version": FORMAT_VERSION, "method": meta.method, "base_method": meta.base_method,
        "hybrid": meta.hybrid, "sub_parts": meta.sub_parts,
        "node_types": list(meta.node_types), "edge_types": [list(e) for e in meta.edge_types],
        "num_nodes": dict(meta.num_nodes),
        "num_edges": {edge_type_str(e): n for e, n in meta.num_edges.items()},
        "node_bounds": {t: b.tolist() for t, b in meta.node_bounds.items()},
        "edge_bounds": {edge_type_str(e): b.tolist() for e, b in meta.edge_bounds.items()},
        "sub_node_bounds": {t: b.tolist() for t, b in meta.sub_node_bounds.items()},
        "node_time": list(meta.node_time_types),
        "edge_time": [edge_type_str(e) for e in meta.edge_time_types],
        "edge_weight": [edge_type_str(e) for e in meta.weight_types],
    })
    return {
        "num_parts": meta.num_parts,
        "node_types": list(meta.node_types) if meta.is_hetero else None,
        "edge_types": [list(e) for e in meta.edge_types] if meta.is_hetero else None,
        "node_offset": offsets if meta.is_hetero else None,
        "is_hetero": meta.is_hetero,
        "is_sorted": True,
        "pyg_dist": section,
    }


def write_meta(root, meta: PartitionMeta) -> None:
    """Writes ``meta`` to ``root/META.json`` (PyG's keys plus the ``pyg_dist`` section), then ``fsync``."""
    write_text(meta_path(root), json.dumps(build_meta_json(meta), indent=1))


def read_meta(root) -> PartitionMeta:
    """Reads and validates ``root/META.json``.

    Args:
        root: A partition folder written by pyg_dist or by PyG's ``Partitioner``.

    Raises:
        PartitionFormatError: naming the file, when it is missing, not JSON, or lacks keys.

    Example:
        >>> meta = read_meta("/tmp/cora-2")  # doctest: +SKIP
        >>> meta.num_parts, meta.node_bounds["_N"]  # doctest: +SKIP
        (2, tensor([   0, 1354, 2708]))
    """
    path = meta_path(root)
    regular_size(path, "file is missing (not a partition folder, or still being written)")
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise PartitionFormatError(path, f"cannot parse JSON: {e}") from None
    if not isinstance(raw, dict) or any(k not in raw for k in _PYG_KEYS):
        raise PartitionFormatError(path, f"missing one of the keys {list(_PYG_KEYS)}")
    try:
        if "pyg_dist" in raw:
            return _native_meta(Path(root), raw)
        return _pyg_meta(Path(root), raw)
    except (KeyError, TypeError, ValueError) as e:
        raise PartitionFormatError(path, f"malformed content: {type(e).__name__}: {e}") from None


def _native_meta(root: Path, raw: Dict[str, Any]) -> PartitionMeta:
    s = raw["pyg_dist"]
    if s.get("format_version") != FORMAT_VERSION:
        raise PartitionFormatError(meta_path(root), f"format_version {s.get('format_version')!r} is not "
                                   f"supported (this pyg_dist reads {FORMAT_VERSION})")
    etypes = [tuple(e) for e in s["edge_types"]]
    path = meta_path(root)
    num_parts = _count(path, "num_parts", raw["num_parts"], low=1)
    meta = PartitionMeta(
        root=root, num_parts=num_parts, node_types=list(s["node_types"]), edge_types=etypes,
        is_hetero=bool(raw["is_hetero"]), method=s["method"], base_method=s["base_method"],
        hybrid=bool(s["hybrid"]), sub_parts=_count(path, "sub_parts", s["sub_parts"], low=1),
        num_nodes={t: _count(path, f"num_nodes[{t!r}]", n) for t, n in s["num_nodes"].items()},
        num_edges={str_edge_type(e): _count(path, f"num_edges[{e!r}]", n) for e, n in s["num_edges"].items()},
        node_bounds={t: _bounds(path, f"node_bounds[{t!r}]", b) for t, b in s["node_bounds"].items()},
        edge_bounds={str_edge_type(e): _bounds(path, f"edge_bounds[{e!r}]", b) for e, b in s["edge_bounds"].items()},
        sub_node_bounds={t: _bounds(path, f"sub_node_bounds[{t!r}]", b) for t, b in s["sub_node_bounds"].items()},
        node_time_types=list(s["node_time"]), edge_time_types=[str_edge_type(e) for e in s["edge_time"]],
        weight_types=[str_edge_type(e) for e in s["edge_weight"]], is_native=True, extra=s)
    for t in meta.node_types:
        b = meta.node_bounds[t]
        if b.numel() != num_parts + 1 or int(b[-1]) != meta.num_nodes[t] or bool((b[1:] < b[:-1]).any()):
            raise PartitionFormatError(meta_path(root), f"node_bounds of {t!r} are inconsistent: {b.tolist()}")
    for e in etypes:
        if meta.edge_bounds[e].numel() != num_parts + 1:
            raise PartitionFormatError(meta_path(root), f"edge_bounds of {e!r} have the wrong length")
    return meta


#: The largest id or count META.json may hold (ids and pointers stay far from int64's end: sums of two never wrap).
MAX_COUNT = 1 << 60


def _count(path: Path, what: str, value: Any, low: int = 0) -> int:
    """``value`` as an id or count: a JSON integer (not a bool, a float or a string) in ``[low, 2**60]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise PartitionFormatError(path, f"{what} is {value!r}; expected an integer in [{low}, 2**60]")
    return value


def _bounds(path: Path, what: str, values: Any) -> Tensor:
    """A bounds table: a JSON list of such integers, never decreasing (a raw int64 overflow before)."""
    if not isinstance(values, list) or not values:
        raise PartitionFormatError(path, f"{what} is {str(values)[:80]}; expected a non-empty list of integers")
    out = [_count(path, f"{what}[{i}]", v) for i, v in enumerate(values)]
    if any(b < a for a, b in zip(out, out[1:])):
        raise PartitionFormatError(path, f"{what} decreases: {out[:12]}")
    return torch.tensor(out, dtype=torch.long)


def _pyg_meta(root: Path, raw: Dict[str, Any]) -> PartitionMeta:
    """A folder written by PyG's Partitioner: sizes come from the node/edge map files."""
    is_hetero = bool(raw["is_hetero"])
    ntypes = list(raw["node_types"]) if is_hetero else [HOMO_NODE]
    etypes = [tuple(e) for e in raw["edge_types"]] if is_hetero else [HOMO_EDGE]
    num_nodes = {t: _map_len(node_map_path(root, t, is_hetero)) for t in ntypes}
    num_edges = {e: _map_len(edge_map_path(root, e, is_hetero)) for e in etypes}
    node_time, edge_time = _pyg_time_types(root, is_hetero, ntypes, etypes)
    return PartitionMeta(root=root, num_parts=int(raw["num_parts"]), node_types=ntypes, edge_types=etypes,
                         is_hetero=is_hetero, method="pyg", base_method="metis", hybrid=False, sub_parts=1,
                         num_nodes=num_nodes, num_edges=num_edges, node_time_types=node_time,
                         edge_time_types=edge_time, is_native=False,
                         extra={"is_sorted": bool(raw.get("is_sorted", False)),
                                "node_offset": raw.get("node_offset")})


def _pyg_time_types(root: Path, is_hetero: bool, ntypes, etypes):
    """Node / edge types with time in a PyG folder (its META does not say; partition 0's files do)."""
    def entries(path: Path, types) -> Dict[Any, Any]:
        raw = load_tensor(path, mmap=True) if path.is_file() else {}
        raw = raw if isinstance(raw, dict) else {}
        if not is_hetero:
            return {types[0]: raw}
        return {t: raw.get(t) or raw.get("__".join(t) if isinstance(t, tuple) else t) or {} for t in types}

    nodes, edges = entries(node_feats_path(root, 0), ntypes), entries(edge_feats_path(root, 0), etypes)
    return ([t for t in ntypes if isinstance(nodes[t], dict) and nodes[t].get("time") is not None],
            [e for e in etypes if isinstance(edges[e], dict) and edges[e].get("edge_time") is not None])


def _map_len(path: Path) -> int:
    return int(load_tensor(path, mmap=True).numel())


def load_tensor(path: Path, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` with a :class:`PartitionFormatError` naming the file."""
    regular_size(path)
    try:
        return torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    except Exception as e:  # torch raises many types for corrupt files
        raise PartitionFormatError(path, f"cannot load: {type(e).__name__}: {e}") from None
