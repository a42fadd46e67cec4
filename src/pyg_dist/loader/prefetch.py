"""Several batches in flight in the trainer's own process (``num_workers=0``, ``concurrency > 1``).

PyG's loaders sample one batch per ``next()``, synchronously. :class:`PrefetchIterator` instead keeps
``concurrency`` batches started on pyg_dist's background event loop: while the training step runs on
the main thread, the next batches are sampled and their features fetched (numba kernels and RPC waits
release the GIL). Batches come out in the order of the index sampler, exactly as without prefetching.
With ``num_workers > 0`` the DataLoader's workers run batches in parallel instead.

Randomness: every batch carries its own key (:mod:`pyg_dist.loader.epoch`) and draws nothing from a
shared generator, so prefetched batches are bit-identical to the ones ``concurrency=1`` gives.
"""
from __future__ import annotations

import collections
import concurrent.futures
from typing import Any, Callable, Coroutine

from pyg_dist.errors import RpcTimeoutError


class PrefetchIterator:
    """Iterator over a loader's batches with ``depth`` of them in flight.

    Args:
        index_iter: The DataLoader's iterator of index batches (its batch sampler).
        start: ``start(index)`` -> the coroutine sampling that batch (the sampler's async API).
        finish: ``finish(sample)`` -> the batch handed to the caller (the loader's ``filter_fn``).
        depth: Batches in flight (the sampler's ``concurrency``).
        timeout: Seconds to wait for one batch (the sampler's ``batch_timeout``).
        length: ``len()`` of the iterator (batches per epoch).
    """

    def __init__(self, index_iter, start: Callable[[Any], Coroutine], finish: Callable[[Any], Any], depth: int,
                 timeout: float, length: int):
        from pyg_dist.rpc import submit_coroutine
        self._submit, self._index, self._start, self._finish = submit_coroutine, index_iter, start, finish
        self._depth, self._timeout, self._len = depth, timeout, length
        self._pending: collections.deque = collections.deque()
        self._fill()

    def _fill(self) -> None:
        while len(self._pending) < self._depth:
            index = next(self._index, None)
            if index is None:
                return
            self._pending.append(self._submit(self._start(index)))

    def __iter__(self) -> "PrefetchIterator":
        return self

    def __len__(self) -> int:
        return self._len

    def __next__(self):
        if not self._pending:
            raise StopIteration
        fut = self._pending.popleft()
        self._fill()  # keep `depth` batches in flight while this one is awaited and used
        try:
            sample = fut.result(self._timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise RpcTimeoutError(f"a prefetched batch did not finish within {self._timeout:g} s") from None
        except BaseException:
            self.close()
            raise
        return self._finish(sample)

    def close(self) -> None:
        """Cancels the batches still in flight (the loader was left early)."""
        while self._pending:
            self._pending.popleft().cancel()

    def __del__(self):
        self.close()


def prefetch_iterator(loader, start: Callable[[Any], Coroutine]):
    """The iterator of a distributed loader: :class:`PrefetchIterator` in-process with ``concurrency > 1``
    (a pyg_dist sampler, keyed batches), else ``None`` (the loader's own iteration then)."""
    sampler = getattr(loader, "_dist_sampler", None)
    depth = getattr(sampler, "concurrency", 1)
    plan = getattr(loader, "batch_plan", None)
    if loader.num_workers > 0 or depth <= 1 or plan is None:
        return None
    if sampler is None or not hasattr(sampler, "batch_timeout"):
        return None
    return PrefetchIterator(iter(plan), start, loader.filter_fn, depth, sampler.batch_timeout, len(plan))


__all__ = ["PrefetchIterator", "prefetch_iterator"]
