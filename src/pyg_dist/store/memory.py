"""A partition held in memory, as the same :class:`~pyg_dist.format.data.PartitionData` a folder loads into.

Stores filled in memory (PyG's ``LocalGraphStore()`` / ``LocalFeatureStore()`` with ``put_*``, ``from_data``)
and stores opened from a folder then read, sample and serve through one code path: :func:`build_partition`
turns what was put (typed keys, GLOBAL ids) and the owner of every id (PyG's ``node_pb`` / ``edge_pb``: any
assignment, hence a :class:`~pyg_dist.format.book.DensePartitionBook`) into the partition's data. Every input
is checked here, once, with errors naming the argument it came from.

What it produces is the layout of folders written by PyG: per edge type a CSC over every destination id that
holds the in-edges of the destinations this partition owns (the book routes the others away); the rows of the
owned nodes and edges in ascending id order; the time of every node where it is known.

Example:
    >>> import torch
    >>> spec = MemorySpec(num_parts=2, part=0, is_hetero=False,
    ...                   node_book={"_N": torch.tensor([0, 0, 1])},
    ...                   edges={("_N", "_E", "_N"): MemoryEdges(torch.tensor([2, 0]), torch.tensor([0, 1]),
    ...                                                           torch.tensor([5, 6]))})
    >>> pd = build_partition(spec)
    >>> g = pd.graph[("_N", "_E", "_N")]
    >>> g.colptr.tolist(), g.row.tolist(), g.edge_id.tolist(), pd.book.owned_ids("_N", 0).tolist()
    ([0, 1, 2, 2], [2, 0], [5, 6], [0, 1])
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format.book import AnyType, DensePartitionBook
from pyg_dist.format.data import EdgeFeats, GraphPart, NodeFeats, PartitionData
from pyg_dist.format.meta import PartitionMeta

#: Attribute names with a meaning for sampling (PyG's): node time, edge time, edge weight.
TIME, EDGE_TIME, WEIGHT = "time", "edge_time", "edge_weight"
METHOD = "memory"


@dataclass
class MemoryEdges:
    """One edge type as put: ``row -> col`` global node ids, ``edge_id`` global edge ids (``None``: ids made
    unique across partitions, ``position * num_parts + part``), ``size`` the ``(num_src, num_dst)`` given."""
    row: Tensor
    col: Tensor
    edge_id: Optional[Tensor] = None
    size: Optional[Tuple[int, int]] = None


@dataclass
class MemoryRows:
    """A node or edge group's rows as put: row ``i`` of every attribute belongs to ``global_id[i]``."""
    global_id: Optional[Tensor] = None
    cols: Dict[str, Tensor] = field(default_factory=dict)


@dataclass
class MemorySpec:
    """Everything one partition's stores were given (typed keys).

    Attributes:
        num_parts / part: The number of partitions and this one.
        is_hetero: Whether the graph is heterogeneous (PyG's ``meta["is_hetero"]``).
        node_book / edge_book: Owner of every node / edge id per type (edge types may be missing: their
            edges then have no owner to look edge attributes up from).
        edges: Per edge type, the edges this partition was given.
        rows: Per node type and edge type, the rows this partition was given.
        where: Who is asking (for error messages).
    """
    num_parts: int
    part: int
    is_hetero: bool
    node_book: Dict[NodeType, Tensor] = field(default_factory=dict)
    edge_book: Dict[EdgeType, Tensor] = field(default_factory=dict)
    edges: Dict[EdgeType, MemoryEdges] = field(default_factory=dict)
    rows: Dict[Union[NodeType, EdgeType], MemoryRows] = field(default_factory=dict)
    where: str = "LocalGraphStore"


def _err(spec: MemorySpec, arg: str, value, expected: str) -> InvalidArgumentError:
    return InvalidArgumentError(spec.where, arg, value, expected)


