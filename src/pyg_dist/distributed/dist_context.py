"""PyG's ``DistContext`` (``torch_geometric.distributed.dist_context``) and its translation to pyg_dist's.

PyG's context names a process (``rank``, ``world_size``, ``group_name``); pyg_dist's
:class:`pyg_dist.context.DistContext` also knows the partitions, the ports and the sampler workers.
:func:`native_context` fills those in from the loader's arguments and torchrun's environment.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Optional, Union

from pyg_dist import envvars
from pyg_dist.context import AGENT_STORE_ENV
from pyg_dist.context import DistContext as NativeContext
from pyg_dist.errors import InvalidArgumentError, check_positive_int


class DistRole(Enum):
    """Role of a process (PyG has one: a worker that trains and samples)."""
    WORKER = 1


@dataclass
class DistContext:
    """Context information of the current process (PyG's fields and defaults).

    Args:
        rank: This trainer's rank among the ``world_size`` trainers (= its partition).
        global_rank: Rank in the global world (PyG: equal to ``rank`` for trainers).
        world_size: Number of trainers.
        global_world_size: Size of the global world.
        group_name: Name of the group; RPC names are ``f"{group_name}-{rank}"`` in PyG.
        role: :attr:`DistRole.WORKER`.

    Example:
        >>> ctx = DistContext(rank=1, global_rank=1, world_size=2, global_world_size=2, group_name="sage")
        >>> ctx.worker_name
        'sage-1'
    """

    rank: int
    global_rank: int
    world_size: int
    global_world_size: int
    group_name: str
    role: DistRole = DistRole.WORKER

    def __post_init__(self) -> None:
        for name in ("world_size", "global_world_size"):
            check_positive_int("DistContext", name, getattr(self, name))
        for name, bound in (("rank", self.world_size), ("global_rank", self.global_world_size)):
            value = check_positive_int("DistContext", name, getattr(self, name), allow_zero=True)
            if value >= bound:
                raise InvalidArgumentError("DistContext", name, value, f"an int in [0, {bound})")
        if not isinstance(self.group_name, str):
            raise InvalidArgumentError("DistContext", "group_name", self.group_name, "a str")

    @property
    def worker_name(self) -> str:
        """``f"{group_name}-{rank}"`` (PyG's RPC name; pyg_dist names its RPC members itself)."""
        return f"{self.group_name}-{self.rank}"


def resolve_address(where: str, master_addr: Optional[str], master_port: Union[int, str, None],
                    env: Optional[Mapping[str, str]] = None):
    """PyG's defaults: ``MASTER_ADDR`` and ``MASTER_PORT + 1`` from the environment when not given."""
    environ = envvars.environ(env)
    addr = master_addr if master_addr is not None else environ.get("MASTER_ADDR")
    if not isinstance(addr, str) or not addr:
        raise InvalidArgumentError(where, "master_addr", master_addr,
                                   "the RPC host (rank 0's address), or set MASTER_ADDR")
    port = master_port
    if port is None and environ.get("MASTER_PORT"):
        port = int(environ["MASTER_PORT"]) + 1  # next to DDP's port, as PyG does
    try:
        port = int(port) if port is not None and not isinstance(port, bool) else None
    except (TypeError, ValueError):
        port = None
    if port is None or not 0 < port < 65536:
        raise InvalidArgumentError(where, "master_port", master_port,
                                   "a TCP port for RPC (int or str), or set MASTER_PORT")
    return addr, port


def native_context(where: str, ctx, num_partitions: int, master_addr: str, rpc_port: int, num_workers: int,
                   env: Optional[Mapping[str, str]] = None) -> NativeContext:
    """pyg_dist's context for PyG's ``ctx`` (or a pyg_dist context, returned as it is).

    ``rpc_port`` becomes the trainers' RPC port (``num_workers=0``; under torchrun the trainers
    rendezvous through torchrun's store instead) or the first candidate of the workers' world. DDP's
    port is ``MASTER_PORT`` when set.
    """
    if isinstance(ctx, NativeContext):
        return ctx
    if not isinstance(ctx, DistContext):
        raise InvalidArgumentError(where, "current_ctx", ctx, "a pyg_dist.distributed.DistContext")
    environ = envvars.environ(env)
    ddp = int(environ["MASTER_PORT"]) if environ.get("MASTER_PORT") else (rpc_port - 1 if rpc_port > 1 else 2)
    if ddp == rpc_port:
        raise InvalidArgumentError(where, "master_port", rpc_port,
                                   f"a port for RPC other than MASTER_PORT={ddp} (DDP's); PyG's default is "
                                   "MASTER_PORT + 1")
    same_job = environ.get("RANK") == str(ctx.rank) and environ.get("LOCAL_WORLD_SIZE")
    lws = int(environ["LOCAL_WORLD_SIZE"]) if same_job else None
    if lws is not None and ctx.world_size % lws:
        lws = None
    return NativeContext(rank=ctx.rank, world_size=ctx.world_size, num_partitions=num_partitions,
                         local_world_size=lws, master_addr=master_addr, master_port=ddp, rpc_port=rpc_port,
                         num_workers=num_workers, use_agent_store=environ.get(AGENT_STORE_ENV) == "True")


__all__ = ["DistContext", "DistRole", "native_context", "resolve_address"]
