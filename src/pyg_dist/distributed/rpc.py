"""PyG's user-facing RPC calls (``torch_geometric.distributed.rpc``) over pyg_dist's RPC runtime.

PyG's scripts that drive a :class:`~pyg_dist.distributed.DistNeighborSampler` by hand start RPC themselves::

    sampler = DistNeighborSampler(ctx, (feature_store, graph_store), num_neighbors=[-1, -1])
    init_rpc(current_ctx=ctx, master_addr="localhost", master_port=port)
    sampler.register_sampler_rpc()          # serves this partition, then waits for every rank to do so
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
    shutdown_rpc()

:func:`init_rpc` maps PyG's arguments onto :func:`pyg_dist.rpc.init_rpc`: one rank per partition
(``num_partitions = current_ctx.world_size``), RPC on ``master_addr:master_port`` (never DDP's port,
``$MASTER_PORT``). PyG's internals (``RPCRouter``, ``rpc_register``, ``rpc_async``, ...) are not here: pyg_dist
routes by partition book and calls named callees (``docs/guides/migration.md``).

The layer maps onto pyg_dist's transport seam (:mod:`pyg_dist.rpc.transport`), not onto torch RPC: it runs on
whichever transport ``$PYG_DIST_TRANSPORT`` selects (``sockets`` by default), and :func:`global_barrier` is
that transport's barrier.
"""
from __future__ import annotations

from typing import Optional

from pyg_dist.errors import InvalidArgumentError, NotInitializedError, PyGDistError, check_positive_int, check_seconds


def rpc_is_initialized() -> bool:
    """Whether this process is in an RPC world (pyg_dist's)."""
    from pyg_dist import rpc
    return rpc.is_initialized()


def init_rpc(current_ctx, master_addr: Optional[str], master_port, num_rpc_threads: int = 16,
             rpc_timeout: float = 240.0, rpc_worker_names=None) -> None:
    """Joins this process to the RPC world of the ``current_ctx.world_size`` ranks (PyG's signature;
    a no-op when it has joined one already, as PyG's).

    Args:
        current_ctx: This process's :class:`~pyg_dist.distributed.DistContext` (rank = partition served).
        master_addr: Address of rank 0 (default ``$MASTER_ADDR``).
        master_port: RPC port (default ``$MASTER_PORT + 1``); not DDP's port.
        num_rpc_threads: Threads serving peers' requests.
        rpc_timeout: Seconds each remote call may take (it then fails with ``RpcTimeoutError``).
        rpc_worker_names: Accepted for PyG scripts and unused (pyg_dist names its RPC members itself).

    Raises:
        InvalidArgumentError: a bad argument (named), or a port in use.
        RpcTimeoutError: not every rank arrived in time.
    """
    from pyg_dist import rpc
    from pyg_dist.distributed.dist_context import DistContext, native_context, resolve_address
    where = "init_rpc"
    if not isinstance(current_ctx, DistContext):
        raise InvalidArgumentError(where, "current_ctx", current_ctx, "a pyg_dist.distributed.DistContext")
    check_positive_int(where, "num_rpc_threads", num_rpc_threads)
    rpc_timeout = check_seconds(where, "rpc_timeout", rpc_timeout)
    if rpc_worker_names is not None and not isinstance(rpc_worker_names, dict):
        raise InvalidArgumentError(where, "rpc_worker_names", rpc_worker_names, "None or a dict (unused)")
    if rpc.is_initialized():
        return
    addr, port = resolve_address(where, master_addr, master_port)
    ctx = native_context(where, current_ctx, current_ctx.world_size, addr, port, num_workers=0)
    rpc.init_rpc(ctx, call_timeout=rpc_timeout, num_threads=num_rpc_threads)


def shutdown_rpc(id: Optional[str] = None, graceful: bool = True, timeout: float = 240.0) -> None:
    """Leaves the RPC world (PyG's signature; ``id`` is only named in PyG's log line). ``graceful`` waits
    for every member; unlike PyG a failed graceful shutdown raises."""
    from pyg_dist import rpc
    if not isinstance(graceful, bool):
        raise InvalidArgumentError("shutdown_rpc", "graceful", graceful, "a bool")
    rpc.shutdown_rpc(graceful=graceful, timeout=check_seconds("shutdown_rpc", "timeout", timeout))


def global_barrier(timeout: Optional[float] = None) -> None:
    """Returns when every member of the RPC world has called it (PyG's); raises instead of PyG's log line
    when a member does not arrive."""
    from pyg_dist import rpc
    if not rpc.is_initialized():
        raise NotInitializedError("global_barrier: RPC is not initialised in this process; call init_rpc first")
    seconds = None if timeout is None else check_seconds("global_barrier", "timeout", timeout)
    try:
        rpc.barrier(seconds)
    except PyGDistError as exc:  # PyG's name in the message
        raise PyGDistError(f"global_barrier: {exc}") from exc


__all__ = ["init_rpc", "shutdown_rpc", "rpc_is_initialized", "global_barrier"]
