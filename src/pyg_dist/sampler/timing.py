"""Where a batch's time goes: :class:`StageTimes`, filled by every stage of the pipeline as the batch passes.

A distributed sampler opens a clock per batch (:func:`batch_clock`), and the code of each stage adds to the
clock of the batch it runs for (:func:`current`; a ``contextvars`` variable, so batches in flight together on
one event loop each keep their own, and the hop requests a batch spawns add to it). The clock travels with the
sample (``metadata.times``), then the loader adds the assembly and device copy and sums the clocks of an
epoch; the training loop adds the step and the time it waited for each batch
(:class:`pyg_dist.train.stages.EpochClock`).

The stages (seconds, wall time of the process that did the work):

=================  ============================================================================================
``sample_local``   one-hop sampling done here: this partition's seeds and those the topology cache holds
``sample_remote``  waiting for other partitions' one-hop replies, after the local share was done
``rows_local``     feature rows gathered here: owned rows and feature-cache hits (remote requests issued first)
``rows_remote``    waiting for other partitions' rows, after the local gather
``assemble``       building the PyG ``Data`` / ``HeteroData`` from the sample and its rows (``filter_fn``)
``device``         the host-to-device copy (a CUDA device only)
``wait``           the training loop waiting for its next batch (what sampling did not hide)
``step``           the training step (forward, backward, optimiser)
=================  ============================================================================================

With sampler workers or ``concurrency > 1`` the sampling stages overlap the step: they are busy seconds, and
only ``wait`` and ``step`` add up to the trainer's wall time. Counts: ``batches``, and the feature rows read
here (``rows_owned``), from the cache (``rows_cached``) and fetched (``rows_fetched``).

Example:
    >>> t = StageTimes(sample_local=0.5, batches=1)
    >>> (t + StageTimes(step=0.25, batches=1)).as_dict()["batches"]
    2
"""
from __future__ import annotations

import contextvars
import time
from dataclasses import asdict, dataclass, fields
from typing import Dict, Iterator, List, Optional

#: The timed stages, in pipeline order.
STAGES = ("sample_local", "sample_remote", "rows_local", "rows_remote", "assemble", "device", "wait", "step")
#: The counters.
COUNTS = ("batches", "rows_owned", "rows_cached", "rows_fetched")


@dataclass
class StageTimes:
    """Seconds per stage (:data:`STAGES`) and counts (:data:`COUNTS`) of one batch, or summed over many."""
    sample_local: float = 0.0
    sample_remote: float = 0.0
    rows_local: float = 0.0
    rows_remote: float = 0.0
    assemble: float = 0.0
    device: float = 0.0
    wait: float = 0.0
    step: float = 0.0
    batches: int = 0
    rows_owned: int = 0
    rows_cached: int = 0
    rows_fetched: int = 0

    def add(self, other: Optional["StageTimes"]) -> "StageTimes":
        """Adds ``other`` (``None``: nothing) into this one; returns self. Only the fields ``other`` has (non-zero)
        are written, so two threads adding different stages to one object (the device stage's copy seconds, the
        caller's wait) do not overwrite each other."""
        if other is not None:
            for f in fields(self):
                value = getattr(other, f.name)
                if value:
                    setattr(self, f.name, getattr(self, f.name) + value)
        return self

    def __add__(self, other: "StageTimes") -> "StageTimes":
        return StageTimes().add(self).add(other)

    def as_dict(self) -> Dict[str, float]:
        """``{field: value}``."""
        return asdict(self)

    def as_list(self) -> List[float]:
        """Every field, in declaration order (a vector to sum across ranks)."""
        return [float(getattr(self, f.name)) for f in fields(self)]

    @classmethod
    def from_list(cls, values) -> "StageTimes":
        """The inverse of :meth:`as_list`."""
        out = cls()
        for f, v in zip(fields(cls), values):
            setattr(out, f.name, int(round(float(v))) if f.name in COUNTS else float(v))
        return out


_CLOCK: contextvars.ContextVar[Optional[StageTimes]] = contextvars.ContextVar("pyg_dist_batch_clock", default=None)


def current() -> Optional[StageTimes]:
    """The clock of the batch this code runs for, or ``None`` (outside a batch)."""
    return _CLOCK.get()


class batch_clock:
    """``with batch_clock() as times:`` a fresh clock (one batch) for the code inside and what it spawns."""

    def __enter__(self) -> StageTimes:
        self.times = StageTimes(batches=1)
        self._token = _CLOCK.set(self.times)
        return self.times

    def __exit__(self, *exc) -> None:
        _CLOCK.reset(self._token)


class timed:
    """``with timed("rows_local"):`` adds the block's wall seconds to that stage of the current batch's clock
    (nothing outside a batch)."""

    __slots__ = ("stage", "start")

    def __init__(self, stage: str):
        self.stage = stage

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        clock = _CLOCK.get()
        if clock is not None:
            setattr(clock, self.stage, getattr(clock, self.stage) + time.perf_counter() - self.start)


def clocks_total(times: Iterator[Optional[StageTimes]]) -> StageTimes:
    """The sum of several clocks (``None`` entries skipped)."""
    out = StageTimes()
    for t in times:
        out.add(t)
    return out


__all__ = ["StageTimes", "STAGES", "COUNTS", "batch_clock", "timed", "current", "clocks_total"]