def check_owner_map(where: str, arg: str, key, owner, num_parts: int) -> Tensor:
    """``owner`` (the partition of every id of ``key``) as int64, or an error naming ``arg``."""
    if not isinstance(owner, Tensor) or owner.dim() != 1 or owner.is_floating_point() or owner.is_complex() \
            or owner.dtype == torch.bool:
        raise InvalidArgumentError(where, arg, getattr(owner, "shape", owner),
                                   f"for {key!r}: a 1-D integer tensor holding the partition of every id")
    owner = owner.to(device="cpu", dtype=torch.int64)
    if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise InvalidArgumentError(where, arg, f"partitions in [{int(owner.min())}, {int(owner.max())}] for {key!r}",
                                   f"partitions in [0, {num_parts}) (num_partitions={num_parts})")
    return owner


def _check_ids(spec: MemorySpec, arg: str, ids: Tensor, end: int, what: str) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= end):
        raise _err(spec, arg, f"ids in [{int(ids.min())}, {int(ids.max())}] for {what}", f"ids in [0, {end})")


def _node_types(spec: MemorySpec) -> List[NodeType]:
    """Node types in a stable order: the book's, then those only edges or rows name."""
    out = list(spec.node_book)
    for et in spec.edges:
        out += [et[0], et[2]]
    out += [g for g in spec.rows if isinstance(g, str)]
    return list(dict.fromkeys(out))


def _edge_types(spec: MemorySpec) -> List[EdgeType]:
    found = list(spec.edges) + [g for g in spec.rows if isinstance(g, tuple)] + list(spec.edge_book)
    return list(dict.fromkeys(found))


def _node_books(spec: MemorySpec) -> Dict[NodeType, Tensor]:
    """The owner map of every node type; one partition may leave it out (every id is then its own)."""
    out = {}
    for t in _node_types(spec):
        if t in spec.node_book:
            out[t] = check_owner_map(spec.where, "node_pb", t, spec.node_book[t], spec.num_parts)
            continue
        if spec.num_parts != 1:
            raise _err(spec, "node_pb", sorted(spec.node_book), f"the partition of every node of {t!r} "
                       f"(num_partitions={spec.num_parts}; set graph_store.node_pb)")
        sizes = [e.size[0 if et[0] == t else 1] for et, e in spec.edges.items() if e.size is not None and t in et]
        ids = [v.global_id for g, v in spec.rows.items() if g == t and v.global_id is not None]
        num = sizes[0] if sizes else (int(ids[0].max()) + 1 if ids and ids[0].numel() else 0)
        out[t] = torch.zeros(num, dtype=torch.int64)
    return out


def _positions(spec: MemorySpec, arg: str, have: Tensor, want: Tensor, what: str) -> Tensor:
    """The row of each id of ``want`` among the (distinct) ids ``have``, or an error naming the missing ones."""
    if not want.numel():
        return torch.zeros(0, dtype=torch.int64)
    size = int(max(int(have.max()) if have.numel() else -1, int(want.max()))) + 1
    lut = torch.full((size,), -1, dtype=torch.int64)
    lut[have] = torch.arange(have.numel())
    pos = lut[want]
    if bool((pos < 0).any()):
        raise _err(spec, arg, f"no row for ids {want[pos < 0][:5].tolist()}", what)
    return pos


def _take(value: Tensor, pos: Tensor) -> Tensor:
    """``value[pos]``, without a copy when ``pos`` selects every row in order."""
    if pos.numel() == value.size(0) and bool((pos == torch.arange(pos.numel())).all()):
        return value
    return value.index_select(0, pos)


def _aligned(spec: MemorySpec, group, rows: MemoryRows, names) -> None:
    for name in names:
        n = rows.global_id.numel() if rows.global_id is not None else None
        value = rows.cols[name]
        if value.dim() == 0 or (n is not None and value.size(0) != n):
            raise _err(spec, f"put_tensor(group_name={group!r}, attr_name={name!r})", tuple(value.shape),
                       f"one row per global id put for {group!r} ({n} rows)")


def _owned_rows(spec: MemorySpec, group, owned: Tensor, rows: Optional[MemoryRows], skip=()) -> Dict[str, Tensor]:
    """The attributes of the ids this partition owns, in ``owned`` order."""
    names = [k for k in (rows.cols if rows is not None else {}) if k not in skip]
    if rows is None or not names:
        return {}
    if rows.global_id is None:
        raise _err(spec, "global_id", None, f"the global ids of the rows put for {group!r} (put_global_id)")
    _aligned(spec, group, rows, names)
    pos = _positions(spec, "global_id", rows.global_id, owned,
                     f"a row for every id of {group!r} this partition owns (partition {spec.part})")
    return {k: _take(rows.cols[k], pos) for k in names}


