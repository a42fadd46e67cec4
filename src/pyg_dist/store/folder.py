"""Opening a partition for the stores: check the folder against the world first, then load.

Every check here runs before any training starts and fails with a
:class:`~pyg_dist.errors.PartitionFormatError` naming the file: META.json missing or corrupt, a
partition count that differs from the world's, a name in META.json that leaves the folder, a missing partition
file (of *any* partition, so every rank fails at once instead of waiting for the one whose file is gone), a
listed file that is not a regular file (a FIFO, a device: found by ``os.stat`` before anything opens it), a file
whose byte size differs from the one META.json lists (a file of another run, a truncated copy: one ``stat`` per
file), a file this rank opens whose content digest differs (default ``verify="once"``: checked once per machine,
:mod:`pyg_dist.format.verified`; ``verify=True``: every time, shared files too), or tensors whose
sizes or dtypes disagree with META (:func:`pyg_dist.format.precision.check_stored`).
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import digests as D
from pyg_dist.format import meta as M
from pyg_dist.format.book import PartitionBook
from pyg_dist.format.data import PartitionData
from pyg_dist.format.precision import check_stored
from pyg_dist.format.reader import load_partition
from pyg_dist.format.validate import check_values
from pyg_dist.format.verified import check_once

#: ``verify`` values: ``"once"`` (default: whole-file digests, remembered per machine), ``True`` (every time,
#: shared files too), ``False`` (sizes and sampled blocks only).
VERIFY = ("once", True, False)


def owned_count(book, type_, part: int) -> int:
    """Number of ids of ``type_`` that ``part`` owns (no id list for range books)."""
    if isinstance(book, PartitionBook):
        start, end = book.owned_range(type_, part)
        return end - start
    return int(book.owned_ids(type_, part).numel())


def resolve_part(where: str, meta: M.PartitionMeta, part: Optional[int], ctx) -> int:
    """The partition to load: ``part``, or the context's; checks the folder matches the world."""
    if ctx is not None:
        from pyg_dist.context import DistContext

        if not isinstance(ctx, DistContext):
            raise InvalidArgumentError(where, "ctx", ctx, "a pyg_dist.context.DistContext or None")
        if ctx.num_partitions != meta.num_parts:
            raise PartitionFormatError(M.meta_path(meta.root),
                                       f"the folder has {meta.num_parts} partitions but the world expects "
                                       f"{ctx.num_partitions} (DistContext.num_partitions); partition the "
                                       "graph again or launch a matching world")
        if part is None:
            part = ctx.partition
    if part is None:
        raise InvalidArgumentError(where, "part", part, "a partition index, as pid= or part= (or pass "
                                   "ctx=DistContext)")
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < meta.num_parts:
        raise InvalidArgumentError(where, "part", part, f"an int in [0, {meta.num_parts})")
    return part


def check_files(meta: M.PartitionMeta) -> None:
    """Every partition's graph and node files exist (edge files too in pyg_dist folders), every part
    of a fingerprinted pyg_dist folder comes from the same partitioning, with META's counts, and every file
    META.json lists has its size there (folders that list none skip that)."""
    for p in range(meta.num_parts):
        paths = [M.graph_path(meta.root, p), M.node_feats_path(meta.root, p)]
        if meta.is_native:
            paths.append(M.edge_feats_path(meta.root, p))
        for path in paths:
            M.regular_size(path, "file is missing (incomplete copy of the partition folder?)")
        if meta.is_native and meta.extra.get("fingerprint"):
            check_stamp(meta, p)
    D.check_file_sizes(meta)


def graph_edges(meta: M.PartitionMeta, et, part: int) -> int:
    """Edges of ``et`` in partition ``part``'s ``graph.pt``: all of them (hybrid) or its owned ones."""
    if meta.hybrid:
        return meta.num_edges[et]
    b = meta.edge_bounds[et]
    return int(b[part + 1] - b[part])


