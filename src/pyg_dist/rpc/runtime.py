"""RPC world lifecycle over ``torch.distributed.rpc`` (TensorPipe): init, shutdown, state.

Idempotent and bounded: ``init_rpc`` with the same context twice is a no-op; ``shutdown_rpc`` without
a world is a no-op; init after shutdown works (every member re-inits together). Every blocking step
runs under a timeout and fails with :class:`~pyg_dist.errors.RpcTimeoutError` or a
:class:`~pyg_dist.errors.PyGDistError` naming the process, never a hang. A one-partition world starts
no RPC at all: every call is answered locally.

The runtime state below is per process (a forked child does not inherit it: it sees no world).
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import socket
import threading
from typing import Any, Callable, Iterator, Optional

from ..context import AGENT_STORE_ENV, DistContext
from ..errors import (
    InvalidArgumentError,
    NotInitializedError,
    PyGDistError,
    RpcTimeoutError,
    check_positive_int,
    check_seconds,
)
from . import aio, leave
from .state import LOCK, WorldState, live_state, set_state, torch_rpc

DEFAULT_INIT_TIMEOUT = 120.0
DEFAULT_SHUTDOWN_TIMEOUT = 120.0


def _run_bounded(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Runs ``fn`` in a helper thread; raises its error, or RpcTimeoutError after ``timeout`` s."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"pyg_dist-{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RpcTimeoutError(f"{what} did not complete within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that the OS reports free (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port_free(port: int, where: str = "init_rpc") -> None:
    """Raises :class:`InvalidArgumentError` naming ``port`` if something already listens on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are fine
        sock.bind(("", port))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise InvalidArgumentError(
                where, "rpc_port", port,
                f"a free TCP port (it is in use: {exc.strerror}); choose another with "
                "DistContext(rpc_port=...) or $PYG_DIST_RPC_PORT") from None
        raise
    finally:
        sock.close()


@contextlib.contextmanager
def _without_env(var: Optional[str]) -> Iterator[None]:
    saved = os.environ.pop(var, None) if var else None
    try:
        yield
    finally:
        if var and saved is not None:
            os.environ[var] = saved


TRANSPORT_ENV = "PYG_DIST_RPC_TRANSPORTS"


def _transport_kwargs() -> dict:
    """TensorPipe transports: ``$PYG_DIST_RPC_TRANSPORTS`` (comma list, or ``default`` for TensorPipe's
    own choice), else ``uv`` (TCP). TensorPipe's default shared-memory transport busy-polls: measured
    here, an idle 2-rank world burned 35-95 % of a core per rank with it and ~0 % with ``uv``, which
    also works across machines."""
    value = os.environ.get(TRANSPORT_ENV, "uv").strip()
    if value == "default":
        return {}
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names or any(n not in ("uv", "shm", "ibv") for n in names):
        raise InvalidArgumentError("init_rpc", TRANSPORT_ENV, value, "'default' or a comma list of uv, shm, ibv")
    return {"_transports": names}


