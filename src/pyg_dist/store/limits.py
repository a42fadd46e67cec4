"""What an owner process serves at most: the serving settings and the byte budget of replies in flight.

Two settings bound a partition's owner, whatever its peers ask (see ``docs/reference/settings.md``). They
cover feature-lookup replies (:mod:`pyg_dist.store.serving`) and one-hop sampling replies
(:func:`pyg_dist.sampler.hops.serve_one_hop`: 16 bytes per sampled edge and 8 per seed, bounded before
sampling by seeds x fanout, and by the degrees without replacement), under one budget per process:

* ``$PYG_DIST_REPLY_MAX_MB`` (default 256): the most bytes ONE reply may hold. A requester splits
  its requests so that none exceeds its own value (nothing legitimate fails); an owner refuses a larger
  one with :class:`~pyg_dist.errors.ServingLimitError` (the requester then raises ``RemoteCallError``
  naming the peer, the size and the setting). A single row larger than the limit is still served, and so is
  one seed's sample without replacement (at most its in-edges) or a single draw.
* ``$PYG_DIST_SERVE_BUDGET_MB`` (default 512): the most reply bytes one process serves at once. A request
  waits (first come, first served) until its reply fits beside those still being sent; one larger than
  the whole budget is admitted alone. The wait is bounded by the call's timeout (default: the failure
  bound of :mod:`pyg_dist.timeouts`), then ``ServingLimitError`` naming the setting.

Both are read when used (a process follows its own environment; spawned ranks and sampler workers
inherit it). A reply's bytes count as in flight from its gather until the RPC layer has sent and dropped
its tensors (a finalizer on each chunk), at most for the call's timeout (after it the requester has
given up: what is still held is the caller's, e.g. an in-process call keeping the rows).

Example:
    >>> budget = ByteBudget()
    >>> hold = budget.acquire(100, limit=150, timeout=1.0)
    >>> budget.in_use
    100
    >>> hold.release(); budget.in_use
    0
"""
from __future__ import annotations

import math
import threading
import time
import weakref
from collections import deque
from typing import Iterable, Optional, Set, Tuple

from torch import Tensor

from pyg_dist.envvars import read_number
from pyg_dist.errors import ServingLimitError

REPLY_MAX_ENV = "PYG_DIST_REPLY_MAX_MB"
SERVE_BUDGET_ENV = "PYG_DIST_SERVE_BUDGET_MB"
DEFAULT_REPLY_MAX_MB = 256.0
DEFAULT_SERVE_BUDGET_MB = 512.0
_MIB = 1 << 20


def _mib_setting(name: str, default: float) -> int:
    """``$name`` (MiB, a number > 0; unset or empty: ``default``) in bytes, or InvalidArgumentError naming it."""
    return max(1, int(read_number(name, default) * _MIB))


def reply_max_bytes() -> int:
    """The most bytes of one reply (``$PYG_DIST_REPLY_MAX_MB``, default 256 MiB)."""
    return _mib_setting(REPLY_MAX_ENV, DEFAULT_REPLY_MAX_MB)


def serve_budget_bytes() -> int:
    """The most reply bytes one process serves at once (``$PYG_DIST_SERVE_BUDGET_MB``, default 512 MiB)."""
    return _mib_setting(SERVE_BUDGET_ENV, DEFAULT_SERVE_BUDGET_MB)


def mib(nbytes: int) -> str:
    """``nbytes`` for a message: ``'1.50 MiB'``."""
    return f"{nbytes / _MIB:.2f} MiB"


def check_reply_size(partition: int, nbytes: int, rows: int, limit: Optional[int] = None) -> None:
    """Raises :class:`ServingLimitError` when a reply of ``nbytes`` (``rows`` rows) is over the reply limit;
    a reply of one row is always within it."""
    limit = reply_max_bytes() if limit is None else limit
    if nbytes > limit and rows > 1:
        refuse_reply(partition, f"a lookup reply of {mib(nbytes)} ({rows} rows)", limit)


def refuse_reply(partition: int, what: str, limit: int) -> None:
    """Raises the :class:`ServingLimitError` of a reply (``what``: its kind and size) over the reply limit."""
    raise ServingLimitError(REPLY_MAX_ENV, mib(limit), f"partition {partition} refuses {what}: over its reply "
                            "limit (the requester splits its requests by its own value: give every process the "
                            "same one)")


