"""How a member finds the RPC world: the rendezvous store every transport meets in.

- ``tcp://`` worlds (``DistContext(rpc_port=...)``): RPC rank 0 hosts a ``TCPStore`` server on
  ``master_addr:rpc_port`` (:func:`host_store`), once per process and port, listening on ``master_addr``'s
  interface only; the others are its clients. torch's TensorPipe rendezvous reuses it (a multi-tenant store), and
  it lives as long as the process, so re-initialising on the same port works.
- ``env://`` worlds (trainers under torchrun): torchrun's agent store, one key space per attempt
  (:func:`rendezvous_store`; TensorPipe's own rendezvous handler for it is :mod:`pyg_dist.rpc.tensorpipe`'s).

Leaving is :mod:`.leave`'s; the order both go through is :mod:`.lifecycle`'s.

Example:
    >>> from pyg_dist.context import DistContext
    >>> rpc_port(DistContext(rank=0, world_size=2, num_partitions=2, rpc_port=29512))
    29512
"""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Dict, Tuple

from ..context import DistContext
from ..group import attempt_store
from ..iface import check_port_free, listening_socket, note_listeners

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


def client_store(ctx: DistContext, timeout: float) -> Any:
    """A client of the store on ``master_addr:rpc_port`` (a ``tcp://`` world's)."""
    return _new_store(ctx, False, timeout)


def hosted_store(ctx: DistContext) -> Any:
    """The store server this process hosts on ``ctx.rpc_port`` (:func:`host_store` ran here)."""
    return _HOSTED[(os.getpid(), rpc_port(ctx))][0]


def check_store_port(ctx: DistContext) -> None:
    """The store host's port is free before anything listens (a typed error naming ``rpc_port`` otherwise)."""
    if ctx.hosts_rpc_store and not is_hosting(ctx):
        check_port_free(rpc_port(ctx))


__all__ = ["rpc_port", "is_hosting", "host_store", "client_store", "hosted_store",
           "rendezvous_store", "check_store_port"]
