"""The loaders' device stage: batches arrive on the GPU, copied one batch ahead of the training step.

``loader = DistNeighborLoader(env, ..., device="cuda")`` (the default on a ``DistEnv`` whose device is a GPU;
``device=`` on the one-machine loaders too) wraps the loader's iterator in a :class:`DeviceStage`. A background
thread takes the loader's next batch, copies it to the device on a CUDA stream of its own and hands it over
once the copy is done, while the training thread runs its step on the previous batch: the copy of batch
``i + 1`` overlaps the step on batch ``i`` (and, with a synchronous loader, so does its sampling). The
training thread's stream waits on the copy's event and every tensor is recorded on that stream, so the
caching allocator never reuses its memory early.

Host memory: a copy with ``non_blocking=True`` is asynchronous only from pinned (page-locked) memory. The
large feature gathers of a batch (:mod:`pyg_dist.store.buffers`) are made directly in pinned buffers of the
process's pool while a CUDA stage runs; the batch's other tensors are pinned by the stage's thread. The thread
waits for each copy to finish before it lets go of the host tensors, so a recycled pinned buffer is never
rewritten while the copy engine still reads it.

Order and exactly-once are the loader's: the stage hands batches over in the order the loader made them, one
by one. Without CUDA (``device=None`` or ``"cpu"``) no stage is made; ``device="cuda"`` on a machine without
CUDA is an :class:`~pyg_dist.errors.InvalidArgumentError`.

With a GPU feature cache (:mod:`pyg_dist.cache.device`) the batch's cached node attributes are built on
the GPU: the cached rows are gathered there and only the host rows of the other ids are copied.

Example:
    >>> loader = pyg_dist.NeighborLoader(data, [10, 5], batch_size=1024, device="cuda")  # doctest: +SKIP
    >>> for batch in loader:                      # batch.x, batch.edge_index, ... already on cuda:0
    ...     loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], ...)
"""
from __future__ import annotations

import copy
import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Iterator, Optional, Sized

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist.cache.device import DeviceFeatureCache, normal_device
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format.precision import batch_value
from pyg_dist.loader.batch import HostBatch
from pyg_dist.store.buffers import buffer_pool

#: Seconds the consumer waits between checks that the stage's thread is still alive.
_POLL = 1.0


