"""The default content check at open (``verify="once"``): whole-file digests, checked once per machine.

Opening a partition re-hashes every file that rank opens (its ``part_<i>/`` files and the shared node-time
files, the ones META.json lists) and compares the digests with META.json's, so a flipped byte anywhere in a
data file is a :class:`~pyg_dist.errors.PartitionFormatError` naming the file before any batch reads it. A
file that matched is remembered in a small entry of its own under ``$XDG_CACHE_HOME/pyg_dist/verified/`` (else
``~/.cache/pyg_dist/verified/``; at most :data:`MAX_ENTRIES`), by its absolute path, size, ``mtime_ns``, inode
and device, with the digest it had: a later open of the unchanged file skips the re-read (one ``stat`` and one
small read per file). A cache folder that cannot be read or written is no error: every open then re-hashes.

**Bit rot after the check.** A change that keeps the size, ``mtime_ns`` and inode of a remembered file (a disk
flipping bits, a write that restores the mtime) is looked for in two more ways, by default: every open re-reads
:data:`RECHECK_BLOCKS` blocks of 8 MiB of each remembered file, drawn at random, and compares their crc32 with
the block table the full check remembered (a file of at most that many blocks is re-read whole every open); and an
entry older than :data:`MAX_AGE_S` (7 days) is re-hashed whole. A block that differs is a
:class:`~pyg_dist.errors.PartitionFormatError` naming the file and the offset. What is still missed: a change
outside the re-read blocks of a large file, until the entry ages out. ``verify=True`` re-hashes every time (and
the shared maps too); ``verify=False`` checks sizes and sampled blocks only. The original-id files, read only by
:func:`~pyg_dist.format.load_original_ids`, are checked the same way when it reads them.

Example:
    >>> check_once(read_meta("/data/products-2"), 0)       # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from pyg_dist._fsio import BLOCK_BYTES, DIGESTS, digest_file
from pyg_dist.envvars import raw
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import digests as D
from pyg_dist.format import meta as M

CACHE_NAME = "verified"
#: Remembered files kept (the least recently written entries are dropped first when a write goes over).
MAX_ENTRIES = 4096
#: Blocks of 8 MiB re-read at random from each remembered file at every open.
RECHECK_BLOCKS = 4
#: Seconds after which a remembered file is re-hashed whole.
MAX_AGE_S = 7 * 24 * 3600.0
#: Largest entry read back (a block table of 8 MiB blocks: ~10 bytes per block).
_MAX_ENTRY = 1 << 20


def cache_path() -> Path:
    """The folder of remembered files: ``$XDG_CACHE_HOME/pyg_dist/verified/``, else
    ``~/.cache/pyg_dist/verified/``; one small entry per file (so an open reads only its own files' entries,
    and ranks writing at once never rewrite each other's)."""
    base = raw("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyg_dist" / CACHE_NAME


def _entry(cache: Path, path: Path) -> Path:
    return cache / (hashlib.sha256(str(path).encode()).hexdigest()[:40] + ".json")


def _remembered(cache: Path, path: Path) -> Optional[list]:
    """What the cache remembers of ``path``: ``[path, size, mtime_ns, inode, device, algorithm, digest,
    verified at (unix time), [crc32 of every 8 MiB block]]``."""
    entry = _entry(cache, path)
    try:
        if not 0 < M.regular_size(entry) <= _MAX_ENTRY:  # never open a FIFO or a huge file
            return None
        got = json.loads(entry.read_text())
    except (OSError, ValueError, PartitionFormatError):
        return None
    ok = isinstance(got, list) and len(got) == 9 and got[:1] == [str(path)] and isinstance(got[7], (int, float)) \
        and isinstance(got[8], list) and all(isinstance(b, int) for b in got[8])
    return got if ok else None


def _block_problem(path: Path, blocks: List[int], size: int, when: float) -> Optional[str]:
    """Why :data:`RECHECK_BLOCKS` random blocks of ``path`` differ from its remembered block table (``None``
    when they agree)."""
    if len(blocks) != -(-size // BLOCK_BYTES):
        return "its remembered block table does not fit its size"
    picks = range(len(blocks)) if len(blocks) <= RECHECK_BLOCKS else \
        sorted(random.SystemRandom().sample(range(len(blocks)), RECHECK_BLOCKS))
    with open(path, "rb", buffering=0) as f:
        for i in picks:
            if zlib.crc32(os.pread(f.fileno(), BLOCK_BYTES, i * BLOCK_BYTES)) != blocks[i]:
                return (f"content of bytes [{i * BLOCK_BYTES}, {min(size, (i + 1) * BLOCK_BYTES)}) differs from what "
                        f"this machine verified on {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))} (same "
                        "size, mtime and inode since): bit rot on the disk, or a write that restored the mtime")
    return None


def _remember(cache: Path, fresh: Dict[Path, list]) -> None:
    """Writes one entry per file of ``fresh`` (temp file + rename); any ``OSError`` is ignored."""
    if not fresh:
        return
    tmp = None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for path, want in fresh.items():
            fd, tmp = tempfile.mkstemp(prefix=".entry-", dir=cache)
            with os.fdopen(fd, "w") as f:
                json.dump([str(path), *want], f)
            os.replace(tmp, _entry(cache, path))
            tmp = None
        entries = sorted(cache.glob("*.json"), key=lambda e: e.stat().st_mtime_ns)
        for old in entries[:max(0, len(entries) - MAX_ENTRIES)]:
            old.unlink(missing_ok=True)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _stamp(path: Path) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def opened_files(meta: M.PartitionMeta, part: int) -> List[str]:
    """The listed files a rank of partition ``part`` opens: its ``part_<part>/`` files and node-time files."""
    own = M.part_dir("", part).name
    node_time = Path(M.full_node_time_path("", "_")).parent.as_posix()
    return sorted(r for r in D.listed(meta) if Path(r).parts[0] == own or Path(r).parent.as_posix() == node_time)


def check_once(meta: M.PartitionMeta, part: int, cache: Optional[Path] = None, threads: int = 2) -> int:
    """Whole-file digests of :func:`opened_files` against META.json, skipping files remembered unchanged
    (see the module docstring). Returns the bytes re-hashed.

    Raises:
        PartitionFormatError: naming META.json (fingerprint, digest name) or the first file whose size or
            content differs from META.json's.
    """
    return check_files_once(meta, opened_files(meta, part), cache, threads)


def check_files_once(meta: M.PartitionMeta, rels: List[str], cache: Optional[Path] = None, threads: int = 2) -> int:
    """:func:`check_once` for the root-relative files ``rels`` (those META.json does not list are skipped:
    folders written before digests were recorded)."""
    why = D.fingerprint_problem(meta)
    if why is not None:
        raise PartitionFormatError(M.meta_path(meta.root), why)
    files = D.listed(meta)
    rels = [r for r in rels if r in files]
    algorithm = meta.extra.get("files_digest", DIGESTS[0])
    problems = D.file_problems(meta, rels, digests=False)  # missing, not regular, size, sampled blocks
    if problems:
        raise PartitionFormatError(*problems[0])
    cache = cache_path() if cache is None else cache
    todo, now = [], time.time()
    for rel in rels:
        path = Path(os.path.abspath(Path(meta.root) / rel))
        want = [*_stamp(path), algorithm, files[rel]["digest"]]
        got = _remembered(cache, path)
        if got is None or got[1:7] != want or not 0 <= now - got[7] <= MAX_AGE_S:
            todo.append((path, want))
            continue
        why = _block_problem(path, got[8], want[0], got[7])
        if why is not None:
            raise PartitionFormatError(path, why)
    if not todo:
        return 0
    with ThreadPoolExecutor(max(1, threads)) as pool:
        got = list(pool.map(lambda t: _digest_blocks(t[0], algorithm), todo))
    fresh: Dict[Path, list] = {}
    for (path, want), (digest, blocks) in zip(todo, got):
        if digest != want[-1]:
            raise PartitionFormatError(path, f"content differs from META.json's {algorithm} digest ({digest} != "
                                       f"{want[-1]}): a corrupt file (flipped bytes) or one from another "
                                       "partitioning run")
        if _stamp(path) == want[:4]:  # unchanged while it was read: remember it
            fresh[path] = [*want, now, blocks]
    _remember(cache, fresh)
    return sum(want[0] for _, want in todo)


def _digest_blocks(path: Path, algorithm: str):
    blocks: List[int] = []
    return digest_file(path, algorithm, blocks)[1], blocks


__all__ = ["check_once", "check_files_once", "opened_files", "cache_path", "CACHE_NAME", "RECHECK_BLOCKS",
           "MAX_AGE_S"]