def _node_feats(spec: MemorySpec, t: NodeType, owner: Tensor) -> Tuple[NodeFeats, Optional[Tensor]]:
    """Owned rows of node type ``t`` and, when known, the time of every node of it.

    ``time`` is indexed by global id when it has a row per node of the type and the ids put are not that
    many (PyG's convention, as in its folders); otherwise it is aligned with the ids put, and the time of
    every node is known when those are all the ids of the type."""
    owned = (owner == spec.part).nonzero().view(-1)
    rows, n = spec.rows.get(t), owner.numel()
    gid = rows.global_id if rows is not None else None
    if gid is not None:
        _check_ids(spec, "global_id", gid, n, repr(t))
    time = rows.cols.get(TIME) if rows is not None else None
    by_id = time is not None and time.dim() == 1 and time.numel() == n and (gid is None or gid.numel() != n)
    feats = _owned_rows(spec, t, owned, rows, skip=(TIME,) if by_id else ())
    owned_time = feats.pop(TIME, None)
    full: Optional[Tensor] = None
    if time is not None and by_id:
        full, owned_time = time, time.index_select(0, owned)
    elif time is not None and gid is not None and gid.numel() == n:
        full = torch.empty_like(time)
        full[gid] = time
    return NodeFeats(owned, feats, owned_time), full


def _edge_feats(spec: MemorySpec, et: EdgeType, owner: Optional[Tensor]) -> Optional[EdgeFeats]:
    rows = spec.rows.get(et)
    if rows is None or not rows.cols:
        return None
    if owner is None:
        raise _err(spec, "edge_pb", sorted(spec.edge_book), f"the partition of every edge of {et!r}: its edge "
                   f"attributes {sorted(rows.cols)} are looked up from their owner (set graph_store.edge_pb)")
    owned = (owner == spec.part).nonzero().view(-1)
    if rows.global_id is not None:
        _check_ids(spec, "global_id", rows.global_id, owner.numel(), repr(et))
    feats = _owned_rows(spec, et, owned, rows)
    return EdgeFeats(owned, feats, feats.pop(EDGE_TIME, None))


def _per_edge(spec: MemorySpec, et: EdgeType, name: str, edge_id: Tensor) -> Optional[Tensor]:
    """``edge_time`` / ``edge_weight`` of the edges ``edge_id`` from the rows put for ``et`` (None without)."""
    rows = spec.rows.get(et)
    if rows is None or name not in rows.cols:
        return None
    if rows.global_id is None:
        raise _err(spec, "global_id", None, f"the global ids of {et!r}'s rows, to align {name!r} with its edges")
    _aligned(spec, et, rows, [name])
    pos = _positions(spec, "global_id", rows.global_id, edge_id, f"a row of {name!r} for every edge of {et!r} "
                     "this partition holds")
    value = rows.cols[name].index_select(0, pos)
    if name == WEIGHT and (value.dim() != 1 or (value.numel() and float(value.min()) < 0)):
        raise _err(spec, f"put_tensor(group_name={et!r}, attr_name={name!r})", tuple(value.shape),
                   "one non-negative weight per edge")
    return value


def _graph_part(spec: MemorySpec, et: EdgeType, books: Dict[NodeType, Tensor],
                edge_books: Dict[EdgeType, Tensor]) -> GraphPart:
    """The CSC (over every destination id) of the in-edges of the destinations this partition owns."""
    ns, nd = books[et[0]].numel(), books[et[2]].numel()
    e = spec.edges.get(et)
    if e is None:
        empty = torch.zeros(0, dtype=torch.int64)
        return GraphPart(torch.zeros(nd + 1, dtype=torch.int64), empty, empty, 0, nd, ns, nd)
    if e.size is not None and tuple(e.size) != (ns, nd):
        raise _err(spec, "size", tuple(e.size), f"({ns}, {nd}) for {et!r}: the node counts node_pb gives")
    _check_ids(spec, "edge_index", e.row, ns, f"sources of {et!r}")
    _check_ids(spec, "edge_index", e.col, nd, f"destinations of {et!r}")
    eid = e.edge_id if e.edge_id is not None else torch.arange(e.row.numel()) * spec.num_parts + spec.part
    if e.edge_id is not None:
        end = edge_books[et].numel() if et in edge_books else 1 << 62
        _check_ids(spec, "edge_id", eid, end, repr(et))
    keep = (books[et[2]].index_select(0, e.col) == spec.part).nonzero().view(-1)
    col = e.col.index_select(0, keep)
    order = keep.index_select(0, torch.sort(col, stable=True).indices)
    row, col, eid = e.row.index_select(0, order), e.col.index_select(0, order), eid.index_select(0, order)
    colptr = torch.zeros(nd + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(col, minlength=nd), 0, out=colptr[1:])
    return GraphPart(colptr, row.contiguous(), eid.contiguous(), 0, nd, ns, nd,
                     weight=_per_edge(spec, et, WEIGHT, eid), edge_time=_per_edge(spec, et, EDGE_TIME, eid))


