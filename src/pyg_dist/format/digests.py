"""Content digests of a partition folder's files, and the folder id (``fingerprint``) derived from them.

A pyg_dist writer lists, in META.json's ``pyg_dist`` section, every file of the folder as ``"files":
{relative path: {"bytes": size, "digest": hex}}`` (``"files_digest"`` names the algorithm), except META.json
and the per-partition stamps ``part_<i>/pyg_dist.json`` (which embed the fingerprint). The fingerprint is a
hash of the sorted ``(path, bytes, digest)`` of the data files (graph, node and edge files, maps, original ids:
not the caches, which embed it too): two runs that write the same bytes get the same id, any other content
another.

Each entry also has a ``"sample"`` digest: the crc32 of :data:`SAMPLES` blocks of 4 KiB spread evenly over the
file. At open every listed file's size and sample are compared with META.json (a ``stat`` and 64 KiB read per
file, ~0.1 ms each), which catches a same-size file from another run (other rows, other ids) without reading
it all. The default ``verify="once"`` also re-hashes the files a rank opens, once per machine
(:mod:`pyg_dist.format.verified`); ``verify=True`` re-hashes a partition's files and the shared ones whole,
every time. Every listed name must stay inside the folder (:func:`name_problem`) and be a regular file
(:func:`pyg_dist.format.meta.regular_size`, one ``os.stat`` before any open). Folders without
``"files"`` (older, or PyG's) skip all three; entries without ``"sample"`` skip that one.

Example:
    >>> files = file_digests("/tmp/p2", listed_paths("/tmp/p2", 2))      # doctest: +SKIP
    >>> folder_fingerprint(files)                                         # doctest: +SKIP
    '5f0c...'
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from pyg_dist._fsio import DIGESTS, digest_file
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M

FileList = Dict[str, Dict[str, Any]]
#: Blocks of :data:`SAMPLE_BYTES` read for a file's ``"sample"`` digest (evenly spaced, first and last included).
SAMPLES, SAMPLE_BYTES = 16, 4096
_CACHES = ("feature_cache.pt", "topology_cache.pt")  # written after the fingerprint, which they embed


def listed_paths(root, num_parts: int, parts: Optional[Iterable[int]] = None, shared: bool = True) -> List[str]:
    """Root-relative POSIX paths of the files META.json lists: those of ``part_<p>`` for ``p`` in ``parts``
    (default: every partition) and, with ``shared``, those outside the partition folders; never META.json,
    a stamp, or anything hidden (temporary and spill folders)."""
    root = Path(root)
    part_names = {M.part_dir("", p).name for p in (range(num_parts) if parts is None else parts)}
    all_parts = {M.part_dir("", p).name for p in range(num_parts)}
    stamps = {M.part_stamp_path("", p).as_posix() for p in range(num_parts)}
    out = []
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        top = rel.parts[0] if rel.parts else None
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if (top in part_names) if top in all_parts else shared:
            out += [(rel / f).as_posix() for f in sorted(files) if not f.startswith(".")]
        if top is None:
            dirs[:] = [d for d in dirs if d in part_names or (shared and d not in all_parts)]
    return [p for p in out if p != M.META_FILE and p not in stamps]


def sample_digest(path, size: int) -> str:
    """crc32 (hex) of :data:`SAMPLES` blocks of :data:`SAMPLE_BYTES` at evenly spaced offsets of the file
    ``path`` of ``size`` bytes (the whole file when it is smaller than that)."""
    crc = 0
    with open(path, "rb", buffering=0) as f:
        span = max(size - SAMPLE_BYTES, 0)
        for off in sorted({span * i // (SAMPLES - 1) for i in range(SAMPLES)}):
            crc = zlib.crc32(os.pread(f.fileno(), SAMPLE_BYTES, off), crc)
    return f"{crc:08x}"


def file_digests(root, rels: Iterable[str], threads: int = 2, algorithm: str = DIGESTS[0]) -> FileList:
    """``{path: {"bytes": size, "digest": hex, "sample": hex}}`` of the files ``rels`` under ``root``,
    ``threads`` at a time."""
    rels = list(rels)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        done = list(pool.map(lambda r: digest_file(Path(root) / r, algorithm), rels))
    return {r: {"bytes": n, "digest": d, "sample": sample_digest(Path(root) / r, n)} for r, (n, d) in zip(rels, done)}


def embeds_fingerprint(rel: str) -> bool:
    """Whether the listed file ``rel`` holds the fingerprint (a cache), so it is not part of it."""
    return Path(rel).name in _CACHES


def folder_fingerprint(files: FileList) -> str:
    """The folder id: 32 hex digits of the sha256 of the sorted ``(path, bytes, digest)`` of the data files."""
    h = hashlib.sha256()
    for rel in sorted(r for r in files if not embeds_fingerprint(r)):
        h.update(json.dumps([rel, files[rel]["bytes"], files[rel]["digest"]]).encode() + b"\n")
    return h.hexdigest()[:32]


# ------------------------------------------------------------------------------------------- checks
def listed(meta: M.PartitionMeta) -> FileList:
    """META.json's ``files`` (empty for folders written before digests were recorded, and PyG's)."""
    files = meta.extra.get("files") if meta.is_native else None
    if files is None:
        return {}
    ok = isinstance(files, dict) and all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("digest"), str)
        and isinstance(v.get("sample", ""), str) for v in files.values())
    if not ok:
        raise PartitionFormatError(M.meta_path(meta.root), "'files' must map each path to {\"bytes\": int, "
                                   "\"digest\": str}")
    for rel in files:
        why = name_problem(rel)
        if why is not None:
            raise PartitionFormatError(M.meta_path(meta.root), f"'files' entry {rel!r}: {why}")
    return files


def name_problem(rel: str) -> Optional[str]:
    """Why ``rel`` (a name META.json lists) is not a file inside the folder: it must be relative, normalised
    POSIX (no ``.``, ``..``, empty or backslash parts) and not start with ``/`` (``None`` when it is)."""
    if not isinstance(rel, str) or not rel:
        return "a name must be a non-empty string"
    if rel.startswith("/") or os.path.isabs(rel):
        return "is absolute; names are relative to the folder"
    if "\\" in rel or "\0" in rel:
        return "holds a backslash or NUL; names are POSIX paths"
    parts = rel.split("/")
    if ".." in parts:
        return "leaves the folder ('..'); names stay inside it"
    if posixpath.normpath(rel) != rel or "." in parts or "" in parts:
        return f"is not normalised (as {posixpath.normpath(rel)!r}); names are written normalised"
    return None


def link_problem(root, num_parts: int, path: Path) -> Optional[str]:
    """Why ``path`` (a file of the folder ``root``) resolves outside the folder it belongs to (``None`` when it does
    not): a file under ``part_<i>/`` must resolve inside that partition folder's own resolved location (the
    ``part_<i>`` folder itself may be a link to another disk), any other file inside the resolved ``root``."""
    rel = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root)))
    top = rel.parts[0] if rel.parts else ""
    parts = {M.part_dir("", p).name for p in range(num_parts)}
    home = Path(root) / top if top in parts else Path(root)
    real, home_real = os.path.realpath(path), os.path.realpath(home)
    if real != home_real and not real.startswith(home_real.rstrip(os.sep) + os.sep):
        return (f"resolves to {real}, outside {home_real} (a symbolic link out of the "
                f"{'partition' if top in parts else 'partition folder'}): refused, nothing was read")
    return None


def part_files(meta: M.PartitionMeta, part: int) -> List[str]:
    """The listed files partition ``part`` reads: its own and the shared ones (maps, original ids, time)."""
    own = M.part_dir("", part).name
    others = {M.part_dir("", p).name for p in range(meta.num_parts)} - {own}
    return sorted(r for r in listed(meta) if Path(r).parts[0] not in others)


def largest_part_bytes(meta: M.PartitionMeta) -> int:
    """Bytes of the largest partition's own listed files (0 for a folder without a file list): what sizes the
    time every rank allows for opening (:func:`pyg_dist.train.opening.open_bound`)."""
    parts = {M.part_dir("", p).name: 0 for p in range(meta.num_parts)}
    for rel, entry in listed(meta).items():
        top = Path(rel).parts[0]
        if top in parts:
            parts[top] += int(entry.get("bytes", 0))
    return max(parts.values(), default=0)


def _size_problem(path: Path, expected: int, actual: int) -> str:
    return (f"holds {actual} bytes but META.json lists {expected}: a file from another partitioning run or a "
            "truncated copy")


def file_problems(meta: M.PartitionMeta, rels: Iterable[str], digests: bool,
                  missing_ok: bool = False) -> List[Tuple[Path, str]]:
    """``(file, problem)`` of every listed file in ``rels`` that is missing (unless ``missing_ok``), whose size
    differs from META.json or, with ``digests``, whose content does."""
    files, out = listed(meta), []
    algorithm = meta.extra.get("files_digest", DIGESTS[0])
    if files and algorithm not in DIGESTS:
        return [(M.meta_path(meta.root), f"files_digest {algorithm!r} is not one of {list(DIGESTS)}")]
    todo = []
    for rel in rels:
        path, want = Path(meta.root) / rel, files[rel]
        if missing_ok and not os.path.lexists(path):
            continue
        try:
            size = M.regular_size(path, "file is missing (incomplete copy of the partition folder?)")
        except PartitionFormatError as e:
            out.append((path, e.problem))
            continue
        if size != want["bytes"]:
            out.append((path, _size_problem(path, want["bytes"], size)))
        elif not digests and "sample" in want and sample_digest(path, size) != want["sample"]:  # else: whole
            out.append((path, f"content differs from META.json's sampled digest ({SAMPLES} blocks): a file from "
                        "another partitioning run of the same size, or a corrupt copy"))
        elif digests:
            todo.append(rel)
    if todo:
        for rel, got in file_digests(meta.root, todo, algorithm=algorithm).items():
            if got["digest"] != files[rel]["digest"]:
                out.append((Path(meta.root) / rel, f"content differs from META.json's {algorithm} digest "
                            f"({got['digest']} != {files[rel]['digest']}): a file from another partitioning run "
                            "or a corrupt copy"))
    return out


def fingerprint_problem(meta: M.PartitionMeta) -> Optional[str]:
    """Why META.json's fingerprint is not the one its ``files`` give (``None`` when it is)."""
    files = listed(meta)
    if files and folder_fingerprint(files) != meta.extra.get("fingerprint"):
        return (f"fingerprint {meta.extra.get('fingerprint')} is not the one its files list gives "
                f"({folder_fingerprint(files)}): META.json was edited or mixed from two runs")
    return None


