"""When the trainers aggregate: a wall-clock coordinator over torch's ``TCPStore``, or a step count.

Time-based (the paper's design): the coordinator (a thread of rank 0) raises the round counter
``round`` in the store every ``interval`` seconds and, after ``total_time``, writes ``stop = F`` and
raises the counter to the final round ``F``. After every step each trainer reads the counter (one store
round trip) and runs one aggregation per round it has not run yet, so every trainer runs exactly ``F``
aggregations, whatever its pace, and nobody waits for anybody between them. A trainer that fails writes
``abort`` (its reason) so the others stop at their next step instead of waiting in a collective.

Step-based (reproducible): aggregate after every ``interval_steps`` local steps, stop after
``max_steps`` (a final aggregation ends the run).

The store is the one torchrun (or ``init_process_group``'s ``env://``) already runs on
``MASTER_ADDR:MASTER_PORT``; this module connects to it as a client, under a per-run key prefix.
"""
from __future__ import annotations

import datetime
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from pyg_dist.envvars import raw
from pyg_dist.errors import InvalidArgumentError, PyGDistError, check_positive_int, check_seconds

_WHERE = "TMAConfig"
_RUNS = itertools.count()


class TMAAbortedError(PyGDistError, RuntimeError):
    """Time-based training stopped on every trainer because one failed; names the rank and its reason."""


@dataclass(frozen=True)
class TMAConfig:
    """How often trainers aggregate and when they stop (time-based, or step-based for reproducibility).

    Args:
        interval: Seconds between aggregations (time-based).
        total_time: Seconds of training (time-based).
        interval_steps: Local steps between aggregations (step-based; then ``max_steps`` too).
        max_steps: Local steps of every trainer (step-based).
        timeout: Seconds any store access or aggregation may take before it fails; ``None`` (default): the
            job's failure bound (:mod:`pyg_dist.timeouts`, ``TrainConfig.failure_timeout``).
        average_optimizer: Also average the optimizer's floating state (Adam's moments) at every round
            (the paper keeps it local: ``False``). Averaged moments stop each trainer's momentum from
            pulling the averaged weights straight back towards its own partition.

    Example:
        >>> TMAConfig(interval=2.0, total_time=60.0).time_based
        True
        >>> TMAConfig(interval=None, total_time=None, interval_steps=10, max_steps=100).time_based
        False
    """
    interval: Optional[float] = 1.0
    total_time: Optional[float] = 30.0
    interval_steps: Optional[int] = None
    max_steps: Optional[int] = None
    timeout: Optional[float] = None
    average_optimizer: bool = False

    def __post_init__(self):
        steps = self.interval_steps is not None or self.max_steps is not None
        if steps:
            check_positive_int(_WHERE, "interval_steps", self.interval_steps)
            check_positive_int(_WHERE, "max_steps", self.max_steps)
            if self.interval is not None or self.total_time is not None:
                raise InvalidArgumentError(_WHERE, "interval", self.interval,
                                           "None with interval_steps (choose time-based or step-based)")
        else:
            for name in ("interval", "total_time"):
                check_seconds(_WHERE, name, getattr(self, name))
        if self.timeout is not None:
            check_seconds(_WHERE, "timeout", self.timeout)
        if not isinstance(self.average_optimizer, bool):
            raise InvalidArgumentError(_WHERE, "average_optimizer", self.average_optimizer, "a bool")

    @property
    def time_based(self) -> bool:
        """Whether aggregation follows the wall clock (else the step count)."""
        return self.interval_steps is None


def connect_store(timeout: Optional[float] = None):
    """A client of the job's rendezvous store (``MASTER_ADDR:MASTER_PORT``: torchrun's, or the one
    ``init_process_group``'s ``env://`` hosts) with its keys under this torchrun attempt's prefix
    (:func:`pyg_dist.group.attempt_store`) and a fresh run number (every trainer calls this in the same order,
    so they agree on it; a restarted attempt never reads the dead attempt's keys). ``timeout``: default
    the failure bound (:mod:`pyg_dist.timeouts`)."""
    from pyg_dist import timeouts
    from pyg_dist.group import attempt_store

    addr, port = raw("MASTER_ADDR") or None, raw("MASTER_PORT") or None
    if not addr or not port:
        raise InvalidArgumentError("run_tma", "MASTER_ADDR/MASTER_PORT", (addr, port),
                                   "set (launch with torchrun, or init_process_group with env://)")
    wait = timeouts.failure_timeout() if timeout is None else timeout
    return attempt_store(None, datetime.timedelta(seconds=wait), prefix=f"tma/{next(_RUNS)}/")


class Coordinator(threading.Thread):
    """Rank 0's thread raising the round counter every ``interval`` s and stopping after ``total_time``."""

    def __init__(self, store, interval: float, total_time: float):
        super().__init__(name="pyg_dist-tma-coordinator", daemon=True)
        self.store, self.interval, self.total_time = store, interval, total_time
        self.cancelled = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        """Raises the counter on schedule; writes ``stop`` before the final round."""
        start, k = time.monotonic(), 0
        try:
            while not self.cancelled.is_set():
                due = min(start + (k + 1) * self.interval, start + self.total_time)
                if self.cancelled.wait(max(0.0, due - time.monotonic())):
                    return
                k += 1
                if due >= start + self.total_time:
                    self.store.set("stop", str(k))  # before the counter: whoever sees round k sees stop
                    self.store.add("round", 1)
                    return
                self.store.add("round", 1)
        except BaseException as exc:  # noqa: BLE001 -- reported by the trainer loop of rank 0
            self.error = exc


class RoundClock:
    """A trainer's view of the schedule: after each step, how many aggregations are due and whether
    to stop."""

    def __init__(self, config: TMAConfig, store=None, coordinator: Optional[Coordinator] = None):
        self.config, self.store, self.coordinator, self.done, self.steps = config, store, coordinator, 0, 0

    def after_step(self, stepped: bool = True) -> Tuple[int, bool]:
        """Aggregations due now and whether the run ends after them (``stepped``: a step was taken)."""
        self.steps += int(stepped)
        c = self.config
        if not c.time_based:
            assert c.interval_steps is not None and c.max_steps is not None  # checked by TMAConfig
            stop = self.steps >= c.max_steps
            due = 1 if stepped and (self.steps % c.interval_steps == 0 or stop) else 0
            return due, stop
        if self.coordinator is not None and self.coordinator.error is not None:
            raise TMAAbortedError(f"the coordinator failed: {self.coordinator.error!r}") from self.coordinator.error
        if self.store.check(["abort"]):
            raise TMAAbortedError(f"time-based training aborted: {self.store.get('abort').decode()}")
        current = int(self.store.add("round", 0))
        if current == self.done:
            return 0, False
        stop = self.store.check(["stop"]) and int(self.store.get("stop")) <= current
        due, self.done = current - self.done, current
        return due, stop

    def abort(self, rank: int, reason: str) -> None:
        """Tells every trainer to stop (time-based runs); best effort, never raises."""
        if self.store is None:
            return
        try:
            self.store.set("abort", f"rank {rank}: {reason}"[:2000])
        except Exception:  # noqa: BLE001 -- the store may be gone with its host; the collective times out then
            pass


__all__ = ["TMAConfig", "TMAAbortedError", "Coordinator", "RoundClock", "connect_store"]