def fingerprint(spec: MemorySpec, books: Dict[AnyType, Tensor]) -> str:
    """One id of the partitioning (every rank computes the same from the same books): the number of parts,
    the types and every owner map. A rank with another one has its requests refused by its peers."""
    h = hashlib.sha1(repr((spec.num_parts, spec.is_hetero, sorted(map(str, books)))).encode())
    for key in sorted(books, key=str):
        h.update(str(key).encode())
        h.update(books[key].contiguous().numpy().tobytes())
    return f"{METHOD}-{h.hexdigest()[:16]}"


def _check_spec(spec: MemorySpec) -> None:
    for name, value, low in (("num_partitions", spec.num_parts, 1), ("partition_idx", spec.part, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise _err(spec, name, value, f"an int >= {low}")
    if spec.part >= spec.num_parts:
        raise _err(spec, "partition_idx", spec.part, f"an int in [0, {spec.num_parts}) (num_partitions)")


def build_partition(spec: MemorySpec) -> PartitionData:
    """The :class:`PartitionData` of ``spec`` (see the module docstring); raises
    :class:`~pyg_dist.errors.InvalidArgumentError` naming the argument that disagrees."""
    _check_spec(spec)
    books = _node_books(spec)
    ets = _edge_types(spec)
    for et in ets:
        if et[0] not in books or et[2] not in books:
            raise _err(spec, "node_pb", sorted(books), f"the node types of edge type {et!r}")
    edge_books = {et: check_owner_map(spec.where, "edge_pb", et, spec.edge_book[et], spec.num_parts)
                  for et in ets if et in spec.edge_book}
    graph = {et: _graph_part(spec, et, books, edge_books) for et in ets}
    node_feats, full_time = {}, {}
    for t, owner in books.items():
        node_feats[t], full = _node_feats(spec, t, owner)
        if full is not None:
            full_time[t] = full
    edge_feats = {et: ef for et in ets if (ef := _edge_feats(spec, et, edge_books.get(et))) is not None}
    maps: Dict[AnyType, Tensor] = {}
    for key, owner in list(books.items()) + list(edge_books.items()):
        maps[key] = owner
    fp = fingerprint(spec, maps)
    num_edges = {et: edge_books[et].numel() if et in edge_books else
                 int(graph[et].edge_id.max()) + 1 if graph[et].edge_id.numel() else 0 for et in ets}
    meta = PartitionMeta(root=Path(f"<in-memory {fp}>"), num_parts=spec.num_parts, node_types=list(books),
                         edge_types=ets, is_hetero=spec.is_hetero, method=METHOD, base_method=METHOD, hybrid=False,
                         sub_parts=1, num_nodes={t: b.numel() for t, b in books.items()}, num_edges=num_edges,
                         node_time_types=list(full_time),
                         edge_time_types=[et for et in ets if graph[et].edge_time is not None],
                         weight_types=[et for et in ets if graph[et].weight is not None], is_native=False,
                         extra={"fingerprint": fp, "in_memory": True})
    return PartitionData(meta, spec.part, DensePartitionBook(maps, spec.num_parts), graph, node_feats, edge_feats,
                         full_time)


__all__ = ["MemoryEdges", "MemoryRows", "MemorySpec", "build_partition", "check_owner_map", "fingerprint"]
