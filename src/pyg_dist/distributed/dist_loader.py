"""PyG's ``DistLoader`` (``torch_geometric.distributed.dist_loader``): where RPC lives for the loaders of
:mod:`~pyg_dist.distributed.dist_neighbor_loader` and :mod:`~pyg_dist.distributed.dist_link_neighbor_loader`.

Those loaders ARE pyg_dist's :class:`~pyg_dist.loader.dist_node_loader.DistNeighborLoader` /
:class:`~pyg_dist.loader.dist_link_loader.DistLinkNeighborLoader` with PyG's argument list, PyG's seed
semantics (``input_nodes`` / ``edge_label_index`` are this rank's own seeds, owned by its partition or
not: ``seed_split="rank"``) and PyG's RPC set-up: with ``num_workers=0`` the first loader joins this
process to the trainers' RPC world on ``master_port`` (left at exit); with workers, each loader's workers
form their own world on ``master_port`` (or a free port when that one is taken). Differences from PyG,
all deliberate: ranks agree on the number of batches per epoch (surplus seeds move, PyG's DDP hung);
remote errors raise instead of being logged; batches are reproducible from ``seed``.
"""
from __future__ import annotations

import atexit
import os
from typing import Any, Callable, Optional

from torch_geometric.data import HeteroData

from pyg_dist.context import DistContext as NativeContext
from pyg_dist.distributed.dist_context import DistContext, native_context, resolve_address
from pyg_dist.distributed.stores import check_stores
from pyg_dist.errors import InvalidArgumentError, check_positive_int, check_seconds


class WithLabels:
    """Transform: ``y`` from the feature store's ``labels`` (PyG's behaviour), then the user's transform."""

    def __init__(self, feature_store, input_type, transform: Optional[Callable] = None):
        self.feature_store, self.input_type, self.transform = feature_store, input_type, transform

    def __call__(self, data):
        """``data`` with ``y`` from ``labels`` (when set), through the user's transform."""
        labels = self.feature_store.labels
        if labels is not None:
            if isinstance(data, HeteroData):
                store = data[self.input_type]
                store.y = labels[store.e_id if isinstance(self.input_type, tuple) else store.n_id]
            else:
                data.y = labels[data.n_id]
        return data if self.transform is None else self.transform(data)


class Channel:
    """PyG's ``loader.channel`` (an ``mp.Queue`` there, with ``async_sampling``): batches never pass through
    it here, so it is always empty; it has the queue methods PyG's scripts call."""

    def empty(self) -> bool:
        """Always ``True``."""
        return True

    def qsize(self) -> int:
        """Always ``0``."""
        return 0

    def get_nowait(self):
        """Raises ``queue.Empty``, as an empty queue does."""
        import queue
        raise queue.Empty


def _serves(fs) -> bool:
    """Whether this process already answers lookups for ``fs``'s folder and partition."""
    from pyg_dist import rpc
    from pyg_dist.rpc.callees import lookup as registered
    from pyg_dist.store.lookup import LOOKUP_OP
    if LOOKUP_OP not in rpc.registered_callees():
        return False
    old = getattr(registered(LOOKUP_OP), "__self__", None)
    return old is fs or (old is not None and (old.partition_meta.root, old.partition)
                         == (fs.partition_meta.root, fs.partition))


def _barrier() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _at_exit(fn: Callable[[], None]) -> None:
    """Runs ``fn`` at interpreter exit BEFORE thread pools stop taking work (``threading``'s exit hook), so
    that a graceful RPC shutdown still answers the peers that sample through this process meanwhile
    (``atexit`` runs after; PyG's test processes end as soon as their own loop does)."""
    import threading
    hook = getattr(threading, "_register_atexit", None)
    if hook is not None:
        hook(fn)
    atexit.register(fn)  # also there (a no-op once RPC is left): processes that run only atexit's handlers


def _leave_rpc() -> None:
    from pyg_dist import rpc
    if rpc.is_initialized():
        rpc.shutdown_rpc()


