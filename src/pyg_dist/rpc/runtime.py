"""RPC world lifecycle: init, shutdown, state, over one transport (:mod:`.transport`: ``sockets`` or ``tensorpipe``),
in the order :mod:`.lifecycle` writes down.

Idempotent and bounded: ``init_rpc`` with the same context twice is a no-op; ``shutdown_rpc`` without
a world is a no-op; init after shutdown works (every member re-inits together). Every blocking step
runs under a timeout and fails with :class:`~pyg_dist.errors.RpcTimeoutError` or a
:class:`~pyg_dist.errors.PyGDistError` naming the process, never a hang. A one-partition world starts
no RPC at all: every call is answered locally.

The runtime state below is per process (a forked child does not inherit it: it sees no world).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from ..context import DistContext
from ..errors import InvalidArgumentError, NotInitializedError, PyGDistError, check_positive_int, check_seconds
from . import aio, lifecycle, settings, verdict
from .state import LOCK, WorldState, live_state, set_state
from .transport import Transport

DEFAULT_INIT_TIMEOUT = 120.0
DEFAULT_SHUTDOWN_TIMEOUT = 120.0


def _create(kind: str, wire: str) -> Transport:
    """A fresh transport of kind ``kind`` (see :data:`pyg_dist.rpc.settings.TRANSPORTS`), imported on first use;
    ``wire``: the ``sockets`` transport's frame protection (:mod:`.sockets.seal`; TensorPipe has none)."""
    if kind == "tensorpipe":
        from .tensorpipe import TensorPipeTransport
        return TensorPipeTransport()
    from .sockets import SocketTransport
    return SocketTransport(wire)


def init_rpc(ctx: DistContext, *, timeout: float = DEFAULT_INIT_TIMEOUT,
             call_timeout: Optional[float] = None, num_threads: int = 16, transport: Optional[str] = None,
             wire_protection: Optional[str] = None) -> None:
    """Joins this process to the RPC world described by ``ctx`` (idempotent).

    Register callees (:func:`~pyg_dist.rpc.register_callee`) before calling this: peers may call as
    soon as the rendezvous completes. Every member of the world must call it.

    Args:
        ctx: This process's context; must join RPC (a trainer with ``num_workers=0``, or
            ``ctx.for_worker(i)`` in a sampler worker).
        timeout: Seconds for the whole rendezvous (all members must arrive).
        call_timeout: Default timeout of each remote call (default: the failure bound,
            :func:`pyg_dist.timeouts.call_timeout`).
        num_threads: RPC server threads serving callees in this process.
        transport: ``"sockets"`` or ``"tensorpipe"`` (default: ``$PYG_DIST_TRANSPORT``, else ``"sockets"``;
            see :mod:`pyg_dist.rpc.settings`). Every member of a world must use the same one.
        wire_protection: What the ``sockets`` transport does to every frame: ``"integrity"``, ``"encrypt"`` or
            ``"off"`` (default: ``$PYG_DIST_WIRE_PROTECTION``, else ``"integrity"``; :mod:`pyg_dist.rpc.sockets.seal`).
            Every member of a world must use the same one.

    Raises:
        InvalidArgumentError: a bad argument, a different context already initialised, or
            ``rpc_port`` in use.
        RpcTimeoutError: the rendezvous did not complete within ``timeout``.

    Example:
        >>> from pyg_dist.context import DistContext
        >>> init_rpc(DistContext(rank=0, world_size=1, num_partitions=1))  # one partition: no RPC
        >>> is_initialized()
        True
        >>> shutdown_rpc()
    """
    where = "init_rpc"
    if not isinstance(ctx, DistContext):
        raise InvalidArgumentError(where, "ctx", ctx, "a pyg_dist.context.DistContext")
    timeout = check_seconds(where, "timeout", timeout)
    if call_timeout is None:
        from pyg_dist.timeouts import call_timeout as bound
        call_timeout = bound()
    call_timeout = check_seconds(where, "call_timeout", call_timeout)
    check_positive_int(where, "num_threads", num_threads)
    kind = settings.transport_name(transport)
    wire = settings.wire_mode(wire_protection)
    rpc_rank = ctx.rpc_rank
    if rpc_rank is None:  # a trainer whose sampler workers join RPC instead (not ctx.joins_rpc)
        raise InvalidArgumentError(where, "ctx", ctx, "a context that joins RPC: num_workers=0, or "
                                   "ctx.for_worker(i) inside sampler worker i")
    with LOCK:
        state = live_state()
        if state is not None:
            if state.ctx == ctx:
                return
            raise InvalidArgumentError(where, "ctx", ctx, f"the context RPC already runs with ({state.name}); "
                                       "call shutdown_rpc() first")
        name = ctx.worker_name(rpc_rank)
        state = WorldState(ctx, name, os.getpid(), uses_rpc=ctx.num_partitions > 1, call_timeout=call_timeout)
        set_state(state)  # visible to callees that run while the rendezvous completes
        try:
            if state.uses_rpc:
                state.transport = _create(kind, wire)
                lifecycle.enter_world(state.transport, ctx, name, timeout, call_timeout, num_threads)
        except BaseException:
            verdict.publish_in_flight()  # members still waiting in the rendezvous read why this one will not come
            set_state(None)
            raise
        state.ready = True
    if state.uses_rpc:
        from pyg_dist.iface import log_listeners, note_listeners
        note_listeners(kind)
        log_listeners()


