"""The ``tensorpipe`` transport: ``torch.distributed.rpc`` over TensorPipe, behind the seam (:mod:`.transport`).

Kept selectable (``PYG_DIST_TRANSPORT=tensorpipe``) and tested. What it cannot do, by design upstream: it has
no authentication, it unpickles what reaches it, and its listener aborts the process on junk (an unbounded
length read from the wire; :mod:`.abort` makes that death legible). Firewall its ports.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from typing import Any, Iterator, List, Optional

import torch

from ..context import AGENT_STORE_ENV, DistContext
from ..errors import PEER_GONE, InvalidArgumentError, PyGDistError, RpcTimeoutError
from . import callees, leave, verdict
from .state import torch_rpc
from .transport import Transport, check_port_free, run_bounded

TP_TRANSPORTS_ENV = "PYG_DIST_TENSORPIPE_TRANSPORTS"
#: The old name of :data:`TP_TRANSPORTS_ENV`, still read (with a ``DeprecationWarning``) when the new one is unset:
#: it read like ``PYG_DIST_TRANSPORT``, which picks pyg_dist's RPC transport, not TensorPipe's.
TP_TRANSPORTS_OLD_ENV = "PYG_DIST_RPC_TRANSPORTS"
#: What torch prints, once per rank, from inside ``torch.distributed.rpc.init_rpc`` with a fixed world size: its
#: start-up (``rpc.backend_registry``) exchanges the device maps by ``all_gather_object`` over a bare
#: ``ProcessGroupGloo`` backend it builds itself, and ``all_gather_object`` calls that deprecated. The call is
#: torch's own (pyg_dist's collectives pass process groups), so only this message is ignored, while init_rpc runs.
TORCH_RPC_INIT_WARNING = r"You are using a Backend .* as a ProcessGroup"


def _remote_serve(op: str, payload: Any, partitioning: Optional[str] = None) -> callees.CallReply:
    """Runs on the serving process (shipped by reference through torch RPC)."""
    return callees.serve_packed(op, payload, partitioning)


def tensorpipe_transports() -> Optional[List[str]]:
    """TensorPipe's own transports for the ``tensorpipe`` RPC transport: ``$PYG_DIST_TENSORPIPE_TRANSPORTS`` (comma
    list of ``uv``, ``shm``, ``ibv``; ``default``: ``None``, TensorPipe's own choice), else ``["uv"]`` (TCP).
    TensorPipe's default shared-memory transport busy-polls: measured here, an idle 2-rank world burned 35-95 % of
    a core per rank with it and ~0 % with ``uv``, which also works across machines. The old name,
    ``$PYG_DIST_RPC_TRANSPORTS``, is read when the new one is unset, with a ``DeprecationWarning``."""
    var = TP_TRANSPORTS_ENV
    if not os.environ.get(var, "").strip() and os.environ.get(TP_TRANSPORTS_OLD_ENV, "").strip():
        var = TP_TRANSPORTS_OLD_ENV
        warnings.warn(f"{TP_TRANSPORTS_OLD_ENV} is deprecated: set {TP_TRANSPORTS_ENV} (TensorPipe's own transports; "
                      "PYG_DIST_TRANSPORT picks pyg_dist's RPC transport)", DeprecationWarning, stacklevel=2)
    value = os.environ.get(var, "").strip() or "uv"
    if value == "default":
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names or any(n not in ("uv", "shm", "ibv") for n in names):
        raise InvalidArgumentError("init_rpc", var, value, "'default' or a comma list of uv, shm, ibv")
    return names


def _init_torch_rpc(rpc: Any, name: str, ctx: DistContext, opts: Any) -> None:
    """``rpc.init_rpc`` without torch's own deprecation line (:data:`TORCH_RPC_INIT_WARNING`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_RPC_INIT_WARNING)
        rpc.init_rpc(name, rank=ctx.rpc_rank, world_size=ctx.rpc_world_size, rpc_backend_options=opts)


