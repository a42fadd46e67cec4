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
230-265 ms (interleaved runs), peak RSS unchanged. torch reads the variable at its first allocation of
2 MiB or more: a script that allocates large tensors before its session starts sets it at launch itself.

Set ``PYG_DIST_MALLOC_TUNING=0`` to keep the allocator's defaults (a value that is no flag raises
``InvalidArgumentError`` naming the variable).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from pyg_dist.envvars import read_flag

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
            os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # torch: huge pages for tensors >= 2 MiB
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt)
                return False
            _applied = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and \
                bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)) and bool(mallopt(_M_ARENA_MAX, 1))
    return _applied


def allocator_tuned() -> bool:
    """Whether :func:`tune_allocator` has put the settings in effect in this process (no side effect)."""
    return bool(_applied)


__all__ = ["tune_allocator", "allocator_tuned"]
