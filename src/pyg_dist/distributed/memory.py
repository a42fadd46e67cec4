"""PyG's writable stores: ``LocalGraphStore()`` / ``LocalFeatureStore()`` filled in memory.

Such a store keeps what was put exactly as given (PyG's reads return it: ``get_edge_index``, ``get_edge_id``,
``get_global_id``, ``get_tensor`` without an index) plus PyG's settings (``num_partitions``,
``partition_idx``, ``meta``, the partition books). What pyg_dist's sampler and lookups read is the
partition built from them by :func:`pyg_dist.store.memory.build_partition`, the same
:class:`~pyg_dist.format.data.PartitionData` a folder loads into, attached to the store as a folder store's
would be (:class:`InMemory`): from both stores together when they come as a pair (:func:`pair_stores`,
called by the sampler and the loaders), from one store alone when it is used alone, and dropped on every
put or setting change.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.store.memory import MemoryEdges, MemoryRows, MemorySpec, build_partition


@dataclass
class Settings:
    """PyG's assignable attributes of a store (``None``: not set)."""
    num_partitions: Optional[int] = None
    partition_idx: Optional[int] = None
    meta: Optional[dict] = None
    node_pb: Any = None
    edge_pb: Any = None
    is_sorted: Optional[bool] = None


@dataclass
class GraphPuts:
    """What a graph store was given, keyed as PyG keys it: ``(edge_type, layout)``."""
    settings: Settings = field(default_factory=Settings)
    edge_index: Dict[Tuple[Any, str], Tuple[Any, Any]] = field(default_factory=dict)  # key -> (EdgeAttr, value)
    edge_id: Dict[Tuple[Any, str], Tensor] = field(default_factory=dict)


@dataclass
class FeaturePuts:
    """What a feature store was given: global ids per group, tensors per ``(group, attr_name)``."""
    settings: Settings = field(default_factory=Settings)
    global_id: Dict[Any, Tensor] = field(default_factory=dict)
    tensors: Dict[Tuple[Any, str], Tensor] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ input checks
def check_group(where: str, group, arg: str = "group_name"):
    """PyG's group name, normalised: ``None`` (homogeneous nodes), ``(None, None)`` (homogeneous edges), a
    node type or an edge type (tuple)."""
    if group is None or isinstance(group, str):
        return group
    if isinstance(group, (tuple, list)) and (tuple(group) == (None, None) or
                                             (len(group) == 3 and all(isinstance(s, str) for s in group))):
        return tuple(group)
    raise InvalidArgumentError(where, arg, group, "None, a node type, (None, None) or an edge type (src, rel, dst)")


def check_edge_type(where: str, edge_type):
    """PyG's edge type of a graph store, normalised: ``None`` (homogeneous) or a ``(src, rel, dst)`` tuple."""
    if edge_type is None or (isinstance(edge_type, (tuple, list)) and tuple(edge_type) == (None, None)):
        return None
    if isinstance(edge_type, (tuple, list)) and len(edge_type) == 3 and all(isinstance(s, str) for s in edge_type):
        return tuple(edge_type)
    raise InvalidArgumentError(where, "edge_type", edge_type, "None (homogeneous) or an edge type (src, rel, dst)")


def check_index(where: str, arg: str, value, *, unique: bool = False) -> Tensor:
    """A 1-D integer tensor of non-negative ids (distinct with ``unique``), as int64 on the CPU."""
    if not isinstance(value, Tensor) or value.dim() != 1 or value.is_floating_point() or value.is_complex() \
            or value.dtype == torch.bool:
        raise InvalidArgumentError(where, arg, getattr(value, "shape", value), "a 1-D integer tensor of global ids")
    value = value.to(device="cpu", dtype=torch.int64)
    if value.numel() and int(value.min()) < 0:
        raise InvalidArgumentError(where, arg, f"min {int(value.min())}", "non-negative global ids")
    if unique and torch.unique(value).numel() != value.numel():
        raise InvalidArgumentError(where, arg, "repeated ids", "distinct global ids (one row each)")
    return value