def shutdown_rpc(graceful: bool = True, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
    """Leaves the RPC world and stops the background loop (idempotent; no-op without a world).

    ``graceful=True`` first waits until every member has entered ``shutdown_rpc`` (so nobody tears
    down a server that a peer still calls), then shuts the transport down together. It waits up to
    ``timeout`` seconds for late but live members; a dead member is detected within about a second.
    Use ``graceful=False`` after a failure (local shutdown, no waiting). The local state is released
    in every case, so ``init_rpc`` works again afterwards.

    Raises:
        PyGDistError: the graceful shutdown failed (a member died or did not arrive in time);
            local RPC was still shut down.
        RpcTimeoutError: the transport's shutdown itself hung past its bound (process state is then unknown).
    """
    timeout = check_seconds("shutdown_rpc", "timeout", timeout)
    if not graceful:  # leaving after a failure: peers see this member gone next, so its line goes first
        verdict.publish_in_flight()
    with LOCK:
        state = live_state()
        if state is None:
            return
        state.ready, state.leaving = False, True  # callees still running keep their context
        problem: Optional[str] = None
        try:
            if state.transport is not None:
                problem = lifecycle.leave_world(state.transport, state.ctx, graceful, timeout)
        finally:
            set_state(None)
            aio.stop_loop()
    if problem is not None:
        raise PyGDistError(f"graceful RPC shutdown of {state.name} failed; local RPC was shut down: {problem}")


def barrier(timeout: Optional[float] = None) -> None:
    """Returns when every member of the RPC world has called it (PyG's ``global_barrier``); ``timeout``: seconds,
    default the per-call bound. A one-partition world returns at once.

    Raises:
        NotInitializedError: no RPC world in this process.
        PyGDistError: a member did not arrive in time (names this member).
    """
    state = live_state()
    if state is None or not state.ready:
        raise NotInitializedError("barrier: pyg_dist RPC is not initialised in this process; call init_rpc first")
    if state.transport is None:  # one partition: nobody to wait for
        return
    seconds = state.call_timeout if timeout is None else check_seconds("barrier", "timeout", timeout)
    try:
        state.transport.barrier(seconds)
    except Exception as exc:  # noqa: BLE001 -- re-raised typed, naming this member
        raise PyGDistError(f"barrier of {state.name} failed: {exc}") from exc


def is_initialized() -> bool:
    """True when this process has completed :func:`init_rpc` and not shut down."""
    state = live_state()
    return state is not None and state.ready


def current_context() -> DistContext:
    """The context RPC was initialised with in this process (callees use it to know their partition)."""
    state = live_state()
    if state is None:
        raise NotInitializedError("pyg_dist RPC is not initialised in this process; call "
                                  "pyg_dist.rpc.init_rpc(ctx) first")
    return state.ctx


@contextlib.contextmanager
def rpc_session(ctx: DistContext, *, timeout: float = DEFAULT_INIT_TIMEOUT,
                call_timeout: Optional[float] = None,
                shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> Iterator[DistContext]:
    """``init_rpc`` on entry; on exit a graceful shutdown, or a local one if the body raised.

    Example:
        >>> from pyg_dist.context import DistContext
        >>> with rpc_session(DistContext(rank=0, world_size=1, num_partitions=1)) as ctx:
        ...     ctx.partition
        0
    """
    init_rpc(ctx, timeout=timeout, call_timeout=call_timeout)
    ok = False
    try:
        yield ctx
        ok = True
    finally:
        shutdown_rpc(graceful=ok, timeout=shutdown_timeout)
