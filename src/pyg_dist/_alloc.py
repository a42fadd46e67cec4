"""C allocator settings for batch workloads (glibc only; applied once per process).

Every batch allocates and frees arrays of 1-30 MB (sampled edges, id maps, routed positions, reply
chunks). With glibc's defaults such blocks are often returned to the kernel on free (``mmap`` above a
moving threshold, heap trimming above twice that) and the next batch pays a page fault per 4 KiB
page again: measured, routing 514k ids into fresh arrays took 5.8 ms instead of 2.1 ms. pyg_dist
therefore fixes ``M_MMAP_THRESHOLD`` at 32 MiB (glibc's maximum) and ``M_TRIM_THRESHOLD`` at
256 MiB when a distributed session (:func:`pyg_dist.train.session.dist_session`) or a sampler worker starts,
so freed blocks stay in the process for the next batch; a one-machine script may call
:func:`tune_allocator` itself.

It also sets ``M_ARENA_MAX`` to 1: every thread created afterwards allocates from the main heap. The
RPC threads (torch's serving pool, TensorPipe's receiving loop) otherwise get arenas of their own,
whose extra 64 MiB heaps glibc unmaps as soon as they empty, whatever the trim threshold: every few
replies (8 MiB chunks of feature rows) then fault their pages in again. Measured with
``bench_dist.py`` (2 METIS ranks, topology + feature cache 0.25): the serving threads' page faults fell
from ~700 to ~120 per batch, the 90th percentile of one reply's gather from ~50 ms to ~14 ms of CPU,
and the ranks' CPU per batch from 165-170 ms to 156-159 ms.
Larger blocks (whole feature batches) are recycled by :mod:`pyg_dist.store.buffers` instead.

Blocks above 32 MiB (a batch's features, a layer's activations and gradients: 30-60 MB each on the reference
graph) cannot stay in glibc's heap: every batch maps them afresh and faults them in 4 KiB at a time. The same
call therefore sets ``THP_MEM_ALLOC_ENABLE=1`` (unless the environment already says otherwise), which makes
torch back CPU tensors of 2 MiB and more with transparent huge pages (where the kernel's THP mode is ``always``
or ``madvise``): measured with the planner's job on the reference graph (1 rank, 1 thread, fanouts 15,10,
GraphSAGE 64 wide), page faults per batch fell from 100,000 to 10,000 and the batch from 383-391 ms to
230-265 ms (interleaved runs), peak RSS unchanged. torch reads the variable once, at its first allocation of
2 MiB or more, and ``import torch_geometric`` already makes one: in a script that imports PyG before its session
starts (every training script) the setting comes too late. Launch with ``THP_MEM_ALLOC_ENABLE=1`` in the
environment (pyg_dist's own launchers — the demo, the planner, the Slurm script, the test world — do);
:func:`huge_pages_in_effect` tells whether torch took it, and :func:`~pyg_dist.train.session.dist_session` warns
on rank 0 when it did not. Measured with the planner's job (1 rank, 1 thread, 40 batches): set at launch,
230 ms of CPU per batch and 419k page faults in the whole run; set by the session only, 379 ms and 4.45M.

Set ``PYG_DIST_MALLOC_TUNING=0`` to keep the allocator's defaults (a value that is no flag raises
``InvalidArgumentError`` naming the variable).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import re
import warnings
from typing import Dict, Mapping, Optional

from pyg_dist.envvars import environ, hand_down, raw, read_flag

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 256 << 20
_applied = None


def tune_allocator() -> bool:
    """Applies the settings above once; True when they are in effect (False off glibc or when disabled)."""
    global _applied
    if _applied is None:
        _applied = False
        if read_flag("PYG_DIST_MALLOC_TUNING", True):
            hand_down("THP_MEM_ALLOC_ENABLE", "1", to="torch: huge pages for tensors >= 2 MiB", keep_set=True)
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt)
                return False
            _applied = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and \
                bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)) and bool(mallopt(_M_ARENA_MAX, 1))
    return _applied


def thp_mode() -> str:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``; ``""`` where unknown)."""
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return ""
    chosen = re.search(r"\[(\w+)\]", text)
    return chosen.group(1) if chosen else ""


def huge_pages_in_effect() -> bool:
    """Whether torch backs large CPU tensors with huge pages in this process: it then aligns every allocation of
    2 MiB or more at a page, where it otherwise asks for 64 bytes and glibc's mapped blocks (above 32 MiB) start
    64 bytes into their first page. The probe is never touched (no memory); it latches torch's reading of
    ``THP_MEM_ALLOC_ENABLE`` if nothing has yet."""
    import torch
    probe = torch.empty(40 << 20, dtype=torch.uint8)
    return thp_mode() in ("always", "madvise") and probe.data_ptr() % 4096 == 0


def huge_pages_missed() -> bool:
    """True when huge pages were asked for (``THP_MEM_ALLOC_ENABLE=1``, the kernel allows them) but torch had
    read the variable before it was set: the case :func:`~pyg_dist.train.session.dist_session` warns about."""
    wanted = raw("THP_MEM_ALLOC_ENABLE") == "1" and thp_mode() in ("always", "madvise")
    return wanted and not huge_pages_in_effect()


def warn_huge_pages_missed(rank: int) -> bool:
    """On rank 0, warns (``RuntimeWarning``) when :func:`huge_pages_missed`; returns whether it warned."""
    if rank != 0 or not allocator_tuned() or not huge_pages_missed():
        return False
    warnings.warn("torch read THP_MEM_ALLOC_ENABLE before pyg_dist's session set it (import torch_geometric "
                  "allocates): batches of large tensors fault their memory in 4 KiB pages, about 1.6x the CPU of "
                  "a batch with huge pages on the reference graph. Launch with THP_MEM_ALLOC_ENABLE=1 in the "
                  "environment (or PYG_DIST_MALLOC_TUNING=0 to silence this).", RuntimeWarning, stacklevel=4)
    return True


def launch_env(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """A copy of ``env`` (default: this process's) for launching ranks: ``THP_MEM_ALLOC_ENABLE=1`` added unless
    set or ``PYG_DIST_MALLOC_TUNING`` is off, so torch takes it before anything allocates."""
    out = dict(environ(env))
    if read_flag("PYG_DIST_MALLOC_TUNING", True, out):
        out.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return out


def allocator_tuned() -> bool:
    """Whether :func:`tune_allocator` has put the settings in effect in this process (no side effect)."""
    return bool(_applied)


__all__ = ["tune_allocator", "allocator_tuned", "thp_mode", "huge_pages_in_effect", "huge_pages_missed",
           "warn_huge_pages_missed", "launch_env"]
