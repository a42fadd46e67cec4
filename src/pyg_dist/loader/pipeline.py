"""The loaders' batch pipeline, in one place: every pyg_dist loader is PyG's ``NodeLoader`` / ``LinkLoader`` over
ONE class of ours, :class:`PipelineLoader` (one machine) or :class:`DistPipelineLoader` (distributed).

A batch goes through these stages, in this order, whatever the loader::

    seeds    KeyedBatchSampler: the epoch's index batches, each with its key      epoch.py   (loader.batch_plan)
    sample   the loader's collate_fn: its sampler on one index batch,             sampler/   (a worker, or here)
             the feature round included (local gather, remote rows, caches)
    batch    the loader's filter_fn: the PyG Data / HeteroData                    batch.py, store_batch.py
    times    StageRecorder: takes each batch's clock, times the caller's wait     pipeline.py
             (distributed: the first batch's gate, timeouts.first_step_gate)
    device   DeviceStage: pinned, copied one batch ahead of the step              device.py  (off the CPU only)

Every stage is timed (:mod:`pyg_dist.sampler.timing`): a distributed batch carries its clock (sampling, rows,
assembly) out of the sampler, in a worker or here, inside a :class:`~pyg_dist.loader.batch.HostBatch`; the
recorder adds it to the loader's :attr:`PipelineLoader.stage_times`, the device stage adds its copy, and the
recorder, the outermost iterator, adds how long the caller waited in ``next()`` (``wait``) and how long it kept
each batch before asking for the next (``step``). :meth:`PipelineLoader.take_stage_times` hands the totals over
(and starts new ones): :class:`pyg_dist.train.stages.EpochClock` makes the epoch record of them.

The one choice is where the host batches come from (:meth:`PipelineLoader.host_batches`): torch's ``DataLoader``
iterator (sampler workers, or this process one batch at a time), or, for a distributed loader with
``concurrency > 1`` and no workers, the in-process prefetch (:mod:`pyg_dist.loader.prefetch`: the same sample and
batch steps with ``concurrency`` batches in flight). Each loader class defines its own ``collate_fn`` and
``filter_fn``; nothing depends on the order of base classes (PyG's class first, then ours, as PyG's loaders call
``super().__init__`` into ``DataLoader``: :class:`~pyg_dist.loader.epoch.KeyedDataLoader` takes its
``batch_size`` / ``shuffle`` / ``drop_last`` there).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import torch

from pyg_dist import timeouts
from pyg_dist.loader.batch import take_clock
from pyg_dist.loader.device import DeviceStage
from pyg_dist.loader.epoch import KeyedDataLoader
from pyg_dist.sampler.timing import StageTimes

if TYPE_CHECKING:
    from pyg_dist.cache.device import DeviceFeatureCache
    from pyg_dist.loader.seed_split import SeedShare


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
        times = self._stage_times()
        host = StageRecorder(self.host_batches(), times, unwrap=True)
        if self.device is not None and (self.device.type != "cpu" or self.gpu_cache is not None):
            host = DeviceStage(host, self.device, self.gpu_cache, self.feature_dtype, times=times)
        return StageRecorder(host, times, first=self.first_batch_gate)

    def first_batch_gate(self) -> None:
        """Runs when this iterator has its first batch, before handing it over (one machine: nothing)."""

    def _stage_times(self) -> StageTimes:
        if self.__dict__.get("_times") is None:
            self.__dict__["_times"] = StageTimes()
        return self.__dict__["_times"]

    @property
    def stage_times(self) -> StageTimes:
        """Where this loader's batches spent their time since :meth:`take_stage_times` (or construction):
        :mod:`pyg_dist.sampler.timing` names the stages."""
        return self._stage_times()

    def take_stage_times(self) -> StageTimes:
        """The totals of :attr:`stage_times`, which start again from zero."""
        out = self._stage_times()
        self.__dict__["_times"] = StageTimes()
        return out

    def __getstate__(self):  # a spawned worker gets the loader without the GPU rows (its sampler has the index)
        state = dict(super().__getstate__())
        state["gpu_cache"] = None
        state.pop("_times", None)
        return state


class StageRecorder:
    """An iterator over ``batches`` that records into ``times``: with ``unwrap``, each
    :class:`~pyg_dist.loader.batch.HostBatch`'s clock (the batch handed on without it: the plain batch, or the
    ``HostBatch`` of GPU rows the device stage needs); without, the seconds the caller waits in ``next()``
    (``wait``) and keeps each batch before asking again (``step``), and calls ``first()`` (timed as waiting) when
    it has its first batch. Other attributes are the inner iterator's."""

    def __init__(self, batches: Iterator, times: StageTimes, unwrap: bool = False,
                 first: Optional[Callable[[], Any]] = None):
        self.batches, self.times, self.unwrap, self.first = batches, times, unwrap, first
        self._returned: Optional[float] = None

    def __iter__(self) -> "StageRecorder":
        return self

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __getattr__(self, name: str):
        return getattr(self.__dict__["batches"], name)

    def __next__(self):
        asked = time.perf_counter()
        if not self.unwrap and self._returned is not None:
            self.times.step += asked - self._returned
            self._returned = None
        item = next(self.batches)
        if self.unwrap:
            return take_clock(item, self.times)
        if self.first is not None:
            first, self.first = self.first, None
            first()
        self._returned = time.perf_counter()
        self.times.wait += self._returned - asked
        return item


class DistPipelineLoader(PipelineLoader):
    """Our one class under a distributed loader: :class:`PipelineLoader` plus the in-process prefetch, the
    agreed batch count and stopping the loader's sampler workers."""

    seed_share: "SeedShare"  # this rank's seeds and the agreed batch count (set by the loader)
    filter_per_worker: bool  # PyG's loader attribute and method (the loader class defines filter_fn)
    filter_fn: Any

    def _start_batch(self, index):
        """The coroutine sampling one index batch (the loader's ``collate_fn``, awaitable)."""
        raise NotImplementedError

    def first_batch_gate(self) -> None:
        """Every rank waits here until all have their first batch (:func:`pyg_dist.timeouts.first_step_gate`:
        once per process, under the start-up bound), so that DDP's first all-reduce starts together. Only a
        loader whose batch count the ranks agreed on gates (a ``seed_split="partition"`` loader may have no batch
        on some rank: it passes straight through)."""
        if self.seed_share.agreed:
            timeouts.first_step_gate()

    def host_batches(self) -> Iterator:
        """The in-process prefetch with ``concurrency > 1`` and no workers, else torch's ``DataLoader``."""
        from pyg_dist.loader.prefetch import prefetch_iterator
        it = prefetch_iterator(self, self._start_batch)
        return it if it is not None else super().host_batches()

    def __call__(self, index) -> Any:
        """PyG's ``loader(index)``: the batch of ``index`` (a plain ``Data`` / ``HeteroData``; a ``HostBatch`` when
        a GPU cache holds rows, as the device stage needs it)."""
        item = self.collate_fn(index)
        if not self.filter_per_worker:
            item = self.filter_fn(item)
        return take_clock(item, self.stage_times)

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


__all__ = ["PipelineLoader", "DistPipelineLoader", "StageRecorder"]
