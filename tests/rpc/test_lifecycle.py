"""The transport seam and the order every transport joins and leaves in (:mod:`pyg_dist.rpc.lifecycle`).

Oracles: the events a recording transport sees, in order; the typed error for a port in use, raised before the
transport is asked to join; the import graph (no caller outside ``rpc/`` reaches into a transport)."""
from __future__ import annotations

import socket

import pytest
import torch

from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.rpc import leave, lifecycle
from pyg_dist.rpc.transport import Transport


class Store:
    def __init__(self, count=0):
        self.count = count

    def add(self, key, n):
        self.count += n
        return self.count


class Recording(Transport):
    """Every seam call lands in ``events``; pings answer ``arrived`` or fail for ``dead`` ranks."""

    name = "recording"

    def __init__(self, events, store=None, dead=()):
        self.events, self.store, self.dead = events, store, set(dead)

    def join(self, ctx, name, timeout, call_timeout, num_threads):
        self.events.append(("join", name))

    def call(self, rank, op, payload, partitioning, timeout):
        raise AssertionError("no call in these tests")

    def ping(self, rank, timeout):
        self.events.append(("ping", rank))
        fut = torch.futures.Future()
        if rank in self.dead:
            fut.set_exception(ConnectionRefusedError(f"rank {rank}: [Errno 111] refused"))
        else:
            fut.set_result(True)
        return fut

    def barrier(self, timeout):
        self.events.append(("barrier", timeout))

    def arrival_counter(self):
        return (self.store, "ns/arrived", [1]) if self.store is not None else None

    def leave(self, together, bound):
        self.events.append(("leave", together, bound))
        return None


def _ctx(world=3, **kw):
    return DistContext(rank=0, world_size=world, num_partitions=world, **kw)


@pytest.fixture
def linger(monkeypatch):
    seen = []
    monkeypatch.setattr(leave, "report_left_or_linger", lambda ctx, bound: seen.append(("linger", bound)))
    return seen


def test_the_seam_is_abstract():
    with pytest.raises(TypeError):
        Transport()  # type: ignore[abstract]

    class NoLeave(Transport):
        def join(self, *a): ...
        def call(self, *a): ...
        def ping(self, *a): ...
        def barrier(self, *a): ...

    with pytest.raises(TypeError, match="leave"):
        NoLeave()  # type: ignore[abstract]


def test_a_graceful_leave_is_barrier_then_teardown_then_linger(linger):
    events = []
    t = Recording(events, store=Store(count=2))  # the other two members already counted themselves
    assert lifecycle.leave_world(t, _ctx(), graceful=True, timeout=120.0) is None
    assert t.store.count == 3                     # this member counted itself in
    assert events == [("leave", True, 30.0)]      # everyone arrived: nobody to ping, then the teardown
    assert linger == [("linger", 30.0)]


def test_a_leave_without_a_counter_pings_everyone_before_the_teardown(linger):
    events = []
    assert lifecycle.leave_world(Recording(events), _ctx(world=3), graceful=True, timeout=5.0) is None
    assert events == [("ping", 1), ("ping", 2), ("leave", True, 5.0)]
    assert linger == [("linger", 5.0)]


def test_a_dead_member_makes_the_teardown_local_and_is_named(linger):
    events = []
    problem = lifecycle.leave_world(Recording(events, dead=[2]), _ctx(world=3), graceful=True, timeout=5.0)
    assert "rpc rank 2" in problem and "refused" in problem
    assert events[-1] == ("leave", False, 5.0)    # alone: not together with a world that lost a member
    assert linger == []


def test_leaving_after_a_failure_only_tears_down(linger):
    events = []
    assert lifecycle.leave_world(Recording(events, store=Store()), _ctx(), graceful=False, timeout=120.0) is None
    assert events == [("leave", False, 30.0)]
    assert linger == []


def test_a_store_port_in_use_is_named_before_the_transport_joins():
    busy = socket.socket()
    busy.bind(("", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        events = []
        with pytest.raises(InvalidArgumentError, match=f"rpc_port.*{port}"):
            lifecycle.enter_world(Recording(events), _ctx(world=2, rpc_port=port), "trainer_0", 5.0, 5.0, 2)
        assert events == []
    finally:
        busy.close()


def test_a_free_store_port_lets_the_transport_join():
    events = []
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    lifecycle.enter_world(Recording(events), _ctx(world=2, rpc_port=port), "trainer_0", 5.0, 5.0, 2)
    assert events == [("join", "trainer_0")]


def test_no_module_outside_rpc_reaches_into_a_transport_or_the_world_state():
    from pyg_dist.testing.house import imports

    inner = ("pyg_dist.rpc.sockets", "pyg_dist.rpc.tensorpipe", "pyg_dist.rpc.state", "pyg_dist.rpc.join",
             "pyg_dist.rpc.leave", "pyg_dist.rpc.lifecycle", "pyg_dist.rpc.transport")
    reach = {(m, d) for m, deps in imports().items() if not m.startswith("pyg_dist.rpc")
             for d in deps if d.startswith(inner)}
    assert reach == set()
