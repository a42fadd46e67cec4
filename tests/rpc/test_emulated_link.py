"""The emulated NIC of the benchmarks (pyg_dist.testing.link): FIFO wire time, throttled callees."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.rpc.callees import lookup, register_callee, unregister_callee
from pyg_dist.testing.link import EmulatedLink, throttle_callees


def _two_transmissions(link):
    """Two 5 MB transmissions from two threads released together: ``[(end, start, wait)]``, first ended first."""
    spans, gate = [], threading.Barrier(2)

    def send():
        gate.wait(10)
        start = time.monotonic()
        wait = link.transmit(5_000_000)
        spans.append((time.monotonic(), start, wait))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(spans)


def test_transmissions_queue_behind_each_other():
    """Two 5 MB replies on a 0.8 Gb/s link (1e8 B/s, 0.05 s each) from two threads: the one that asks while the
    other is on the wire ends one transmission after it, 0.1 s after the first ask."""
    for _ in range(5):  # a loaded machine may start the second thread after the first ended: no queue to test
        link = EmulatedLink(0.8)
        (e1, s1, w1), (e2, s2, w2) = _two_transmissions(link)
        if max(s1, s2) < e1 - 0.01:
            break
    else:
        pytest.fail("the two transmissions never overlapped in 5 tries")
    assert link.bytes_sent == 10_000_000
    assert w1 >= 0.049 and e2 - e1 >= 0.049 and e2 - min(s1, s2) >= 0.099
    assert w2 >= e1 - s2 and link.waited_s == pytest.approx(w1 + w2)
    assert link.transmit(0) == 0.0  # nothing queued any more: no wait


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