def check_book(where: str, arg: str, value) -> Any:
    """PyG's partition book: ``None``, a 1-D integer tensor, or a dict of them per type."""
    items = value.items() if isinstance(value, dict) else [(None, value)]
    for key, book in items:
        if not isinstance(book, Tensor) or book.dim() != 1 or book.is_floating_point() or book.dtype == torch.bool:
            raise InvalidArgumentError(where, arg, getattr(book, "shape", book), "None, a 1-D integer tensor (the "
                                       "partition of every id) or a dict of them per type" +
                                       (f" (entry {key!r})" if key is not None else ""))
    return dict(value) if isinstance(value, dict) else value


def check_setting(where: str, name: str, value) -> Any:
    """A value for one of PyG's store attributes (``None`` unsets it)."""
    if value is None:
        return None
    if name in ("node_pb", "edge_pb"):
        return check_book(where, name, value)
    if name == "meta":
        if not isinstance(value, dict):
            raise InvalidArgumentError(where, "meta", type(value).__name__, "a dict (PyG's META: is_hetero, num_parts)")
        return value
    if name == "is_sorted":
        if not isinstance(value, bool):
            raise InvalidArgumentError(where, "is_sorted", value, "a bool")
        return value
    low = 1 if name == "num_partitions" else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(where, name, value, f"an int >= {low}")
    return value


def edge_coo(layout: str, value) -> Tuple[Tensor, Tensor]:
    """``(row, col)`` of edges put in ``layout`` (checked by :func:`check_edges`)."""
    if layout == "coo":
        return (value[0], value[1])
    a, b = value
    if layout == "csc":  # (row, colptr)
        return a, torch.repeat_interleave(torch.arange(b.numel() - 1), torch.diff(b))
    return torch.repeat_interleave(torch.arange(a.numel() - 1), torch.diff(a)), b  # csr: (rowptr, col)


def check_edges(where: str, layout: str, value) -> Tuple[Any, int]:
    """``value`` as put (a ``[2, E]`` tensor or a pair of tensors for COO; ``(row, colptr)`` for CSC;
    ``(rowptr, col)`` for CSR) and its number of edges, or an error naming ``edge_index``."""
    pair = isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, Tensor) for v in value)
    ok_coo = (isinstance(value, Tensor) and value.dim() == 2 and value.size(0) == 2) or \
        (pair and value[0].dim() == 1 and value[0].shape == value[1].shape)
    if layout == "coo" and ok_coo and not value[0].is_floating_point():
        return value, int(value[0].numel())
    if layout in ("csc", "csr") and pair and all(v.dim() == 1 and not v.is_floating_point() for v in value):
        ptr, idx = (value[1], value[0]) if layout == "csc" else value
        if ptr.numel() >= 1 and int(ptr[0]) == 0 and int(ptr[-1]) == idx.numel() and \
                not bool((torch.diff(ptr) < 0).any()):
            return value, int(idx.numel())
    shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
    raise InvalidArgumentError(where, "edge_index", shape, {"coo": "a [2, num_edges] integer tensor or a (row, col) "
                               "pair", "csc": "a (row, colptr) pair", "csr": "a (rowptr, col) pair"}[layout])


# ------------------------------------------------------------------------------------------ the spec
def _same(a, b) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _agree(where: str, arg: str, values: List[Any], default):
    """The value the stores agree on (those that set it), or ``default``."""
    given = [v for v in values if v is not None]
    for v in given[1:]:
        if not _same(v, given[0]):
            shown = [getattr(x, "shape", x) for x in (given[0], v)]
            raise InvalidArgumentError(where, arg, shown, "the same value in both stores (or set in one of them)")
    return given[0] if given else default


def _is_hetero(where: str, fs: Optional[FeaturePuts], gs: Optional[GraphPuts], metas: List[dict]) -> bool:
    said = _agree(where, "meta", [m.get("is_hetero") for m in metas], None)
    groups = list(fs.global_id) + [g for g, _ in fs.tensors] if fs is not None else []
    named = any(g is not None and g != (None, None) for g in groups)
    named |= gs is not None and any(k[0] is not None for k in gs.edge_index)
    named |= any(isinstance(p, dict) for s in _settings(fs, gs) for p in (s.node_pb, s.edge_pb))
    return bool(said) if said is not None else named


