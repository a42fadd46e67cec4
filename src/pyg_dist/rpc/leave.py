"""How a member leaves an RPC world without hanging and without tripping up the others.

Three pieces, run in this order by :func:`pyg_dist.rpc.lifecycle.leave_world`:

1. **Arrival barrier** (over the transport): wait until every member has entered ``shutdown_rpc``, so nobody
   tears down a server that a peer still calls. Late live members are waited for; a dead member
   resets its connection and fails the barrier at the next poll (about a second).
2. **The transport's graceful shutdown**, now quick since everybody is there.
3. **Store host lingers** (``tcp://`` worlds): RPC rank 0 hosts the rendezvous store that torch's shutdown (or
   the ``sockets`` transport's leave count) still uses; it waits until every other member reports "left" in that
   store before returning, so a fast-exiting rank 0 cannot break the others' shutdown ("connection reset").

The rendezvous store these use is :mod:`.join`'s.
"""
from __future__ import annotations

import time
from typing import Optional

from ..context import DistContext
from . import join
from .state import live_state

_LEFT_KEY = "pyg_dist/rpc_left"


def has_arrived() -> bool:
    """Runs on a peer (shipped by reference): has that process entered ``shutdown_rpc``?"""
    state = live_state()
    return state is not None and state.leaving


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "timeout" in text or "timed out" in text


def arrival_barrier(transport, ctx: DistContext, timeout: float) -> Optional[str]:
    """Waits until every member entered ``shutdown_rpc``; returns None, or what went wrong.

    A transport whose ``arrival_counter()`` gives a store and a key (the sockets transport) counts arrivals in the
    store, one operation per look, and asks only the members it called directly (a dead one is named at once;
    nobody dials a member it never called just to leave); if the store stops answering (its host left after its
    own failure), every member is asked once, so the dead are named. Otherwise every member is asked through
    ``transport.ping`` until it arrived."""
    deadline = time.monotonic() + timeout
    everyone = [r for r in range(ctx.rpc_world_size) if r != ctx.rpc_rank]
    counted = transport.arrival_counter()
    if counted is None:
        return _ping_until_arrived(transport, ctx, everyone, deadline, timeout)
    store, key, connected = counted
    try:
        return _count_arrivals(transport, ctx, store, key, [r for r in connected if r != ctx.rpc_rank], deadline,
                               timeout)
    except Exception as exc:  # noqa: BLE001 -- the store's host is gone: who else is?
        _, lost = _ping_round(transport, ctx, everyone, min(deadline, time.monotonic() + 10.0))
        return _lost(lost) if lost else f"the store stopped answering before every member arrived ({exc})"


def _lost(lines: list) -> str:
    return "unreachable members (dead, or shut down after their own failure): " + "; ".join(lines)


def _ping_until_arrived(transport, ctx: DistContext, pending: list, deadline: float, timeout: float) -> Optional[str]:
    """Asks ``pending`` until each has arrived, with back-off; None, or what went wrong."""
    delay = 0.02
    while pending:
        pending, lost = _ping_round(transport, ctx, pending, deadline)
        if lost:
            return _lost(lost)
        if pending and time.monotonic() > deadline:
            return f"members with rpc ranks {pending} did not reach shutdown_rpc within {timeout:g} s"
        if pending:
            time.sleep(delay)
            delay = min(2 * delay, 1.0)
    return None


def _count_arrivals(transport, ctx: DistContext, store, key: str, called: list, deadline: float,
                    timeout: float) -> Optional[str]:
    """Adds this member to the store's count and waits for the world's; the ``called`` members are asked directly
    too (a dead one is named at once). A store error propagates."""
    store.add(key, 1)
    delay = 0.01
    while True:
        arrived = int(store.add(key, 0))
        if arrived >= ctx.rpc_world_size:
            return None
        if called:
            called, lost = _ping_round(transport, ctx, called, deadline)
            if lost:
                return _lost(lost)
        if time.monotonic() > deadline:
            return (f"{ctx.rpc_world_size - arrived} of {ctx.rpc_world_size} members did not reach shutdown_rpc within "
                    f"{timeout:g} s" + (f" (among them rpc ranks {called})" if called else ""))
        time.sleep(delay)
        delay = min(2 * delay, 0.25)


def _ping_round(transport, ctx: DistContext, pending: list, deadline: float):
    """Asks each of ``pending`` once whether it arrived: ``(still late, lost members' lines)``."""
    ping = max(1.0, min(10.0, deadline - time.monotonic()))
    futs = {r: transport.ping(r, ping) for r in pending}
    late, lost = [], []
    for r, fut in futs.items():
        try:
            arrived = fut.wait()
        except Exception as exc:  # noqa: BLE001 -- classified: timeout = busy, else = gone
            if not _is_timeout(exc):
                text = str(exc).strip()
                lost.append(f"{ctx.worker_name(r)} (rpc rank {r}): {text.splitlines()[0] if text else exc!r}")
            arrived = False
        if not arrived:
            late.append(r)
    return late, lost


def report_left_or_linger(ctx: DistContext, timeout: float) -> Optional[str]:
    """After a graceful shutdown of a ``tcp://`` world: members report "left"; the host waits for all.

    Returns None, or what went wrong.
    """
    if not ctx.rpc_init_method.startswith("tcp://") or ctx.rpc_world_size == 1:
        return None  # env:// worlds: torchrun's agent owns the store and outlives every rank
    try:
        if not ctx.hosts_rpc_store:
            join.client_store(ctx, timeout).add(_LEFT_KEY, 1)
            return None
        store = join.hosted_store(ctx)
        deadline = time.monotonic() + timeout
        while store.add(_LEFT_KEY, 0) < ctx.rpc_world_size - 1:
            if time.monotonic() > deadline:
                return f"not every member confirmed leaving within {timeout:g} s"
            time.sleep(0.02)
        store.delete_key(_LEFT_KEY)  # the next world on this port counts from zero
        return None
    except Exception as exc:  # noqa: BLE001 -- reported by shutdown_rpc as a PyGDistError
        return f"leave handshake through the store at {ctx.master_addr}:{ctx.rpc_port} failed: {exc}"