def resolve_device(where: str, device: Any, current: bool = True) -> Optional[torch.device]:
    """``device`` (``None``, ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device``) checked against this
    machine; ``"cuda"`` becomes the current CUDA device (``current=False``: stays ``"cuda"``, no CUDA context
    is made)."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidArgumentError(where, "device", device, "None, 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise InvalidArgumentError(where, "device", device, "None, 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        raise InvalidArgumentError(where, "device", device, "None or 'cpu' on this machine: torch sees no CUDA "
                                   "device (torch.cuda.is_available() is False)")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InvalidArgumentError(where, "device", device, f"a CUDA device index below {torch.cuda.device_count()}")
    return normal_device(dev) if current else dev


def _map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """``obj`` with ``fn`` applied to every tensor (``Data`` / ``HeteroData`` in place; lists, tuples, dicts)."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, (Data, HeteroData)):
        return obj.apply(fn)
    if isinstance(obj, (list, tuple)):
        items = [_map_tensors(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def move_batch(batch: Any, device: torch.device, cache: Optional[DeviceFeatureCache] = None,
               feature_dtype: Optional[torch.dtype] = None, non_blocking: bool = False) -> Any:
    """A copy of ``batch`` on ``device`` (``batch`` itself is left as it is): every tensor copied (pinned first
    when ``non_blocking``), and, for a :class:`~pyg_dist.loader.batch.HostBatch`, the node attributes a device
    cache holds assembled there from its rows and the host rows it carries."""
    rows = None
    if isinstance(batch, HostBatch):  # the batch stage's plans for the rows the cache holds
        batch, rows = batch.data, batch.device_rows
    if isinstance(batch, (Data, HeteroData)):  # PyG's apply() works in place: move a shallow copy
        batch = copy.copy(batch)

    def to(t: Tensor) -> Tensor:
        if non_blocking and t.device.type == "cpu" and not t.is_pinned():
            t = t.pin_memory()
        return t.to(device, non_blocking=non_blocking)

    out = _map_tensors(batch, to)
    if rows:
        if cache is None:
            raise PyGDistError("a batch carries node rows for a GPU cache, but its loader has no gpu_cache: build "
                               "the loader with the cache its sampler's device_index belongs to")
        for t, plan in rows.items():
            moved = dataclasses.replace(plan, hit_pos=to(plan.hit_pos), hit_slot=to(plan.hit_slot),
                                        miss_pos=to(plan.miss_pos), host={n: to(v) for n, v in plan.host.items()})
            store = out if isinstance(out, Data) else out[t]
            for name, value in cache.assemble(t, moved, lambda n, v: batch_value(n, v, feature_dtype)).items():
                store[name] = value
    return out


class _Feeder:
    """The stage's thread: takes the loader's batches, moves them, queues them (holds no reference to the
    :class:`DeviceStage`, so a stage the consumer dropped is collected and stops it)."""

    def __init__(self, src: Iterator, device: torch.device, cache, feature_dtype, depth: int, times=None):
        self.src, self.device, self.cache, self.feature_dtype = src, device, cache, feature_dtype
        self.times = times  # a StageTimes whose ``device`` this thread adds to
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def run(self) -> None:
        try:
            if self.stream is not None:
                torch.cuda.set_device(self.device)
            for batch in self.src:
                if not self.put(("batch", self.transfer(batch))):
                    return
            self.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 -- handed to the consumer, raised there
            self.put(("error", exc))

    def put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def transfer(self, batch):
        start = time.perf_counter()
        if self.stream is None:
            out, event = move_batch(batch, self.device, self.cache, self.feature_dtype), None
        else:
            with torch.cuda.stream(self.stream):
                out = move_batch(batch, self.device, self.cache, self.feature_dtype, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.stream)
            event.synchronize()  # the host tensors (pinned, maybe pooled) may be reused once the copy is done
        if self.times is not None:
            self.times.device += time.perf_counter() - start
        return out, event


class DeviceStage:
    """The batches of ``batches`` on ``device``, made ``depth`` ahead by a background thread (module doc).

    Args:
        batches: The loader's own iterator.
        device: Where batches go (a CUDA device; any other device is copied to synchronously).
        cache: The loader's GPU feature cache, or ``None``.
        feature_dtype: The loader's ``feature_dtype`` (cached rows are cast to it on the device).
        depth: Batches finished ahead of the consumer (1: the copy of the next overlaps this step).
        times: A :class:`~pyg_dist.sampler.timing.StageTimes` the copies' seconds are added to (``device``).
    """

    def __init__(self, batches: Iterator, device: torch.device, cache: Optional[DeviceFeatureCache] = None,
                 feature_dtype: Optional[torch.dtype] = None, depth: int = 1, times=None):
        self.device = device
        self._len = len(batches) if isinstance(batches, Sized) else None
        self._feeder = _Feeder(batches, device, cache, feature_dtype, depth, times)
        self._done = False
        self._pinned = self._feeder.stream is not None  # while a CUDA stage runs, the pool hands out pinned memory
        if self._pinned:
            buffer_pool().pin(True)
        self._thread = threading.Thread(target=self._feeder.run, name="pyg_dist-device-stage", daemon=True)
        self._thread.start()

    def __iter__(self) -> "DeviceStage":
        return self

    def __len__(self) -> int:
        if self._len is None:
            raise TypeError("the loader's iterator has no length")
        return self._len

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, item = self._get()
        if kind == "batch":
            batch, event = item
            if event is not None:
                stream = torch.cuda.current_stream(self.device)
                stream.wait_event(event)
                _map_tensors(batch, lambda t: (t.record_stream(stream), t)[1] if t.is_cuda else t)
            return batch
        self._done = True
        self.close()
        if kind == "error":
            raise item
        raise StopIteration

    def _get(self):
        while True:
            try:
                return self._feeder.queue.get(timeout=_POLL)
            except queue.Empty:
                if not self._thread.is_alive() and self._feeder.queue.empty():
                    return "error", PyGDistError("the device stage's thread ended without a batch or an error")

    def close(self) -> None:
        """Stops the thread (the loader was left early) and lets go of the batches made ahead."""
        feeder = self._feeder
        feeder.stop.set()
        while True:
            try:
                feeder.queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        close = getattr(feeder.src, "close", None)
        if callable(close):
            close()
        if self._pinned:
            buffer_pool().pin(False)
            self._pinned = False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown
            pass


def setup_device(loader, where: str, device: Any, gpu_cache: Any = None, transform: Any = None) -> None:
    """Sets ``loader.device`` and ``loader.gpu_cache`` (checked). The loader then builds its sampler with the
    cache's index (``DistNeighborSampler(device_index=gpu_cache.index)``)."""
    loader.device = resolve_device(where, device)
    loader.gpu_cache = None
    if gpu_cache is None:
        return
    if not isinstance(gpu_cache, DeviceFeatureCache):
        raise InvalidArgumentError(where, "gpu_cache", gpu_cache, "None or a DeviceFeatureCache "
                                   "(pyg_dist.store.build_device_cache)")
    if loader.device is None or loader.device != gpu_cache.device:
        raise InvalidArgumentError(where, "gpu_cache", gpu_cache, f"a cache on the loader's device ({loader.device})")
    if transform is not None:
        raise InvalidArgumentError(where, "gpu_cache", gpu_cache, "None with transform= (the transform runs on the "
                                   "host batch, before the cached rows are set on the GPU)")
    loader.gpu_cache = gpu_cache


__all__ = ["DeviceStage", "resolve_device", "move_batch", "setup_device"]
