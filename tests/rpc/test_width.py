"""What waiting costs as a world grows: looking for a failure line is one store operation while nobody failed, and
the sockets transport's shutdown asks only the members a process called (counting everyone's arrival in the
store); a failure line published is still found, and a dead member that was called is still named at once."""
from __future__ import annotations

import os

import torch

from pyg_dist.context import DistContext
from pyg_dist.rpc import leave, verdict


class CountingStore:
    """A dict store that counts its operations."""

    def __init__(self):
        self.data, self.ops = {}, 0

    def set(self, key, value):
        self.ops += 1
        self.data[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key):
        self.ops += 1
        return self.data[key]

    def check(self, keys):
        self.ops += 1
        return all(k in self.data for k in keys)

    def add(self, key, n):
        self.ops += 1
        value = int(self.data.get(key, b"0")) + n
        self.data[key] = str(value).encode()
        return value


def test_looking_for_a_failure_line_costs_one_operation_until_one_is_published(monkeypatch):
    store = CountingStore()
    monkeypatch.setitem(verdict._STORES, os.getpid(), store)
    monkeypatch.setattr(verdict, "_MINE", {})
    assert verdict.any_said(64, 0) is None and store.ops == 1
    monkeypatch.setenv("RANK", "17")
    assert verdict.publish("[rank 17] ValueError: bad input") is True
    monkeypatch.setenv("RANK", "0")
    found = verdict.any_said(64, 0)
    assert found == "peer rank 17 failed: ValueError: bad input"


class FakeTransport:
    """Pings answer from ``arrived``; ``dead`` members raise like a refused connection; arrivals count in a
    :class:`CountingStore`."""

    def __init__(self, world, called, arrived=(), dead=()):
        self.store, self.world, self.called = CountingStore(), world, list(called)
        self.arrived, self.dead, self.pinged = set(arrived), set(dead), []

    def arrival_counter(self):
        return self.store, "ns/arrived", self.called

    def ping(self, rank, timeout):
        self.pinged.append(rank)
        fut = torch.futures.Future()
        if rank in self.dead:
            fut.set_exception(ConnectionRefusedError(f"cannot connect to rank {rank}: [Errno 111] refused"))
        else:
            fut.set_result(rank in self.arrived)
        return fut


def _ctx(world):
    return DistContext(rank=0, world_size=world, num_partitions=world)


def test_leaving_asks_only_the_members_it_called():
    world = 64
    t = FakeTransport(world, called=[3, 9], arrived=[3, 9])
    t.store.add("ns/arrived", world - 1)  # everyone else already counted themselves
    assert leave.arrival_barrier(t, _ctx(world), timeout=5.0) is None
    assert set(t.pinged) <= {3, 9} and int(t.store.data["ns/arrived"]) == world


def test_a_dead_member_that_was_called_is_named_at_once():
    t = FakeTransport(8, called=[5], dead=[5])
    problem = leave.arrival_barrier(t, _ctx(8), timeout=30.0)
    assert problem.startswith("unreachable members") and "rpc rank 5" in problem


def test_members_that_never_arrive_are_counted_in_the_bound():
    t = FakeTransport(4, called=[])
    problem = leave.arrival_barrier(t, _ctx(4), timeout=0.3)
    assert problem == "3 of 4 members did not reach shutdown_rpc within 0.3 s" and t.pinged == []


def test_a_store_gone_mid_barrier_still_names_the_dead_member():
    """The store's host left after finding a dead member itself: everyone is asked once, the dead one named."""
    class GoneStore(CountingStore):
        def add(self, key, n):
            raise RuntimeError("Failed to recv, got 0 bytes")

    t = FakeTransport(3, called=[], dead=[0, 1])
    t.store = GoneStore()
    problem = leave.arrival_barrier(t, DistContext(rank=2, world_size=3, num_partitions=3), timeout=30.0)
    assert problem.startswith("unreachable members") and "rpc rank 1" in problem and sorted(t.pinged) == [0, 1]