def _start_torch_rpc(ctx: DistContext, name: str, timeout: float, call_timeout: float,
                     num_threads: int) -> None:
    rpc = torch_rpc()
    if importlib.util.find_spec("numpy") is None:
        raise PyGDistError("torch RPC needs numpy importable (its init gathers objects with it); "
                           "pip install numpy")
    if ctx.hosts_rpc_store and not leave.is_hosting(ctx):
        check_port_free(leave.rpc_port(ctx))
    from pyg_dist.iface import apply_ifname

    from . import abort
    apply_ifname(ctx.master_addr)
    abort.install(name)  # a transport abort (a stray connection) prints one typed line before SIGABRT
    method = leave.init_method(ctx)
    opts = rpc.TensorPipeRpcBackendOptions(init_method=method, rpc_timeout=call_timeout,
                                           num_worker_threads=num_threads, **_transport_kwargs())
    what = (f"init_rpc of {name} (rpc rank {ctx.rpc_rank} of {ctx.rpc_world_size}) via {method}")
    # Workers inherit TORCHELASTIC_USE_AGENT_STORE from torchrun; with it a tcp:// rendezvous acts as a
    # store client only and hangs (design.md §7). Hide it while the rendezvous runs (rank 0 also
    # hosts the store itself, see leave.host_store), restore it afterwards for DDP.
    drop = AGENT_STORE_ENV if method.startswith("tcp://") else None
    try:
        if ctx.hosts_rpc_store:
            leave.host_store(ctx, timeout)
        with _without_env(drop):
            _run_bounded(lambda: rpc.init_rpc(name, rank=ctx.rpc_rank, world_size=ctx.rpc_world_size,
                                              rpc_backend_options=opts), timeout, what)
    except RpcTimeoutError as exc:
        raise RpcTimeoutError(f"{exc}; did every rank start, and is {method} reachable?") from None
    except Exception as exc:
        text = str(exc)
        if "address already in use" in text.lower() or "EADDRINUSE" in text:
            raise InvalidArgumentError("init_rpc", "rpc_port", ctx.rpc_port,
                                       f"a free TCP port ({what} failed: {text.splitlines()[0]})") from exc
        raise PyGDistError(f"{what} failed: {text}") from exc


def init_rpc(ctx: DistContext, *, timeout: float = DEFAULT_INIT_TIMEOUT,
             call_timeout: Optional[float] = None, num_threads: int = 16) -> None:
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
                _start_torch_rpc(ctx, name, timeout, call_timeout, num_threads)
        except BaseException:
            set_state(None)
            raise
        state.ready = True
    if state.uses_rpc:
        from pyg_dist.iface import log_listeners, note_listeners
        note_listeners("tensorpipe")
        log_listeners()


def _shutdown_torch_rpc(state: WorldState, graceful: bool, timeout: float) -> Optional[str]:
    rpc, ctx = torch_rpc(), state.ctx
    problem = leave.arrival_barrier(rpc, ctx, timeout) if graceful else None
    together = graceful and problem is None  # torch's own graceful path would wait for the dead
    what = f"rpc.shutdown(graceful={together}) of {state.name}"
    bound = min(timeout, 30.0)
    try:
        _run_bounded(lambda: rpc.shutdown(graceful=together, timeout=bound if together else 0),
                     3 * bound + 10.0, what)
    except RpcTimeoutError:
        raise
    except Exception as exc:  # noqa: BLE001 -- reported by the caller as a PyGDistError
        text = str(exc).strip()
        problem = f"{what} failed: {text.splitlines()[0] if text else repr(exc)}"
    if together:
        problem = leave.report_left_or_linger(ctx, bound) or problem
    return problem


def shutdown_rpc(graceful: bool = True, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
    """Leaves the RPC world and stops the background loop (idempotent; no-op without a world).

    ``graceful=True`` first waits until every member has entered ``shutdown_rpc`` (so nobody tears
    down a server that a peer still calls), then shuts torch RPC down together. It waits up to
    ``timeout`` seconds for late but live members; a dead member is detected within about a second.
    Use ``graceful=False`` after a failure (local shutdown, no waiting). The local state is released
    in every case, so ``init_rpc`` works again afterwards.

    Raises:
        PyGDistError: the graceful shutdown failed (a member died or did not arrive in time);
            local RPC was still shut down.
        RpcTimeoutError: torch's shutdown itself hung past its bound (process state is then unknown).
    """
    timeout = check_seconds("shutdown_rpc", "timeout", timeout)
    with LOCK:
        state = live_state()
        if state is None:
            return
        state.ready, state.leaving = False, True  # callees still running keep their context
        problem: Optional[str] = None
        try:
            if state.uses_rpc:
                problem = _shutdown_torch_rpc(state, graceful, timeout)
        finally:
            set_state(None)
            aio.stop_loop()
    if problem is not None:
        raise PyGDistError(f"graceful RPC shutdown of {state.name} failed; local RPC was shut down: {problem}")


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