def check_file_sizes(meta: M.PartitionMeta) -> None:
    """Every listed file that is present has META.json's size and sampled digest, else a
    :class:`PartitionFormatError` naming it (missing files are the caller's check)."""
    problems = file_problems(meta, listed(meta), digests=False, missing_ok=True)
    if problems:
        raise PartitionFormatError(*problems[0])


def check_file_digests(meta: M.PartitionMeta, part: int) -> None:
    """Partition ``part``'s files and the shared ones are all present with META.json's sizes and digests."""
    why = fingerprint_problem(meta)
    if why is not None:
        raise PartitionFormatError(M.meta_path(meta.root), why)
    problems = file_problems(meta, part_files(meta, part), digests=True)
    if problems:
        raise PartitionFormatError(*problems[0])


# ------------------------------------------------------------------------------------------- a whole folder
def stamp_problem(meta: M.PartitionMeta, part: int) -> Optional[str]:
    """Why ``part_<part>/pyg_dist.json`` does not name META.json's fingerprint and this partition (``None``
    when it does, or when the folder has no fingerprint); the stores also check its counts."""
    if not (meta.is_native and meta.extra.get("fingerprint")):
        return None
    path = M.part_stamp_path(meta.root, part)
    try:
        M.regular_size(path)
        stamp = json.loads(path.read_text())
        fp, idx = stamp["fingerprint"], stamp["part"]
    except PartitionFormatError as e:
        return f"{path.name}: {e.problem}"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{path.name}: missing or unreadable ({type(e).__name__})"
    if fp != meta.extra["fingerprint"] or idx != part:
        return f"{path.name}: from another partitioning (fingerprint {fp}, part {idx})"
    return None


