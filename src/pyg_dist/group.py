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


def attempt_store(world_size: Optional[int], timeout: datetime.timedelta, prefix: str = ""):
    """A client of torchrun's agent store (``MASTER_ADDR:MASTER_PORT``) with its keys under
    ``pyg_dist/attempt_<TORCHELASTIC_RESTART_COUNT>/<prefix>``. torchrun's store outlives an elastic restart,
    and torch's own ``env://`` rendezvous would let a restarted process read the addresses the previous
    attempt's processes left there (and connect to dead ports: measured with torch 2.13's c10d backend)."""
    import torch.distributed as dist

    store = dist.TCPStore(raw("MASTER_ADDR"), int(raw("MASTER_PORT")), world_size, False,
                          timeout=timeout)
    return dist.PrefixStore(attempt_prefix() + (f"/{prefix}" if prefix else ""), store)


def _own_store(ctx: DistContext, wait: datetime.timedelta):
    """Outside torchrun: the job's store on ``MASTER_ADDR:MASTER_PORT``, its server (rank 0) bound to that
    address only (torch's ``env://`` store would listen on every interface)."""
    import torch.distributed as dist

    from pyg_dist.iface import listening_socket
    host, port = raw("MASTER_ADDR"), int(raw("MASTER_PORT"))
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
    if not (is_set("MASTER_ADDR") and is_set("MASTER_PORT")):  # a plain `python script.py`
        hand_down("MASTER_ADDR", ctx.master_addr, to="torch.distributed and this process's stores", keep_set=True)
        hand_down("MASTER_PORT", str(ctx.master_port), to="torch.distributed and this process's stores", keep_set=True)
    from pyg_dist.iface import apply_ifname
    apply_ifname(raw("MASTER_ADDR"))  # gloo binds MASTER_ADDR's interface (or $PYG_DIST_IFNAME's)
    wait = datetime.timedelta(seconds=timeout)
    store = attempt_store(ctx.world_size, wait) if ctx.use_agent_store else _own_store(ctx, wait)
    dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size, timeout=wait, store=store)
    from pyg_dist.iface import note_listeners
    note_listeners(backend)


__all__ = ["attempt_prefix", "attempt_store", "init_process_group"]
