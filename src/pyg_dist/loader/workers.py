"""Sampler workers of the distributed loaders (``num_workers > 0``).

Each loader with workers gets its own worker RPC world: its DataLoader workers are the members (RPC rank
``rank * W + worker_id``), they serve their trainer's partition and sample, and they leave the world when
they exit. The ranks agree on the world's rendezvous port when the loader is built (:func:`agree_world`,
one small collective): loaders must be built in the same order on every rank, and a mismatch is a typed
error naming both ranks' loader indices instead of a hang.

The one place that touches torch ``DataLoader`` internals is :func:`stop_workers` (tested against the
installed torch, so a change in torch fails loudly).
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Any, Callable, List, Optional

from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError

LOG = logging.getLogger("pyg_dist")

#: Loaders with workers built so far in this process: the next one's index.
_WORKER_WORLDS = itertools.count()


def _port_proposal(ctx: DistContext, index: int, preferred: Optional[int] = None) -> int:
    """``preferred`` (default ``rpc_port + index``) when free here, else a port the OS says is free
    (rank 0 proposes)."""
    from pyg_dist.iface import check_port_free, pick_free_port
    assert ctx.rpc_port is not None  # resolved by DistContext.__post_init__
    port = ctx.rpc_port + index if preferred is None else preferred
    try:
        if port <= 65535 and port != ctx.master_port:
            check_port_free(port)
            return port
    except InvalidArgumentError:
        pass
    return pick_free_port(ctx.master_addr)


def agree_world(where: str, ctx: DistContext, index: int, num_workers: int,
                port: Optional[int] = None) -> DistContext:
    """The trainer context of this process's ``index``-th loader with workers, agreed by every rank.

    With a process group of several ranks, every rank sends its loader index and rank 0 a free port
    (``port``, default ``rpc_port + index``, when free); all ranks then use rank 0's port. Without one,
    ``port`` (default ``rpc_port + index``).

    Raises:
        InvalidArgumentError: the ranks built their loaders in different orders (names both indices).
    """
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return ctx.for_loader(index, num_workers, port=port)
    mine = [index, _port_proposal(ctx, index, port) if dist.get_rank() == 0 else None]
    every: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    for rank, (other, _) in enumerate(every):
        if other != index:
            raise InvalidArgumentError(where, "loader order", f"rank {dist.get_rank()} builds its loader #{index}, "
                                       f"rank {rank} its loader #{other}",
                                       "the same loaders with workers built in the same order on every rank")
    return ctx.for_loader(index, num_workers, port=every[0][1])


def loader_kwargs(where: str, kwargs: dict, ctx: DistContext, stores, port: Optional[int] = None,
                  rpc_choices: Optional[dict] = None, timeout: Optional[float] = None) -> dict:
    """DataLoader kwargs for the deployment: workers serve and join RPC; they must be persistent.

    ``port``: the worker world's rendezvous port (see :func:`agree_world`); ``rpc_choices``: ``init_rpc``'s
    ``transport`` / ``wire_protection`` (a ``DistEnv``'s ``TrainConfig.rpc_choices()``; ``None`` ones are resolved
    here, from the variables, so the workers get the trainer's choices whatever environment they start with);
    ``timeout``: the workers' start-up bound (a ``DistEnv``'s ``TrainConfig.timeout``; default 120 s)."""
    workers = kwargs.get("num_workers", 0)
    if workers == 0:
        if port is not None:
            raise InvalidArgumentError(where, "rpc_port", port, "None with num_workers=0 (the trainers' RPC world "
                                       "uses the context's rpc_port)")
        return kwargs
    if kwargs.get("persistent_workers") is False:
        raise InvalidArgumentError(where, "persistent_workers", False,
                                   "True (or unset) with num_workers > 0: the workers are members of the "
                                   "RPC world and must live as long as the loader")
    out = dict(kwargs, persistent_workers=True)
    if port is not None:
        from pyg_dist.context import _check_port
        _check_port(where, "rpc_port", port)
    if stores is not None:
        share_with_workers(where, stores[0])
    world = agree_world(where, ctx, next(_WORKER_WORLDS), workers, port)
    out["worker_init_fn"] = WorkerSetup(world, stores, kwargs.get("worker_init_fn"),
                                        timeout=120.0 if timeout is None else float(timeout),
                                        choices=resolved_rpc_choices(rpc_choices or {}))
    return out


def resolved_rpc_choices(choices: dict) -> dict:
    """``init_rpc``'s ``transport`` and ``wire_protection``, the ``None`` ones read from their variables now."""
    from pyg_dist.rpc.settings import transport_name, wire_mode
    return {"transport": transport_name(choices.get("transport")),
            "wire_protection": wire_mode(choices.get("wire_protection"))}


def share_with_workers(where: str, feature_store) -> None:
    """Makes the columns put on ``feature_store`` for this job (``put_tensor``, ``add_learnable``) reach every
    sampler worker, however it starts: in shared memory, so a forked worker sees the trainer's later in-place
    updates and a spawned one gets them with the pickled store; a column that cannot travel so is a typed error
    now, never a batch without it."""
    added = getattr(feature_store, "added_columns", None)
    for (group, name), rows in (added() if added is not None else {}).items():
        if rows.requires_grad and not rows.is_leaf:
            raise InvalidArgumentError(where, "data", f"column {name!r} of {group!r}",
                                       "columns sampler workers can share: this one is the output of a computation "
                                       "that requires grad (put a leaf tensor, or .detach() it)")
    if added is not None:
        feature_store.share_added()


def stop_workers(loader) -> None:
    """Stops a DataLoader's persistent workers now (the one use of torch's private iterator API)."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    loader._iterator = None


class WorkerSetup:
    """``worker_init_fn`` for ``num_workers > 0``: serve the partition, join RPC, leave it at exit."""

    def __init__(self, ctx: DistContext, stores, user_fn: Optional[Callable[[int], Any]] = None,
                 timeout: float = 120.0, choices: Optional[dict] = None):
        self.ctx, self.stores, self.user_fn, self.timeout = ctx, stores, user_fn, timeout
        self.choices = dict(choices or {})  # init_rpc's transport / wire_protection, the trainer's

    def __call__(self, worker_id: int) -> None:
        """In DataLoader worker ``worker_id``: serve the partition, join RPC, then run the user's init function."""
        from multiprocessing import util

        from pyg_dist import rpc
        from pyg_dist._alloc import tune_allocator
        from pyg_dist.sampler.dist_neighbor import serve_partition

        fs, gs = self.stores
        tune_allocator()
        serve_partition(gs, fs)
        rpc.init_rpc(self.ctx.for_worker(worker_id), timeout=self.timeout, **self.choices)
        util.Finalize(None, _leave_rpc, args=(os.getppid(),), exitpriority=100)
        if self.user_fn is not None:
            self.user_fn(worker_id)


def _leave_rpc(parent: int) -> None:
    """Leaves RPC at worker exit: gracefully when the trainer stopped us; at once when it died (a
    forked worker holds the trainer's sockets, so lingering would hide its death from its peers)."""
    from pyg_dist import rpc
    orphan = os.getppid() != parent
    try:
        rpc.shutdown_rpc(graceful=not orphan, timeout=5.0 if orphan else 60.0)
    except Exception as exc:  # noqa: BLE001 -- a worker exiting cannot raise to anyone; say it loudly
        LOG.error("sampler worker left RPC uncleanly: %s", exc)


__all__ = ["agree_world", "loader_kwargs", "share_with_workers", "stop_workers", "WorkerSetup"]
