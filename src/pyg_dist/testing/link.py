"""An emulated network link, for benchmarks on one machine.

On loopback, TensorPipe copies a reply between two processes' memory (CMA): a remote feature row
costs about what a local one does, so a run on one machine cannot show what the bytes would cost on
a real network. :class:`EmulatedLink` models one process's egress link of ``gbps`` gigabits per second:
a reply waits until its bytes have crossed the link, behind the replies sent before it (first in,
first out). The wait is a sleep, as a NIC's transfer costs the CPU nothing. Latency is not modelled.

:func:`throttle_callees` puts the replies of named RPC callees on a link (the requests, which carry
ids, are not throttled: ~2 % of the bytes of a feature round).

Example:
    >>> link = EmulatedLink(8.0)           # 8 Gb/s = 1 GB/s
    >>> round(link.transmit(0), 3), link.bytes_sent
    (0.0, 0)
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from pyg_dist.errors import InvalidArgumentError


class EmulatedLink:
    """One FIFO link of ``gbps`` gigabits per second, shared by the threads of a process.

    Args:
        gbps: Link rate in gigabits per second (> 0).

    Attributes:
        bytes_sent: Bytes transmitted so far.
        waited_s: Seconds callers slept in :meth:`transmit`, summed over threads.
    """

    def __init__(self, gbps: float):
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not gbps > 0:
            raise InvalidArgumentError("EmulatedLink", "gbps", gbps, "a positive number of gigabits per second")
        self.gbps = float(gbps)
        self._bytes_per_s = self.gbps * 1e9 / 8
        self._free_at = 0.0
        self._lock = threading.Lock()
        self.bytes_sent = 0
        self.waited_s = 0.0

    def transmit(self, nbytes: int) -> float:
        """Blocks until ``nbytes`` have crossed the link after everything sent before; returns the wait (s)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgumentError("EmulatedLink.transmit", "nbytes", nbytes, "an int >= 0")
        with self._lock:
            now = time.monotonic()
            self._free_at = max(now, self._free_at) + nbytes / self._bytes_per_s
            done = self._free_at
            self.bytes_sent += nbytes
        wait = max(0.0, done - time.monotonic())
        if wait:
            time.sleep(wait)
        with self._lock:
            self.waited_s += wait
        return wait


def throttle_callees(link: EmulatedLink, names: Sequence[str]) -> None:
    """Re-registers each callee in ``names`` so that its reply waits for ``link`` before it is sent.

    Raises:
        InvalidArgumentError: a name that is not registered in this process.
    """
    from pyg_dist.rpc.callees import lookup, register_callee
    for name in names:
        register_callee(name, _throttled(link, lookup(name)), replace=True)


def _throttled(link: EmulatedLink, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    from pyg_dist.rpc import wire

    def serve(payload: Any) -> Any:
        reply = wire.pack(fn(payload))  # the bytes as they cross (packing again on the way out is a no-op)
        link.transmit(wire.nbytes(reply))
        return reply
    if hasattr(fn, "__self__"):  # a store's bound callee: its serve / stop_serving still recognise it
        serve.__self__ = fn.__self__  # type: ignore[attr-defined]
    return serve


__all__ = ["EmulatedLink", "throttle_callees"]