def folder_problems(meta: M.PartitionMeta) -> Iterator[Tuple[str, List[str], int]]:
    """``(label, problems, bytes checked)`` for META.json, every partition and the shared files, each as soon
    as it is checked: every listed file present with its size and digest, stamps naming the folder. A folder
    that lists no files (older, or PyG's) gets its partitions' graph and node files checked for presence only."""
    files = listed(meta)
    why = fingerprint_problem(meta)
    yield M.META_FILE, [why] if why else [], 0
    part_names = [M.part_dir("", p).name for p in range(meta.num_parts)]
    groups = {name: sorted(r for r in files if Path(r).parts[0] == name) for name in part_names}
    groups["shared files"] = sorted(r for r in files if Path(r).parts[0] not in part_names)
    for p, (label, rels) in enumerate(groups.items()):
        if not files and p < meta.num_parts:
            rels = [M.graph_path("", p).as_posix(), M.node_feats_path("", p).as_posix()]
            found = [f"{r}: file is missing or not a regular file" for r in rels
                     if not (Path(meta.root) / r).is_file()]
        else:
            linked = [(Path(meta.root) / r, link_problem(meta.root, meta.num_parts, Path(meta.root) / r))
                      for r in rels if os.path.lexists(Path(meta.root) / r)]
            out_of = [(path, why) for path, why in linked if why is not None]
            found = [f"{Path(path).relative_to(meta.root).as_posix()}: {msg}"
                     for path, msg in out_of or file_problems(meta, rels, digests=True)]
        stamp = stamp_problem(meta, p) if p < meta.num_parts else None
        found += [f"{M.part_dir('', p).name}/{stamp}"] if stamp else []
        yield label, found, sum(files[r]["bytes"] for r in rels if r in files)