class DistLoader:
    """PyG's base of the distributed loaders: where RPC lives and how long calls may take.

    Args:
        current_ctx: This process's :class:`~pyg_dist.distributed.DistContext`.
        master_addr: RPC host (default ``$MASTER_ADDR``).
        master_port: RPC port of this loader (default ``$MASTER_PORT + 1``); never DDP's port.
        channel: Accepted for PyG scripts and unused (batches are not queued through a channel).
        num_rpc_threads: Threads serving RPC requests in this process (trainers' world).
        rpc_timeout: Seconds each remote call may take before it fails with ``RpcTimeoutError``.
        dist_sampler: A ready sampler (``DistNeighborSampler``) instead of one built from the arguments.
    """

    def __init__(self, current_ctx, master_addr: Optional[str] = None, master_port=None, channel=None,
                 num_rpc_threads: int = 16, rpc_timeout: float = 180, dist_sampler=None, **kwargs):
        where = type(self).__name__
        if not isinstance(current_ctx, (DistContext, NativeContext)):
            raise InvalidArgumentError(where, "current_ctx", current_ctx, "a pyg_dist.distributed.DistContext")
        self.master_addr, self.master_port = resolve_address(where, master_addr, master_port)
        self.num_rpc_threads = check_positive_int(where, "num_rpc_threads", num_rpc_threads)
        check_seconds(where, "rpc_timeout", rpc_timeout)
        self.current_ctx, self.channel, self.rpc_timeout = current_ctx, channel, float(rpc_timeout)
        self.dist_sampler, self.pid = dist_sampler, os.getpid()
        self.num_workers = kwargs.get("num_workers", 0)

    def _world(self, fs, gs):
        """pyg_dist's context of this loader; with ``num_workers=0`` this process joins RPC (once)."""
        from pyg_dist import rpc
        from pyg_dist.sampler.dist_neighbor import serve_partition
        where = type(self).__name__
        if self.num_workers == 0 and rpc.is_initialized():
            if not _serves(fs):
                _barrier()  # peers may still sample the old stores through us: switch only when all arrive
                serve_partition(gs, fs)  # this loader's stores answer the peers from now on
            return rpc.current_context()
        ctx = native_context(where, self.current_ctx, gs.num_partitions, self.master_addr, self.master_port,
                             self.num_workers)
        if self.num_workers == 0:
            serve_partition(gs, fs)
            rpc.init_rpc(ctx, call_timeout=self.rpc_timeout, num_threads=self.num_rpc_threads)
            _at_exit(_leave_rpc)
        return ctx

    def channel_get(self, out: Any) -> Any:
        """PyG's hook; batches never go through a channel here, so ``out`` comes back as it is."""
        return out

    def reset_channel(self, channel=None) -> None:
        """PyG's hook; keeps ``channel`` for scripts that read it."""
        self.channel = channel

    def __enter__(self):
        self._entered = iter(self)
        return self._entered

    def __exit__(self, *args) -> None:
        import torch.distributed as dist
        self._entered = None
        if dist.is_available() and dist.is_initialized():
            dist.barrier()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={self.pid})"


def begin_loader(loader: DistLoader, data, current_ctx, master_addr, master_port, num_rpc_threads, dist_sampler,
           async_sampling, kwargs: dict):
    """Common first steps: stores, PyG's RPC arguments, this loader's context and pyg_dist's extras."""
    where = type(loader).__name__
    fs, gs = check_stores(where, data)
    if not isinstance(async_sampling, bool):
        raise InvalidArgumentError(where, "async_sampling", async_sampling, "a bool")
    DistLoader.__init__(loader, current_ctx, master_addr, master_port, Channel() if async_sampling else None,
                        num_rpc_threads,
                        kwargs.pop("rpc_timeout", 180), dist_sampler, **kwargs)
    ctx = loader._world(fs, gs)
    extra = {"ctx": ctx, "seed_split": "rank", "neighbor_sampler": dist_sampler}
    extra["timeout"] = kwargs.pop("timeout", loader.rpc_timeout)
    if loader.num_workers:
        extra["rpc_port"] = loader.master_port
    return fs, gs, extra


def end_loader(loader: DistLoader, fs, transform, device) -> None:
    """Common last steps: PyG's ``transform`` with ``labels``, and ``dist_sampler`` (PyG's class) when the
    loader built its own."""
    from pyg_dist.distributed.dist_neighbor_sampler import adopt
    loader.transform = WithLabels(fs, loader.input_data.input_type, transform)  # type: ignore[attr-defined]
    if loader.dist_sampler is None:
        sampler = getattr(loader, "node_sampler", None) or getattr(loader, "link_sampler", None)
        loader.dist_sampler = adopt(sampler, loader.current_ctx, loader.channel, device)


__all__ = ["Channel", "DistLoader", "WithLabels", "begin_loader", "end_loader"]
