"""Recycled output buffers for large row gathers.

A batch of the products-shaped graph gathers ~500k feature rows (200 MB) into a fresh tensor. Fresh
allocations of that size are ``mmap``-ed by the C allocator and released on free, so every batch pays
one page fault per 4 KiB page again: measured on this project's 2-core VM, ``index_select`` of 514k
100-dim rows takes ~190 ms into a fresh tensor and ~80 ms into memory that was used before.
:func:`gather_rows` itself copies with :func:`pyg_dist.ops.rows.take_rows` (one numba pass, ~25 % less
CPU than ``index_select``).

:class:`BufferPool` keeps a few large storages and hands out tensors on them. A storage is reused only
when nothing but the pool references it (its C++ use count is 1: every tensor and view the caller
kept, a batch still in a queue, an RPC message still being sent, all hold a reference), and never
once it was moved to shared memory (a DataLoader worker sends its batches that way; the receiver
maps the same pages). So a caller can never see its tensor change under it; a caller that keeps
every batch simply makes the pool allocate, as ``torch.empty`` would.

The pool is per process, bounded by ``$PYG_DIST_BUFFER_POOL_MB`` (default 1024; ``0`` turns it off)
or :func:`set_buffer_pool_limit`. Requests below 32 MiB (1 MiB without allocator tuning) are not pooled.

Example:
    >>> import torch
    >>> from pyg_dist.store.buffers import gather_rows
    >>> x = torch.arange(12.).view(6, 2)
    >>> gather_rows(x, torch.tensor([5, 0])).tolist()
    [[10.0, 11.0], [0.0, 1.0]]
"""
from __future__ import annotations

import math
import os
import threading
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from pyg_dist._alloc import allocator_tuned
from pyg_dist.envvars import read_number
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops.rows import take_rows

#: Smallest pooled request. With :func:`pyg_dist._alloc.tune_allocator` in effect glibc keeps blocks under
#: 32 MiB for reuse, so only larger ones are pooled; without it (not glibc, or turned off) blocks from 1 MiB
#: up are (its default reuse is not reliable across threads: pooling 8 MiB reply chunks measured 7.8 vs
#: 6.4 batches/s in bench_dist).
_MIN_BYTES = 32 << 20
_MIN_BYTES_UNTUNED = 1 << 20
#: Smallest gather done by the numba kernel (below it, a call's fixed cost is what counts).
_TAKE_BYTES = 256 << 10


def _min_bytes() -> int:
    return _MIN_BYTES if allocator_tuned() else _MIN_BYTES_UNTUNED
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _default_limit() -> int:
    return int(read_number("PYG_DIST_BUFFER_POOL_MB", 1024.0, allow_zero=True) * 2 ** 20)  # 0: no pool