def _settings(fs, gs) -> List[Settings]:
    return [p.settings for p in (fs, gs) if p is not None]


def _typed(where: str, arg: str, key, is_hetero: bool, node: bool):
    """PyG's public key as pyg_dist's typed one (homogeneous: ``"_N"`` / ``("_N", "_E", "_N")``)."""
    if key is None or key == (None, None):
        if is_hetero:
            raise InvalidArgumentError(where, arg, key, "a node or edge type (meta['is_hetero'] is True)")
        return HOMO_NODE if node and key is None else HOMO_EDGE
    if not is_hetero:
        raise InvalidArgumentError(where, arg, key, "None or (None, None) in a homogeneous graph (set "
                                   "meta['is_hetero'] = True for named types)")
    return key


def _typed_book(where: str, arg: str, book, is_hetero: bool, node: bool) -> Dict[Any, Tensor]:
    if book is None:
        return {}
    if isinstance(book, dict) != is_hetero:
        raise InvalidArgumentError(where, arg, type(book).__name__, "a dict per type (heterogeneous graph)" if is_hetero
                                   else "one tensor (homogeneous graph)")
    if is_hetero:
        return {(tuple(k) if isinstance(k, list) else k): v for k, v in book.items()}
    return {HOMO_NODE if node else HOMO_EDGE: book}


def _edges(where: str, gs: GraphPuts, is_hetero: bool) -> Dict[Any, MemoryEdges]:
    """One COO per edge type (its COO put if any, else CSC, else CSR) with the ids put for that layout."""
    rank = {"coo": 0, "csc": 1, "csr": 2}
    chosen: Dict[Any, Tuple[Any, str]] = {}
    for key in sorted(gs.edge_index, key=lambda k: rank[k[1]]):
        chosen.setdefault(key[0], key)
    out = {}
    for et, key in chosen.items():
        attr, value = gs.edge_index[key]
        row, col = edge_coo(key[1], value)
        eid = gs.edge_id.get(key)
        if eid is not None and eid.numel() != row.numel():
            raise InvalidArgumentError(where, "edge_id", eid.numel(), f"one id per edge of {et!r} ({row.numel()})")
        size = (int(attr.size[0]), int(attr.size[1])) if attr.size is not None else None
        out[_typed(where, "edge_type", et, is_hetero, False)] = MemoryEdges(row.long(), col.long(), eid, size)
    return out


def make_spec(where: str, fs: Optional[FeaturePuts], gs: Optional[GraphPuts]) -> MemorySpec:
    """The :class:`~pyg_dist.store.memory.MemorySpec` of one store or a pair (settings must agree)."""
    sets = _settings(fs, gs)
    metas = [s.meta for s in sets if s.meta is not None]
    is_hetero = _is_hetero(where, fs, gs, metas)
    num_parts = _agree(where, "num_partitions", [s.num_partitions for s in sets] +
                       [m.get("num_parts") for m in metas], 1)
    part = _agree(where, "partition_idx", [s.partition_idx for s in sets], 0)
    node_book = _agree(where, "node_pb", [s.node_pb for s in sets], None)
    edge_book = _agree(where, "edge_pb", [s.edge_pb for s in sets], None)
    rows: Dict[Any, MemoryRows] = {}
    for group, ids in (fs.global_id.items() if fs is not None else ()):
        key = _typed(where, "group_name", group, is_hetero, True)
        rows.setdefault(key, MemoryRows()).global_id = ids
    for (group, name), value in (fs.tensors.items() if fs is not None else ()):
        rows.setdefault(_typed(where, "group_name", group, is_hetero, True), MemoryRows()).cols[name] = value
    return MemorySpec(num_parts=num_parts, part=part, is_hetero=is_hetero,
                      node_book=_typed_book(where, "node_pb", node_book, is_hetero, True),
                      edge_book=_typed_book(where, "edge_pb", edge_book, is_hetero, False),
                      edges=_edges(where, gs, is_hetero) if gs is not None else {}, rows=rows, where=where)