@contextlib.contextmanager
def _without_env(var: Optional[str]) -> Iterator[None]:
    saved = os.environ.pop(var, None) if var else None
    try:
        yield
    finally:
        if var and saved is not None:
            os.environ[var] = saved


class TensorPipeTransport(Transport):
    """``torch.distributed.rpc`` with TensorPipe (``uv`` by default), rendezvous as :mod:`.leave` sets up."""

    name = "tensorpipe"
    peer_gone = PEER_GONE
    said_wait = verdict.SAID_WAIT  # an abort publishes its line as the process dies (abort.install)

    def start(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.start`."""
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
        names = tensorpipe_transports()
        opts = rpc.TensorPipeRpcBackendOptions(init_method=method, rpc_timeout=call_timeout,
                                               num_worker_threads=num_threads,
                                               **({} if names is None else {"_transports": names}))
        what = f"init_rpc of {name} (rpc rank {ctx.rpc_rank} of {ctx.rpc_world_size}) via {method}"
        # Workers inherit TORCHELASTIC_USE_AGENT_STORE from torchrun; with it a tcp:// rendezvous acts as a
        # store client only and hangs (design.md §7). Hide it while the rendezvous runs (rank 0 also
        # hosts the store itself, see leave.host_store), restore it afterwards for DDP.
        drop = AGENT_STORE_ENV if method.startswith("tcp://") else None
        try:
            if ctx.hosts_rpc_store:
                leave.host_store(ctx, timeout)
            with _without_env(drop):
                run_bounded(lambda: _init_torch_rpc(rpc, name, ctx, opts), timeout, what)
        except RpcTimeoutError as exc:
            raise RpcTimeoutError(f"{exc}; did every rank start, and is {method} reachable?") from None
        except Exception as exc:
            text = str(exc)
            if "address already in use" in text.lower() or "EADDRINUSE" in text:
                raise InvalidArgumentError("init_rpc", "rpc_port", ctx.rpc_port,
                                           f"a free TCP port ({what} failed: {text.splitlines()[0]})") from exc
            raise PyGDistError(f"{what} failed: {text}") from exc
        self.ctx, self.name_ = ctx, name
        verdict.world_store()  # opened now: an abort then only writes its line there (abort.install)

    def call(self, rank: int, op: str, payload: Any, partitioning: Optional[str],
             timeout: float) -> torch.futures.Future:
        """See :meth:`pyg_dist.rpc.transport.Transport.call`."""
        return torch_rpc().rpc_async(self.ctx.worker_name(rank), _remote_serve, args=(op, payload, partitioning),
                                     timeout=timeout)

    def ping(self, rank: int, timeout: float) -> torch.futures.Future:
        """See :meth:`pyg_dist.rpc.transport.Transport.ping`."""
        return torch_rpc().rpc_async(self.ctx.worker_name(rank), leave.has_arrived, timeout=timeout)

    def barrier(self, timeout: float) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.barrier`."""
        torch_rpc().api._all_gather(None, timeout=timeout)

    def shutdown(self, graceful: bool, timeout: float) -> Optional[str]:
        """See :meth:`pyg_dist.rpc.transport.Transport.shutdown`."""
        rpc, ctx = torch_rpc(), self.ctx
        problem = leave.arrival_barrier(self, ctx, timeout) if graceful else None
        together = graceful and problem is None  # torch's own graceful path would wait for the dead
        what = f"rpc.shutdown(graceful={together}) of {self.name_}"
        bound = min(timeout, 30.0)
        try:
            run_bounded(lambda: rpc.shutdown(graceful=together, timeout=bound if together else 0),
                        3 * bound + 10.0, what)
        except RpcTimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001 -- reported by the caller as a PyGDistError
            text = str(exc).strip()
            problem = f"{what} failed: {text.splitlines()[0] if text else repr(exc)}"
        if together:
            problem = leave.report_left_or_linger(ctx, bound) or problem
        return problem


__all__ = ["TensorPipeTransport", "TP_TRANSPORTS_ENV"]