def check_stamp(meta: M.PartitionMeta, part: int) -> None:
    """``part_<part>/pyg_dist.json`` names META's fingerprint and partition and META's counts."""
    import json
    path = M.part_stamp_path(meta.root, part)
    M.regular_size(path, "missing partition stamp (incomplete copy of the partition folder?)")
    try:
        stamp = json.loads(path.read_text())
        fp, idx, nodes, edges = stamp["fingerprint"], stamp["part"], stamp["nodes"], stamp["graph_edges"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PartitionFormatError(path, f"missing or unreadable partition stamp ({type(e).__name__}: {e})") from None
    if fp != meta.extra["fingerprint"] or idx != part:
        raise PartitionFormatError(path, f"part_{part} comes from another partitioning (fingerprint {fp}, part {idx}; "
                                   f"META.json: {meta.extra['fingerprint']}, part {part}): do not mix partition "
                                   "folders, copy the whole folder again")
    want_nodes = {t: int(meta.node_bounds[t][part + 1] - meta.node_bounds[t][part]) for t in meta.node_types}
    want_edges = {M.edge_type_str(e): graph_edges(meta, e, part) for e in meta.edge_types}
    if nodes != want_nodes or edges != want_edges:
        raise PartitionFormatError(path, f"counts {nodes} / {edges} disagree with META.json's {want_nodes} / "
                                   f"{want_edges}")


def _rows(path, what: str, tensor, expected: int) -> None:
    if tensor is not None and (tensor.dim() == 0 or tensor.size(0) != expected):
        raise PartitionFormatError(path, f"{what} has {tuple(tensor.shape)} rows; expected {expected} (one per "
                                   "owned item, as META.json's bounds say)")


def check_sizes(pd: PartitionData) -> None:
    """Owned-row counts of every node / edge attribute and CSC lengths agree with the book."""
    meta, p, book = pd.meta, pd.part, pd.book
    nfile, efile, gfile = (M.node_feats_path(meta.root, p), M.edge_feats_path(meta.root, p),
                           M.graph_path(meta.root, p))
    for t in meta.node_types:
        nf = pd.node_feats.get(t)
        n = owned_count(book, t, p)
        if nf is None:
            if n and meta.is_native:
                raise PartitionFormatError(nfile, f"no entry for node type {t!r}")
            continue
        _rows(nfile, f"global_id of {t!r}", nf.global_id, n)
        for name, value in nf.feats.items():
            _rows(nfile, f"attribute {name!r} of {t!r}", value, n)
        _rows(nfile, f"time of {t!r}", nf.time, n)
    for e, ef in pd.edge_feats.items():
        n = owned_count(book, e, p)
        _rows(efile, f"global_id of {e!r}", ef.global_id, n)
        for name, value in ef.feats.items():
            _rows(efile, f"attribute {name!r} of {e!r}", value, n)
        _rows(efile, f"edge_time of {e!r}", ef.edge_time, n)
    for e, g in pd.graph.items():
        if meta.is_native and g.row.numel() != graph_edges(meta, e, p):
            raise PartitionFormatError(gfile, f"holds {g.row.numel()} edges of {e!r}; META.json's bounds say "
                                       f"{graph_edges(meta, e, p)} (a file from another partitioning?)")
        if g.colptr.numel() != g.dst_end - g.dst_start + 1 or int(g.colptr[-1]) != g.row.numel() \
                or g.edge_id.numel() != g.row.numel():
            raise PartitionFormatError(gfile, f"CSC of {e!r} is inconsistent: colptr {g.colptr.numel()} for "
                                       f"destinations [{g.dst_start}, {g.dst_end}), {g.row.numel()} rows, "
                                       f"{g.edge_id.numel()} edge ids")


def check_verify(where: str, verify: Any) -> None:
    """``verify`` is one of :data:`VERIFY` (``True``, ``False``, ``"once"``)."""
    if not any(verify is v or (isinstance(v, str) and verify == v) for v in VERIFY):
        raise InvalidArgumentError(where, "verify", verify, f"one of {list(VERIFY)}")


def open_partition(where: str, root, part: Optional[int], ctx, mmap: bool, verify: Any = "once") -> PartitionData:
    """Validates the folder against the world and loads partition ``part`` (see module doc); ``verify``
    (:data:`VERIFY`): ``"once"`` re-hashes the files this rank opens unless remembered unchanged
    (:mod:`pyg_dist.format.verified`), ``True`` re-hashes them and the shared ones every time, ``False`` none."""
    if not isinstance(mmap, bool):
        raise InvalidArgumentError(where, "mmap", mmap, "a bool")
    check_verify(where, verify)
    meta = M.read_meta(root)
    part = resolve_part(where, meta, part, ctx)
    check_files(meta)
    if verify is True:
        D.check_file_digests(meta, part)
    elif verify == "once":
        check_once(meta, part)
    pd = load_partition(root, part, mmap=mmap)
    check_sizes(pd)
    check_stored(pd)  # features in the dtype META records (bfloat16 / float16 folders)
    check_values(pd)  # ids and pointers in range before any kernel indexes with them
    return pd


def resolve_pid(where: str, pid, part) -> Optional[int]:
    """PyG's ``pid`` or pyg_dist's ``part`` (an alias): the one given; both is an error."""
    if pid is not None and part is not None:
        raise InvalidArgumentError(where, "part", part, f"None when pid is given (pid={pid!r}; 'part' is an alias)")
    return pid if pid is not None else part


def _reopen(cls, root: str, part: int, mmap: bool, carried: Optional[dict] = None):
    store = cls.from_partition(root, part, mmap=mmap)
    store.__dict__.update(carried or {})
    return store


class PartitionStoreMixin:
    """What both stores share: opening a partition, pickling by re-opening, and its description.

    Subclasses set ``partition_meta``, ``book``, ``partition`` and ``_mmap`` through
    :meth:`_attach`.
    """

    def _attach(self, data: PartitionData, mmap: bool) -> None:
        self.partition_meta, self.book = data.meta, data.book
        self.partition, self._mmap = data.part, mmap

    @classmethod
    def from_partition(cls, root, part: Optional[int] = None, *, pid: Optional[int] = None, ctx=None,
                       mmap: bool = True, verify: Any = "once"):
        """Opens partition ``part`` of the folder ``root`` (see :func:`pyg_dist.store.load_stores`); ``pid`` is
        PyG's name for ``part`` (give one of them, or neither with ``ctx``: its partition)."""
        where = f"{cls.__name__}.from_partition"
        part = resolve_pid(where, pid, part)
        store: Callable[..., Any] = cls  # a concrete store: its constructor takes (data, mmap)
        return store(open_partition(where, root, part, ctx, mmap, verify), mmap=mmap)

    def __reduce__(self):  # pickled (spawned workers): re-open the folder; mmap keeps one copy
        return (_reopen, (type(self), str(self.partition_meta.root), self.partition, self._mmap, self._carried()))

    def _carried(self) -> dict:
        """Attributes a pickled store keeps besides what re-opening the folder restores."""
        return {}

    @property
    def num_partitions(self) -> int:
        return self.partition_meta.num_parts

    @property
    def partition_idx(self) -> int:
        """This store's partition (PyG's name)."""
        return self.partition

    @property
    def is_hetero(self) -> bool:
        return self.partition_meta.is_hetero

    @property
    def node_types(self) -> List[str]:
        return list(self.partition_meta.node_types)

    @property
    def edge_types(self) -> List[Tuple[str, str, str]]:
        return list(self.partition_meta.edge_types)