# ------------------------------------------------------------------------------------------ the view
def _meta_seen(*stores) -> Tuple:
    return tuple(copy.deepcopy(s._memory.settings.meta) for s in stores)


def pair_stores(where: str, fs, gs) -> None:
    """Builds the partition of a ``(feature store, graph store)`` pair filled in memory and attaches it to
    both (nothing to do for folder stores, or when neither changed since the last time)."""
    if (fs._memory is None) != (gs._memory is None):
        raise InvalidArgumentError(where, "data", ("in memory" if fs._memory is not None else "from a folder",
                                                   "in memory" if gs._memory is not None else "from a folder"),
                                   "two stores of one partition folder, or two stores filled in memory")
    if fs._memory is None:
        return
    pd, seen = fs.__dict__.get("_pd"), fs.__dict__.get("_seen")
    if pd is not None and pd is gs.__dict__.get("_pd") and seen is not None and _same(seen, _meta_seen(fs, gs)):
        return  # both hold the partition built from their current puts (metas may change in place: compared)
    pd = build_partition(make_spec(where, fs._memory, gs._memory))
    for store in (fs, gs):
        store._attach_view(pd)
        store.__dict__["_seen"] = _meta_seen(fs, gs)


class InMemory:
    """The part of a migration-layer store that is the same for both kinds: a store opened from a folder
    (``_memory`` is None) or filled in memory (``_memory`` holds the puts). For the latter, the attributes
    the native store's constructor sets (``_VIEW``) are built on first use, from the store alone, unless
    :func:`pair_stores` attached its pair's partition first."""

    _VIEW: Tuple[str, ...] = ()
    _memory: Optional[Union[GraphPuts, FeaturePuts]] = None

    def __getattr__(self, name: str):
        if self.__dict__.get("_memory") is None or name not in type(self)._VIEW:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._attach_view(build_partition(self._spec_alone()))
        return self.__dict__[name]

    def _spec_alone(self) -> MemorySpec:
        raise NotImplementedError

    def _load(self, pd) -> None:
        """Runs the native store's constructor on ``pd`` (each store class implements it)."""
        raise NotImplementedError

    def _attach_view(self, pd) -> None:
        self._load(pd)
        self.__dict__["_pd"] = pd

    def _changed(self) -> None:
        """Drops the built partition (the next read rebuilds it from the puts)."""
        for name in type(self)._VIEW + ("_pd", "_seen"):
            self.__dict__.pop(name, None)

    def _puts(self, where: str, arg: str):
        """The puts of a store filled in memory, or an error: a folder store cannot be written."""
        if self._memory is None:
            raise InvalidArgumentError(where, arg, "<a write>", f"a {type(self).__name__}() built in memory: one "
                                       "opened from a partition folder is read-only (its data is the folder's)")
        return self._memory

    def _set(self, name: str, value) -> None:
        where = f"{type(self).__name__}.{name}"
        settings = self._puts(where, name).settings
        setattr(settings, "node_pb" if name == "node_feat_pb" else "edge_pb" if name == "edge_feat_pb" else name,
                check_setting(where, name.replace("_feat", ""), value))
        self._changed()

    def __reduce__(self):  # in memory: pickled with its puts and the partition built from them
        if self._memory is None:
            return super().__reduce__()
        return _rebuild, (type(self), self._memory, self.__dict__.get("_pd"), self.__dict__.get("labels"))


def _rebuild(cls, memory, pd, labels):
    store = cls()
    store._memory = memory
    if pd is not None:
        store._attach_view(pd)
    if labels is not None:
        store.labels = labels
    return store


__all__ = ["Settings", "GraphPuts", "FeaturePuts", "InMemory", "pair_stores", "make_spec", "check_group",
           "check_edge_type", "check_index", "check_setting", "check_edges", "edge_coo"]