def wait_bound(req: object) -> float:
    """Seconds a request may wait for room: its caller's timeout (``req.timeout``) when it names a valid
    one, else the call timeout of this process (:func:`pyg_dist.timeouts.call_timeout`)."""
    from pyg_dist.timeouts import call_timeout
    t = getattr(req, "timeout", None)
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < math.inf:
        return float(t)
    return call_timeout()


class Hold:
    """Bytes admitted by a :class:`ByteBudget`; given back once by :meth:`release`, by the last of the
    tensors handed to :meth:`release_when_freed` being freed, or at ``expires`` (monotonic seconds)."""

    def __init__(self, budget: "ByteBudget", nbytes: int, expires: float):
        self.nbytes, self.expires = nbytes, expires
        self._budget, self._left, self._done = budget, 0, False

    def release(self) -> None:
        """Gives the bytes back (idempotent)."""
        self._budget._release(self)

    def release_when_freed(self, tensors: Iterable[Tensor]) -> None:
        """Releases when every one of ``tensors`` is freed (at once when there are none)."""
        tensors = list(tensors)
        with self._budget._cond:
            self._left += len(tensors)
        for t in tensors:
            weakref.finalize(t, self._one_freed).atexit = False
        if not tensors:
            self.release()

    def _one_freed(self) -> None:
        with self._budget._cond:
            self._left -= 1
            last = self._left <= 0
        if last:
            self.release()


class ByteBudget:
    """A byte semaphore for threads (RPC server threads run callees synchronously): first come, first
    served; a request larger than the whole limit is admitted alone, so nothing waits forever."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())  # finalizers may release on any thread
        self._holds: Set[Hold] = set()
        self._queue: deque = deque()

    @property
    def in_use(self) -> int:
        """Bytes admitted and not yet released (expired holds left out)."""
        with self._cond:
            self._expire(time.monotonic())
            return sum(h.nbytes for h in list(self._holds))

    def acquire(self, nbytes: int, limit: int, timeout: float, what: str = "a lookup reply") -> Hold:
        """Waits (at most ``timeout`` s) until ``nbytes`` fit beside the bytes in use under ``limit`` (or
        nothing is in use), in arrival order; returns the :class:`Hold`, which lasts at most ``timeout`` s.

        Raises:
            ServingLimitError: not admitted within ``timeout`` (names ``$PYG_DIST_SERVE_BUDGET_MB``).
        """
        ticket = object()
        start = time.monotonic()
        deadline = start + timeout
        with self._cond:
            self._queue.append(ticket)
            try:
                self._wait_turn(ticket, nbytes, limit, (deadline, timeout), what)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
            hold = Hold(self, nbytes, time.monotonic() + timeout)
            self._holds.add(hold)
            return hold

    def _wait_turn(self, ticket: object, nbytes: int, limit: int, bound: Tuple[float, float], what: str) -> None:
        deadline, timeout = bound
        while True:
            now = time.monotonic()
            self._expire(now)
            holds = list(self._holds)  # a finalizer on this thread may release one meanwhile
            used = sum(h.nbytes for h in holds)
            if self._queue[0] is ticket and (used == 0 or used + nbytes <= limit):
                return
            if now >= deadline:
                raise ServingLimitError(SERVE_BUDGET_ENV, mib(limit), f"{what} of {mib(nbytes)} found no room "
                                        f"within its timeout of {timeout:.1f}s: {mib(used)} being served, "
                                        f"{len(self._queue) - 1} other request(s) waiting")
            wake = min([deadline] + [h.expires for h in holds])
            self._cond.wait(max(0.001, wake - now))

    def _expire(self, now: float) -> None:
        for h in [h for h in self._holds if h.expires <= now]:
            h._done = True
            self._holds.discard(h)

    def _release(self, hold: Hold) -> None:
        with self._cond:
            if hold._done:
                return
            hold._done = True
            self._holds.discard(hold)
            self._cond.notify_all()


__all__ = ["REPLY_MAX_ENV", "SERVE_BUDGET_ENV", "DEFAULT_REPLY_MAX_MB", "DEFAULT_SERVE_BUDGET_MB", "reply_max_bytes",
           "serve_budget_bytes", "check_reply_size", "refuse_reply", "wait_bound", "ByteBudget", "Hold", "mib"]