class BufferPool:
    """A bounded set of reusable CPU storages (see the module docstring for the reuse rule).

    Args:
        limit_bytes: Most bytes the pool keeps; ``0`` disables pooling (every request allocates).
        min_bytes: Smallest pooled request (default: 32 MiB with allocator tuning, else 1 MiB).
    """

    def __init__(self, limit_bytes: int, min_bytes: Optional[int] = None):
        self.limit_bytes = int(limit_bytes)
        self.min_bytes = min_bytes
        self._storages: List[torch.UntypedStorage] = []
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._pinning = (0, 0)  # (pid, running CUDA device stages of that process): pinned memory while > 0

    def pin(self, on: bool) -> None:
        """One more (``on``) or one fewer CUDA device stage running in this process
        (:mod:`pyg_dist.loader.device`): while any runs, buffers are page-locked, so the stage's copies to
        the GPU are asynchronous without a copy into pinned memory first. A forked child never pins."""
        with self._lock:
            pid, count = self._pinning
            count = count if pid == os.getpid() else 0
            self._pinning = (os.getpid(), max(count + (1 if on else -1), 0))

    @property
    def pinned(self) -> bool:
        """Whether new buffers are page-locked now (a CUDA device stage runs in this process)."""
        pid, count = self._pinning
        return count > 0 and pid == os.getpid()

    @property
    def pooled_bytes(self) -> int:
        return sum(s.nbytes() for s in self._storages)

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> Tensor:
        """An uninitialised CPU tensor, on a recycled storage when one is free and large enough."""
        shape = tuple(int(s) for s in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        pin = self.pinned
        if nbytes < (_min_bytes() if self.min_bytes is None else self.min_bytes) or _use_count is None \
                or self.limit_bytes <= 0:
            return torch.empty(shape, dtype=dtype, pin_memory=pin)
        with self._lock:  # the tensor is made under the lock: no other thread can take the same storage
            storage = self._take(nbytes, pin)
            if storage is not None:
                # torch accepts set_(storage, offset, size) (contiguous strides); its stubs want a stride too
                return torch.empty(0, dtype=dtype).set_(storage, 0, shape)  # type: ignore[call-overload]
        self.misses += 1
        if pin:
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        return mapped_storage(nbytes, dtype).view(shape) if nbytes else torch.empty(shape, dtype=dtype)

    def clear(self) -> None:
        """Drops every pooled storage (tensors handed out stay valid: they hold their own reference)."""
        with self._lock:
            self._storages = []

    def _take(self, nbytes: int, pin: bool = False) -> Optional[torch.UntypedStorage]:
        use_count = _use_count
        assert use_count is not None  # empty() pools only when torch exposes the storage use count
        self._storages = [s for s in self._storages if not s.is_shared()]  # sent to another process
        free = [s for s in self._storages if use_count(s._cdata) == 1 and (not pin or s.is_pinned())]
        # at most twice the request: torch.rpc copies a tensor whose storage is >= 2x its bytes before sending
        fits = [s for s in free if nbytes <= s.nbytes() < 2 * nbytes]
        if fits:
            self.hits += 1
            return min(fits, key=lambda s: s.nbytes())
        size = -(-nbytes * 9 // 8 // 4096) * 4096  # 12.5 % head room: the next batch is a little larger
        for s in sorted(free, key=lambda s: s.nbytes()):  # make room: drop free storages that do not fit
            if self.pooled_bytes + size <= self.limit_bytes:
                break
            self._storages.remove(s)
        if self.pooled_bytes + size > self.limit_bytes:
            return None
        storage = torch.empty(size, dtype=torch.uint8, pin_memory=True).untyped_storage() if pin else \
            mapped_storage(size, torch.uint8).untyped_storage()
        self._storages.append(storage)
        self.misses += 1
        return storage


def mapped_storage(nbytes: int, dtype: torch.dtype) -> Tensor:
    """A 1-D uninitialised CPU tensor of ``nbytes`` bytes on an anonymous memory map of its own (unmapped when
    its last user drops it).

    What the pool allocates (its storages, and what it hands out while all of them are busy) lives outside
    the C heap: with :func:`~pyg_dist._alloc.tune_allocator` glibc keeps blocks under 32 MiB in its one
    heap, where a freed block of a few MiB is soon split by small allocations of other threads, so the next
    one grows the heap. Measured on an owner serving 80 replies of 2 MiB under a 4 MiB budget from 16
    threads (``tests/store/test_bounded_serving.py``, sockets transport): its peak RSS grew 16-46 MiB with
    heap blocks (its heap's bytes in use never more than 6 MiB above the start) and 10-12 MiB with mapped
    ones (TensorPipe: 11-22 and 11 MiB).
    """
    import mmap
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype, count=nbytes // dtype.itemsize)


_POOL = BufferPool(_default_limit())


def buffer_pool() -> BufferPool:
    """This process's pool."""
    return _POOL


def set_buffer_pool_limit(limit_mb: float) -> None:
    """Bounds this process's pool to ``limit_mb`` MiB (``0`` turns it off and frees what it holds)."""
    if isinstance(limit_mb, bool) or not isinstance(limit_mb, (int, float)) or not limit_mb >= 0:
        raise InvalidArgumentError("set_buffer_pool_limit", "limit_mb", limit_mb, "a number of MiB >= 0")
    _POOL.limit_bytes = int(limit_mb * 2 ** 20)
    if _POOL.limit_bytes == 0:
        _POOL.clear()


def empty_rows(n: int, like: Tensor, pool: Optional[BufferPool] = None) -> Tensor:
    """An uninitialised ``[n, *like.shape[1:]]`` tensor of ``like``'s dtype, from ``pool`` (default: this
    process's)."""
    return (_POOL if pool is None else pool).empty((n,) + tuple(like.shape[1:]), like.dtype)


def gather_rows(col: Tensor, rows: Tensor, pool: Optional[BufferPool] = None) -> Tensor:
    """``col.index_select(0, rows)``: from 256 KiB up by :func:`pyg_dist.ops.rows.take_rows` (one numba
    pass), into a tensor from ``pool`` (default: this process's pool, which serves large ones)."""
    if rows.numel() * col.element_size() * math.prod(col.shape[1:]) < _TAKE_BYTES:
        return col.index_select(0, rows)
    return take_rows(col, rows, empty_rows(rows.numel(), col, pool))


__all__ = ["BufferPool", "buffer_pool", "set_buffer_pool_limit", "empty_rows", "gather_rows"]
