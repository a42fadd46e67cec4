"""The transport seam: what the runtime, calls and the leave protocol ask of the bytes' carrier.

Two implementations, chosen per process by ``$PYG_DIST_TRANSPORT`` (``TrainConfig.transport`` writes it, so
sampler workers follow their trainer), or by :func:`pyg_dist.rpc.init_rpc`'s ``transport``:

- ``sockets`` (:mod:`.sockets`, the default): pyg_dist's own TCP transport. One listener per process, a handshake
  in which each side proves its rank before a byte is interpreted (:mod:`.auth`), every frame's integrity checked
  or encrypted (:mod:`.seal`), struct-header frames of raw tensor bytes (no pickle), every length capped before
  allocation; junk on a listener closes that connection only.
- ``tensorpipe`` (:mod:`.tensorpipe`): ``torch.distributed.rpc`` over TensorPipe, as before (no
  authentication; it unpickles what reaches it; junk on its listener aborts the process).

Everything above the seam (the callee table, :class:`~pyg_dist.rpc.RpcFuture`, the asyncio bridge, failure
detection, the leave protocol) is the same for both. A call returns a ``torch.futures.Future`` completed with a
:class:`~pyg_dist.rpc.CallReply` whose value is still packed by :mod:`.wire`, or failed with an exception whose
text says why (``"timed out"`` for a timeout).

Example:
    >>> transport_name("sockets"), transport_name(None) in TRANSPORTS
    ('sockets', True)
"""
from __future__ import annotations

import errno
import os
import socket
import threading
from typing import Any, Callable, Optional

import torch

from ..context import DistContext
from ..errors import PEER_LOST, InvalidArgumentError, RpcTimeoutError

TRANSPORT_ENV = "PYG_DIST_TRANSPORT"
TRANSPORTS = ("sockets", "tensorpipe")
DEFAULT_TRANSPORT = "sockets"


def transport_name(value: Optional[str] = None) -> str:
    """``value``, else ``$PYG_DIST_TRANSPORT``, else the default; :class:`InvalidArgumentError` for another name."""
    where, arg = ("init_rpc", "transport") if value is not None else ("init_rpc", TRANSPORT_ENV)
    raw = value if value is not None else (os.environ.get(TRANSPORT_ENV, "").strip() or DEFAULT_TRANSPORT)
    if not isinstance(raw, str) or raw.strip().lower() not in TRANSPORTS:
        raise InvalidArgumentError(where, arg, raw, f"one of {list(TRANSPORTS)}")
    return raw.strip().lower()


def run_bounded(fn: Callable[[], Any], timeout: float, what: str) -> Any:
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


class Transport:
    """One process's carrier of calls (abstract). ``name`` labels its listeners (:mod:`pyg_dist.iface`)."""

    name = "transport"
    #: Why a peer's connection breaks, as survivors say it (:class:`~pyg_dist.rpc.RpcFuture` quotes it).
    peer_gone = PEER_LOST
    #: Seconds a survivor waits for a broken peer's failure line (:mod:`.verdict`): only a transport whose abort
    #: kills its process publishes while the connections break; every other failure publishes before them.
    said_wait = 0.0

    def start(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """Joins the world (rendezvous within ``timeout``); serves the callee table from then on."""
        raise NotImplementedError

    def call(self, rank: int, op: str, payload: Any, partitioning: Optional[str],
             timeout: float) -> torch.futures.Future:
        """Starts callee ``op`` on RPC rank ``rank`` with a :mod:`.wire`-packed ``payload``."""
        raise NotImplementedError

    def ping(self, rank: int, timeout: float) -> torch.futures.Future:
        """A future of whether RPC rank ``rank`` has entered ``shutdown_rpc`` (the arrival barrier's question)."""
        raise NotImplementedError

    def barrier(self, timeout: float) -> None:
        """Returns when every member called it (PyG's ``global_barrier``)."""
        raise NotImplementedError

    def shutdown(self, graceful: bool, timeout: float) -> Optional[str]:
        """Leaves the world (``graceful``: with every member); returns None, or what went wrong."""
        raise NotImplementedError


__all__ = ["pick_free_port", "check_port_free", "TRANSPORT_ENV", "TRANSPORTS", "DEFAULT_TRANSPORT", "transport_name",
           "run_bounded", "Transport"]
