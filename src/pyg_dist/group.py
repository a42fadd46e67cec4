"""The process group of a job: torchrun's environment -> ``torch.distributed.init_process_group``, with the
rendezvous keys of each torchrun restart attempt kept apart. Every stage that needs a process group
(:func:`~pyg_dist.train.session.dist_session`, the out-of-core partitioner under torchrun, TMA) joins it here.

Example:
    >>> attempt_prefix({"TORCHELASTIC_RESTART_COUNT": "2"})
    'pyg_dist/attempt_2'
"""
from __future__ import annotations

import datetime
import os
from typing import Mapping, Optional

from pyg_dist.context import DistContext
from pyg_dist.envvars import hand_down, is_set, raw


def attempt_prefix(env: Optional[Mapping[str, str]] = None) -> str:
    """``pyg_dist/attempt_<TORCHELASTIC_RESTART_COUNT>``: where this torchrun attempt's keys live."""
    return f"pyg_dist/attempt_{raw('TORCHELASTIC_RESTART_COUNT', env, '0')}"


def attempt_store(world_size: Optional[int], timeout: datetime.timedelta, prefix: str = "",
                  host: Optional[str] = None, port: Optional[int] = None):
    """A client of torchrun's agent store (``host:port``, default ``MASTER_ADDR:MASTER_PORT``) with its keys under
    ``pyg_dist/attempt_<TORCHELASTIC_RESTART_COUNT>/<prefix>``. torchrun's store outlives an elastic restart,
    and torch's own ``env://`` rendezvous would let a restarted process read the addresses the previous
    attempt's processes left there (and connect to dead ports: measured with torch 2.13's c10d backend)."""
    import torch.distributed as dist

    host = raw("MASTER_ADDR") if host is None else host
    port = int(raw("MASTER_PORT")) if port is None else port
    store = dist.TCPStore(host, port, world_size, False, timeout=timeout)
    return dist.PrefixStore(attempt_prefix() + (f"/{prefix}" if prefix else ""), store)


def _own_store(ctx: DistContext, wait: datetime.timedelta, host: str, port: int):
    """Outside torchrun: the job's store on ``host:port`` (``MASTER_ADDR:MASTER_PORT``), its server (rank 0)
    bound to that address only (torch's ``env://`` store would listen on every interface)."""
    import torch.distributed as dist

    from pyg_dist.iface import listening_socket
    sock = listening_socket(host, port) if ctx.rank == 0 else None
    store = dist.TCPStore(host, port, ctx.world_size, ctx.rank == 0, timeout=wait, multi_tenant=True,
                          wait_for_workers=False, master_listen_fd=None if sock is None else sock.fileno())
    _KEEP[os.getpid()] = (store, sock)  # the server lives as long as the process
    from pyg_dist.iface import note_listeners
    note_listeners("process-group store")
    return store


_KEEP: dict = {}


def init_process_group(backend: str = "gloo", timeout: float = 120.0, ctx: Optional[DistContext] = None) -> None:
    """Joins torch's default process group (no-op if joined): rank and world from ``ctx`` (default: torchrun's
    environment); under torchrun through :func:`attempt_store`, else through a store bound to
    ``MASTER_ADDR`` only; gloo and TensorPipe bind the interface of :func:`pyg_dist.iface.chosen_interface`."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    ctx = ctx if ctx is not None else DistContext.from_env(num_partitions=1)
    # torchrun's address, else (a plain `python script.py`) ctx's, handed down once the group formed
    host = raw("MASTER_ADDR") if is_set("MASTER_ADDR") else ctx.master_addr
    port = int(raw("MASTER_PORT")) if is_set("MASTER_PORT") else ctx.master_port
    from pyg_dist.iface import apply_ifname, note_listeners
    apply_ifname(host)  # gloo binds MASTER_ADDR's interface (or $PYG_DIST_IFNAME's)
    wait = datetime.timedelta(seconds=timeout)
    store = attempt_store(ctx.world_size, wait, host=host, port=port) if ctx.use_agent_store \
        else _own_store(ctx, wait, host, port)
    dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size, timeout=wait, store=store)
    note_listeners(backend)
    # what joins later (TensorPipe's RPC, this process's stores, sampler workers) reads the same address
    hand_down("MASTER_ADDR", host, to="torch.distributed and this process's stores", keep_set=True)
    hand_down("MASTER_PORT", str(port), to="torch.distributed and this process's stores", keep_set=True)


__all__ = ["attempt_prefix", "attempt_store", "init_process_group"]
