"""The loaders' batch pipeline, in one place: every pyg_dist loader is PyG's ``NodeLoader`` / ``LinkLoader`` over
ONE class of ours, :class:`PipelineLoader` (one machine) or :class:`DistPipelineLoader` (distributed).

A batch goes through these stages, in this order, whatever the loader::

    seeds    KeyedBatchSampler: the epoch's index batches, each with its key      epoch.py   (loader.batch_plan)
    sample   the loader's collate_fn: its sampler on one index batch,             sampler/   (a worker, or here)
             the feature round included (local gather, remote rows, caches)
    batch    the loader's filter_fn: the PyG Data / HeteroData                    batch.py, store_batch.py
    device   DeviceStage: pinned, copied one batch ahead of the step              device.py  (off the CPU only)

The one choice is where the host batches come from (:meth:`PipelineLoader.host_batches`): torch's ``DataLoader``
iterator (sampler workers, or this process one batch at a time), or, for a distributed loader with
``concurrency > 1`` and no workers, the in-process prefetch (:mod:`pyg_dist.loader.prefetch`: the same sample and
batch steps with ``concurrency`` batches in flight). Each loader class defines its own ``collate_fn`` and
``filter_fn``; nothing depends on the order of base classes (PyG's class first, then ours, as PyG's loaders call
``super().__init__`` into ``DataLoader``: :class:`~pyg_dist.loader.epoch.KeyedDataLoader` takes its
``batch_size`` / ``shuffle`` / ``drop_last`` there).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import torch

from pyg_dist.loader.device import DeviceStage
from pyg_dist.loader.epoch import KeyedDataLoader

if TYPE_CHECKING:
    from pyg_dist.loader.seed_split import SeedShare
    from pyg_dist.store.device_cache import DeviceFeatureCache


class PipelineLoader(KeyedDataLoader):
    """Our one class under a one-machine loader: the stages of the module docstring, composed in ``__iter__``.

    Loaders set ``device`` / ``gpu_cache`` with :func:`pyg_dist.loader.device.setup_device` and, when they cast
    features, ``feature_dtype``, before PyG's ``__init__`` runs.
    """

    device: Optional[torch.device] = None
    gpu_cache: Optional["DeviceFeatureCache"] = None
    feature_dtype: Optional[torch.dtype] = None

    def host_batches(self) -> Iterator:
        """The host batches (stages seeds -> sample -> batch): torch's ``DataLoader`` iteration."""
        return KeyedDataLoader.__iter__(self)

    def __iter__(self):
        host = self.host_batches()
        if self.device is None or (self.device.type == "cpu" and self.gpu_cache is None):
            return host
        return DeviceStage(host, self.device, self.gpu_cache, self.feature_dtype)

    def __getstate__(self):  # a spawned worker gets the loader without the GPU rows (its sampler has the index)
        state = dict(super().__getstate__())
        state["gpu_cache"] = None
        return state


class DistPipelineLoader(PipelineLoader):
    """Our one class under a distributed loader: :class:`PipelineLoader` plus the in-process prefetch, the
    agreed batch count and stopping the loader's sampler workers."""

    seed_share: "SeedShare"  # this rank's seeds and the agreed batch count (set by the loader)

    def _start_batch(self, index):
        """The coroutine sampling one index batch (the loader's ``collate_fn``, awaitable)."""
        raise NotImplementedError

    def host_batches(self) -> Iterator:
        """The in-process prefetch with ``concurrency > 1`` and no workers, else torch's ``DataLoader``."""
        from pyg_dist.loader.prefetch import prefetch_iterator
        it = prefetch_iterator(self, self._start_batch)
        return it if it is not None else super().host_batches()

    @property
    def _dist_sampler(self):
        return getattr(self, "node_sampler", None) or getattr(self, "link_sampler", None)

    @property
    def num_batches(self) -> int:
        """Batches per epoch (equal on every rank with ``seed_split="balanced"``)."""
        return self.seed_share.num_batches

    def shutdown(self) -> None:
        """Stops this loader's workers (they leave RPC); call it on every rank at the same point."""
        from pyg_dist.loader.workers import stop_workers
        stop_workers(self)


__all__ = ["PipelineLoader", "DistPipelineLoader"]
