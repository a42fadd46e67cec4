"""The ``tensorpipe`` transport: ``torch.distributed.rpc`` over TensorPipe, behind the seam
(:mod:`pyg_dist.rpc.transport`).

Kept selectable (``PYG_DIST_TRANSPORT=tensorpipe``) and tested. What it cannot do, by design upstream: it has
no authentication, it unpickles what reaches it, and its listener aborts the process on junk (an unbounded
length read from the wire; :mod:`.abort` makes that death legible). Firewall its ports.
"""
from __future__ import annotations

import contextlib
import importlib.util
import warnings
from datetime import timedelta
from typing import Any, Optional

import torch

from ...context import AGENT_STORE_ENV, DistContext
from ...envvars import hidden
from ...errors import InvalidArgumentError, PyGDistError, RpcTimeoutError
from ...timeouts import run_bounded
from .. import callees, join, leave, verdict
from ..settings import tensorpipe_transports
from ..transport import Transport

#: What torch prints, once per rank, from inside ``torch.distributed.rpc.init_rpc`` with a fixed world size: its
#: start-up (``rpc.backend_registry``) exchanges the device maps by ``all_gather_object`` over a bare
#: ``ProcessGroupGloo`` backend it builds itself, and ``all_gather_object`` calls that deprecated. The call is
#: torch's own (pyg_dist's collectives pass process groups), so only this message is ignored, while init_rpc runs.
TORCH_RPC_INIT_WARNING = r"You are using a Backend .* as a ProcessGroup"


def _remote_serve(op: str, payload: Any, partitioning: Optional[str] = None) -> callees.CallReply:
    """Runs on the serving process (shipped by reference through torch RPC)."""
    return callees.serve_packed(op, payload, partitioning)


def torch_rpc():
    """``torch.distributed.rpc``, or a :class:`PyGDistError` when this torch build has none."""
    import torch.distributed.rpc as rpc

    if not rpc.is_available():
        raise PyGDistError("this torch build has no torch.distributed.rpc; pyg_dist's RPC needs it")
    return rpc


def _init_torch_rpc(rpc: Any, name: str, ctx: DistContext, opts: Any) -> None:
    """``rpc.init_rpc`` without torch's own deprecation line (:data:`TORCH_RPC_INIT_WARNING`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_RPC_INIT_WARNING)
        rpc.init_rpc(name, rank=ctx.rpc_rank, world_size=ctx.rpc_world_size, rpc_backend_options=opts)


#: Scheme of the trainer world's rendezvous under torchrun: torchrun's agent store, one key space per attempt.
ATTEMPT_SCHEME = "pygdistattempt"


def _attempt_rendezvous(url: str, timeout: timedelta = timedelta(seconds=300), **_):
    """``env://`` through :func:`pyg_dist.group.attempt_store` (torch RPC's rendezvous handler for trainer worlds)."""
    from urllib.parse import parse_qs, urlparse

    query = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
    rank, world_size = int(query["rank"]), int(query["world_size"])
    from pyg_dist.group import attempt_store

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




class TensorPipeTransport(Transport):
    """``torch.distributed.rpc`` with TensorPipe (``uv`` by default), rendezvous as :mod:`pyg_dist.rpc.join` sets up."""

    name = "tensorpipe"
    said_wait = verdict.SAID_WAIT  # an abort publishes its line as the process dies (abort.install)

    def join(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """See :meth:`pyg_dist.rpc.transport.Transport.join`."""
        rpc = torch_rpc()
        if importlib.util.find_spec("numpy") is None:
            raise PyGDistError("torch RPC needs numpy importable (its init gathers objects with it); "
                               "pip install numpy")
        from pyg_dist.iface import apply_ifname

        from . import abort
        apply_ifname(ctx.master_addr)
        abort.install(name)  # a transport abort (a stray connection) prints one typed line before SIGABRT
        method = init_method(ctx)
        names = tensorpipe_transports()
        opts = rpc.TensorPipeRpcBackendOptions(init_method=method, rpc_timeout=call_timeout,
                                               num_worker_threads=num_threads,
                                               **({} if names is None else {"_transports": names}))
        what = f"init_rpc of {name} (rpc rank {ctx.rpc_rank} of {ctx.rpc_world_size}) via {method}"
        # Workers inherit TORCHELASTIC_USE_AGENT_STORE from torchrun; with it a tcp:// rendezvous acts as a
        # store client only and hangs (design.md §7). Hide it while the rendezvous runs (rank 0 also
        # hosts the store itself, see join.host_store), restore it afterwards for DDP.
        try:
            if ctx.hosts_rpc_store:
                join.host_store(ctx, timeout)
            with hidden(AGENT_STORE_ENV, why="a tcp:// TensorPipe rendezvous") if method.startswith("tcp://") \
                    else contextlib.nullcontext():
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

    def leave(self, together: bool, bound: float) -> Optional[str]:
        """See :meth:`pyg_dist.rpc.transport.Transport.leave` (torch's own graceful path would wait for the dead:
        it runs only ``together``)."""
        rpc, problem = torch_rpc(), None
        what = f"rpc.shutdown(graceful={together}) of {self.name_}"
        try:
            run_bounded(lambda: rpc.shutdown(graceful=together, timeout=bound if together else 0),
                        3 * bound + 10.0, what)
        except RpcTimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001 -- reported by the caller as a PyGDistError
            text = str(exc).strip()
            problem = f"{what} failed: {text.splitlines()[0] if text else repr(exc)}"
        return problem


__all__ = ["TensorPipeTransport", "torch_rpc"]
