"""A partition folder checked as it is opened, the one list of checks both opening (:mod:`pyg_dist.store.folder`)
and ``pyg-dist-partition --verify`` run, so that a folder ``--verify`` calls ok also opens.

Every check fails with a :class:`~pyg_dist.errors.PartitionFormatError` naming the file: a missing partition file
(of *any* partition, so every rank fails at once), a listed file that is not a regular file (one ``os.stat`` before
anything opens it), a file that resolves outside the folder it is listed in (a symlink to ``/etc/passwd``; a whole
``part_<i>`` folder may be a symlink to another disk, the files inside it may not leave it), a stamp of another
partitioning, a byte size or sampled digest that differs from META.json's, a whole-file digest that differs
(``verify``), row counts that disagree with the book, attributes whose dtype or trailing shape differ from what
META.json records (:func:`~pyg_dist.format.precision.check_stored`), a partition holding ids that are not its
own, and ids or pointers out of range (:func:`~pyg_dist.format.validate.check_values`).

Example:
    >>> pd = load_checked(read_meta("/data/products-2"), 1, mmap=True)       # doctest: +SKIP
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import digests as D
from pyg_dist.format import meta as M
from pyg_dist.format.book import PartitionBook
from pyg_dist.format.data import PartitionData
from pyg_dist.format.precision import check_stored
from pyg_dist.format.reader import load_partition
from pyg_dist.format.validate import check_values
from pyg_dist.format.verified import check_once

LOG = logging.getLogger("pyg_dist")
#: ``verify`` values: ``"once"`` (default: whole-file digests, remembered per machine), ``True`` (every time,
#: shared files too), ``False`` (sizes and sampled blocks only).
VERIFY = ("once", True, False)


def owned_count(book, type_, part: int) -> int:
    """Number of ids of ``type_`` that ``part`` owns (no id list for range books)."""
    if isinstance(book, PartitionBook):
        start, end = book.owned_range(type_, part)
        return end - start
    return int(book.owned_ids(type_, part).numel())


def check_files(meta: M.PartitionMeta) -> None:
    """Every partition's graph and node files exist (edge files too in pyg_dist folders) inside the folder, every
    part of a fingerprinted pyg_dist folder comes from the same partitioning, with META's counts, and every file
    META.json lists stays inside the folder and has its size there (folders that list none skip that)."""
    for p in range(meta.num_parts):
        paths = [M.graph_path(meta.root, p), M.node_feats_path(meta.root, p)]
        if meta.is_native:
            paths.append(M.edge_feats_path(meta.root, p))
        for path in paths:
            M.regular_size(path, "file is missing (incomplete copy of the partition folder?)")
            check_inside(meta, path)
        if meta.is_native and meta.extra.get("fingerprint"):
            check_stamp(meta, p)
    for rel in D.listed(meta):
        if os.path.lexists(Path(meta.root) / rel):
            check_inside(meta, Path(meta.root) / rel)
    D.check_file_sizes(meta)


def check_inside(meta: M.PartitionMeta, path: Path) -> None:
    """``path`` resolves inside the folder it is listed in: its ``part_<i>`` folder (which may itself be a link to
    another disk), else the partition folder; a link out of it is refused before anything opens it."""
    why = D.link_problem(meta.root, meta.num_parts, Path(path))
    if why is not None:
        raise PartitionFormatError(path, why)


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


def trailing_shapes(pd: PartitionData) -> Dict[str, list]:
    """``{"node ntype name" / "edge src__rel__dst name": trailing shape}`` of a partition (``--verify`` compares
    them across partitions)."""
    out = {f"node {t} {k}": list(v.shape[1:]) for t, nf in pd.node_feats.items() for k, v in nf.feats.items()}
    out.update({f"edge {M.edge_type_str(e)} {k}": list(v.shape[1:]) for e, ef in pd.edge_feats.items()
                for k, v in ef.feats.items()})
    return out


def check_verify(where: str, verify: Any) -> None:
    """``verify`` is one of :data:`VERIFY` (``True``, ``False``, ``"once"``)."""
    if not any(verify is v or (isinstance(v, str) and verify == v) for v in VERIFY):
        raise InvalidArgumentError(where, "verify", verify, f"one of {list(VERIFY)}")


def load_checked(meta: M.PartitionMeta, part: int, mmap: bool, verify: Any = "once") -> PartitionData:
    """Partition ``part`` of the folder ``meta`` describes, after every check of this module (``verify``:
    :data:`VERIFY`; ``"once"`` re-hashes the files this rank opens unless remembered unchanged,
    :mod:`pyg_dist.format.verified`; ``True`` re-hashes them and the shared ones every time; ``False`` none)."""
    check_files(meta)
    if verify is not False and not D.listed(meta):
        _say_unlisted(meta)
    if verify is True:
        D.check_file_digests(meta, part)
    elif verify == "once":
        check_once(meta, part)
    pd = load_partition(meta.root, part, mmap=mmap)
    check_sizes(pd)
    check_stored(pd)  # features in the dtype META records (bfloat16 / float16 folders)
    check_values(pd)  # ids and pointers in range before any kernel indexes with them
    return pd


_SAID: set = set()


def _say_unlisted(meta: M.PartitionMeta) -> None:
    """One warning per folder and process: META.json lists no digests, so no file's content is checked."""
    key = (os.getpid(), str(meta.root))
    if key not in _SAID:
        _SAID.add(key)
        LOG.warning("%s lists no file digests (written by PyG's Partitioner or before pyg_dist recorded them): the "
                    "files' content is not checked, only their presence, sizes, shapes and ids; partition again "
                    "with pyg-dist-partition to have every file checked", M.meta_path(meta.root))


def structure_problems(meta: M.PartitionMeta) -> Iterator[Tuple[str, List[str]]]:
    """``(label, problems)`` per partition: what opening it would refuse beyond digests (every check of
    :func:`load_checked` but the digests, files memory-mapped), then whether all partitions agree on every
    attribute's trailing shape (what a folder without ``attr_shapes`` can only be checked by)."""
    shapes: Dict[int, Dict[str, list]] = {}
    for p in range(meta.num_parts):
        try:
            shapes[p] = trailing_shapes(load_checked(meta, p, mmap=True, verify=False))
            yield f"{M.part_dir('', p).name} (opened as a rank would)", []
        except PartitionFormatError as e:
            yield f"{M.part_dir('', p).name} (opened as a rank would)", [f"{e.path}: {e.problem}"]
    odd = [f"{key}: {', '.join(f'part_{p} {shapes[p].get(key)}' for p in sorted(shapes))}"
           for key in sorted({k for s in shapes.values() for k in s})
           if len({str(s.get(key)) for s in shapes.values()}) > 1]
    yield "attribute shapes across partitions", [f"rows of differing shapes: {line}" for line in odd]


__all__ = ["VERIFY", "owned_count", "check_files", "check_inside", "graph_edges", "check_stamp", "check_sizes",
           "trailing_shapes", "check_verify", "load_checked", "structure_problems"]
