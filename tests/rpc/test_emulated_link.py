"""The emulated NIC of the benchmarks (pyg_dist.testing.link): FIFO wire time, throttled callees."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.rpc.callees import lookup, register_callee, unregister_callee
from pyg_dist.testing.link import EmulatedLink, throttle_callees


class _Clock:
    """A clock that moves only when told (``sleep`` records, never waits)."""

    def __init__(self, now=100.0):
        self.now, self.slept = now, []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)


def test_transmissions_queue_behind_each_other(monkeypatch):
    """Two 5 MB replies on a 0.8 Gb/s link (1e8 B/s: 0.05 s each) asked for at the same instant: the first waits
    its own 0.05 s, the second the first's too, 0.1 s; once the wire is free again nothing waits."""
    from pyg_dist.testing import link as link_module
    clock = _Clock()
    monkeypatch.setattr(link_module, "time", clock)
    link = EmulatedLink(0.8)
    assert link.transmit(5_000_000) == pytest.approx(0.05)
    assert link.transmit(5_000_000) == pytest.approx(0.1)
    assert clock.slept == pytest.approx([0.05, 0.1]) and link.waited_s == pytest.approx(0.15)
    clock.now += 0.04  # 0.06 s of the queue left: a 1 MB reply (0.01 s) ends behind it
    assert link.transmit(1_000_000) == pytest.approx(0.07)
    clock.now += 1.0
    assert link.transmit(0) == 0.0 and link.bytes_sent == 11_000_000


def test_threads_share_one_queue():
    """The same from two real threads released together: whichever asked last ends 0.1 s after the first ask
    (the wire is one queue under a lock), and the waits add up."""
    link, ends, gate = EmulatedLink(0.8), [], threading.Barrier(2)

    def send():
        gate.wait(10)
        asked = time.monotonic()
        wait = link.transmit(5_000_000)
        ends.append((asked, wait, time.monotonic()))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first_ask = min(a for a, _, _ in ends)
    assert max(e for _, _, e in ends) - first_ask >= 0.099  # a link without the queue: about 0.05
    assert link.bytes_sent == 10_000_000 and link.waited_s == pytest.approx(sum(w for _, w, _ in ends))


@pytest.mark.parametrize("gbps", [0, -1.0, "10", True, float("nan")])
def test_link_rate_must_be_positive(gbps):
    with pytest.raises(InvalidArgumentError, match="gbps"):
        EmulatedLink(gbps)


@pytest.mark.parametrize("nbytes", [-1, 1.5, None])
def test_transmit_takes_a_byte_count(nbytes):
    with pytest.raises(InvalidArgumentError, match="nbytes"):
        EmulatedLink(1.0).transmit(nbytes)


class _Server:
    def answer(self, payload):
        return {"rows": torch.ones(250_000) * payload}  # 1 MB of float32


def test_throttled_callee_answers_the_same_after_its_wire_time():
    server = _Server()
    register_callee("test_link.answer", server.answer, replace=True)
    try:
        link = EmulatedLink(0.08)  # 1e7 B/s: 1 MB takes 0.1 s
        throttle_callees(link, ["test_link.answer"])
        fn = lookup("test_link.answer")
        assert fn is not server.answer and fn.__self__ is server  # a store still recognises its callee
        t0 = time.monotonic()
        reply = fn(3.0)
        assert time.monotonic() - t0 >= 0.099
        assert torch.equal(reply["rows"], torch.full((250_000,), 3.0)) and link.bytes_sent == 1_000_000
        with pytest.raises(InvalidArgumentError, match="op"):
            throttle_callees(link, ["test_link.not_registered"])
    finally:
        unregister_callee("test_link.answer")
