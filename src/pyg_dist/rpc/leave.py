"""How a member leaves an RPC world without hanging and without tripping up the others.

Three pieces, used by :func:`pyg_dist.rpc.shutdown_rpc`:

1. **Arrival barrier** (over the transport): wait until every member has entered ``shutdown_rpc``, so nobody
   tears down a server that a peer still calls. Late live members are waited for; a dead member
   resets its connection and fails the barrier at the next poll (about a second).
2. **The transport's graceful shutdown**, now quick since everybody is there.
3. **Store host lingers** (``tcp://`` worlds): RPC rank 0 hosts the rendezvous store that torch's shutdown (or
   the ``sockets`` transport's leave count) still uses; it waits until every other member reports "left" in that
   store before returning, so a fast-exiting rank 0 cannot break the others' shutdown ("connection reset").

The store server on ``rpc_port`` is created and owned here (torch's rendezvous reuses it: it is a
multi-tenant ``TCPStore``), so it lives as long as the process and re-initialising on the same port
works.
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple

from ..context import DistContext
from ..group import attempt_store
from ..iface import listening_socket, note_listeners
from .state import live_state

_LEFT_KEY = "pyg_dist/rpc_left"
# (pid, port) -> the TCPStore server this process hosts for RPC rendezvous on that port.
_HOSTED: Dict[Tuple[int, int], Any] = {}


def rpc_port(ctx: DistContext) -> int:
    """``ctx.rpc_port``, never ``None`` once the context is built (its ``__post_init__`` resolves it)."""
    assert ctx.rpc_port is not None
    return ctx.rpc_port


def _new_store(ctx: DistContext, is_master: bool, timeout: float):
    """The rendezvous store on ``master_addr:rpc_port``; its server (``is_master``) listens on
    ``master_addr``'s interface only (returns ``(store, socket)`` then, the socket kept open with it)."""
    import torch.distributed as dist

    sock = listening_socket(ctx.master_addr, rpc_port(ctx)) if is_master else None
    store = dist.TCPStore(ctx.master_addr, rpc_port(ctx), None, is_master=is_master,
                          timeout=timedelta(seconds=timeout), wait_for_workers=False, multi_tenant=True,
                          master_listen_fd=sock.fileno() if sock is not None else None)
    return (store, sock) if is_master else store


def is_hosting(ctx: DistContext) -> bool:
    """True when this process already hosts the store server on ``ctx.rpc_port``."""
    return (os.getpid(), rpc_port(ctx)) in _HOSTED


#: Scheme of the trainer world's rendezvous under torchrun: torchrun's agent store, one key space per attempt.
ATTEMPT_SCHEME = "pygdistattempt"


def _attempt_rendezvous(url: str, timeout: timedelta = timedelta(seconds=300), **_):
    """``env://`` through :func:`attempt_store` (torch RPC's rendezvous handler for trainer worlds)."""
    from urllib.parse import parse_qs, urlparse

    query = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    rank, world_size = int(query["rank"]), int(query["world_size"])
    yield attempt_store(world_size, timeout), rank, world_size
    raise RuntimeError("pyg_dist's torchrun rendezvous cannot re-rendezvous")  # like torch's own handlers


def init_method(ctx: DistContext) -> str:
    """The ``init_method`` torch RPC gets: ``ctx.rpc_init_method``, with ``env://`` (a trainer world under
    torchrun) made per attempt (:func:`_attempt_rendezvous`)."""
    method = ctx.rpc_init_method
    if method != "env://":
        return method
    import importlib
    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module (the package exports a function)
    try:
        rdzv.register_rendezvous_handler(ATTEMPT_SCHEME, _attempt_rendezvous)
    except RuntimeError:  # registered by an earlier init in this process
        pass
    return f"{ATTEMPT_SCHEME}://"


def host_store(ctx: DistContext, timeout: float) -> None:
    """Starts (once per process and port) the rendezvous store server that torch's init reuses."""
    key = (os.getpid(), rpc_port(ctx))
    if key not in _HOSTED:
        _HOSTED[key] = _new_store(ctx, True, timeout)
        note_listeners("rpc store")


def rendezvous_store(ctx: DistContext, timeout: float):
    """The store a world's members meet in (the ``sockets`` transport publishes its listeners there): torchrun's
    agent store, per attempt, for an ``env://`` world; else the store on ``master_addr:rpc_port`` (hosted here
    by RPC rank 0)."""
    if ctx.rpc_init_method == "env://":
        return attempt_store(ctx.rpc_world_size, timedelta(seconds=timeout), prefix="rpc")
    if ctx.hosts_rpc_store:
        host_store(ctx, timeout)
        return _HOSTED[(os.getpid(), rpc_port(ctx))][0]
    return _new_store(ctx, False, timeout)


def has_arrived() -> bool:
    """Runs on a peer (shipped by reference): has that process entered ``shutdown_rpc``?"""
    state = live_state()
    return state is not None and state.leaving


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "timeout" in text or "timed out" in text


def arrival_barrier(transport, ctx: DistContext, timeout: float) -> Optional[str]:
    """Waits until every member entered ``shutdown_rpc``; returns None, or what went wrong.

    A transport with an ``arrival_counter()`` (the sockets transport: its store and a key) counts arrivals in the
    store, one operation per look, and asks only the members it called directly (a dead one is named at once;
    nobody dials a member it never called just to leave); if the store stops answering (its host left after its
    own failure), every member is asked once, so the dead are named. Otherwise every member is asked through
    ``transport.ping`` until it arrived."""
    deadline = time.monotonic() + timeout
    everyone = [r for r in range(ctx.rpc_world_size) if r != ctx.rpc_rank]
    counter = getattr(transport, "arrival_counter", None)
    if counter is None:
        return _ping_until_arrived(transport, ctx, everyone, deadline, timeout)
    store, key, connected = counter()
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
            _new_store(ctx, False, timeout).add(_LEFT_KEY, 1)
            return None
        store, _ = _HOSTED[(os.getpid(), rpc_port(ctx))]
        deadline = time.monotonic() + timeout
        while store.add(_LEFT_KEY, 0) < ctx.rpc_world_size - 1:
            if time.monotonic() > deadline:
                return f"not every member confirmed leaving within {timeout:g} s"
            time.sleep(0.02)
        store.delete_key(_LEFT_KEY)  # the next world on this port counts from zero
        return None
    except Exception as exc:  # noqa: BLE001 -- reported by shutdown_rpc as a PyGDistError
        return f"leave handshake through the store at {ctx.master_addr}:{ctx.rpc_port} failed: {exc}"
