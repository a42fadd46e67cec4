"""Who is who in a pyg_dist world: ranks, partitions, RPC names and ports, computed in one place.

A deployment has ``world_size`` trainer ranks (one torchrun process each) and ``num_partitions``
partitions; ``world_size`` is a multiple of ``num_partitions`` and trainer rank ``r`` serves partition
``r // (world_size // num_partitions)`` (ranks of a partition are contiguous, so they usually share a
machine). Two RPC layouts exist:

* **trainer world** (``num_workers=0``): every trainer joins RPC; RPC rank = trainer rank.
* **worker world** (``num_workers=W > 0``): the trainers do *not* join RPC; each trainer's ``W``
  DataLoader workers do, with RPC rank ``trainer_rank * W + worker_id``, and serve the trainer's
  partition. Build a worker's context with :meth:`DistContext.for_worker`.

Port policy: RPC rendezvous gets its own port, ``rpc_port`` (default ``MASTER_PORT + 1``, or
``$PYG_DIST_RPC_PORT``); it may never equal ``master_port``, which belongs to DDP's process group.
Under torchrun the trainer world rendezvouses through ``env://`` (torchrun's agent store, measured to be
the only way that does not hang); the worker world always uses ``tcp://master_addr:rpc_port``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, TypeVar, Union

from . import envvars
from .envvars import read_port
from .errors import InvalidArgumentError, check_positive_int

#: Environment variable that overrides the default RPC port.
RPC_PORT_ENV = "PYG_DIST_RPC_PORT"
#: Set by torchrun in its children; makes ``env://``/``tcp://`` rendezvous act as store clients only.
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"

_Default = TypeVar("_Default", int, None)


def _check_port(where: str, name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise InvalidArgumentError(where, name, value, "a TCP port in 1..65535")
    return value


def env_rpc_port(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """``$PYG_DIST_RPC_PORT`` as a port (``None`` when unset or empty); :class:`InvalidArgumentError` naming the
    variable when it is no integer or no TCP port in 1..65535.

    Example:
        >>> env_rpc_port({"PYG_DIST_RPC_PORT": "29600"}), env_rpc_port({})
        (29600, None)
    """
    return read_port(RPC_PORT_ENV, environ)


@dataclass(frozen=True)
class DistContext:
    """Identity of one process in a pyg_dist deployment (immutable; validated on construction).

    Args:
        rank: Trainer rank (torchrun's ``RANK``), ``0 <= rank < world_size``.
        world_size: Number of trainer processes (torchrun's ``WORLD_SIZE``).
        num_partitions: Number of graph partitions; ``world_size`` must be a multiple of it.
        local_rank: Rank on this machine (default ``rank % local_world_size``).
        local_world_size: Trainers per machine (default ``world_size``: one machine). Ranks are
            machine-contiguous, as torchrun assigns them.
        master_addr: Host of rank 0.
        master_port: DDP's rendezvous port (torchrun's ``MASTER_PORT``).
        rpc_port: RPC's own rendezvous port (default ``master_port + 1``); never ``master_port``.
        num_workers: Sampler workers (DataLoader workers) per trainer; ``0`` = trainers join RPC.
        worker_id: Set only in a worker's context (see :meth:`for_worker`).
        use_agent_store: True under torchrun (its agent owns the rendezvous store).

    Example:
        >>> ctx = DistContext(rank=3, world_size=4, num_partitions=2, master_port=29500)
        >>> ctx.partition, ctx.rpc_port, list(ctx.rpc_ranks_of(1))
        (1, 29501, [2, 3])
        >>> ctx.worker_name(ctx.rpc_rank), ctx.pick_rpc_rank(0)
        ('pyg_dist_trainer_3', 1)
    """

    rank: int
    world_size: int
    num_partitions: int
    local_rank: Optional[int] = None
    local_world_size: Optional[int] = None
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    rpc_port: Optional[int] = None
    num_workers: int = 0
    worker_id: Optional[int] = None
    use_agent_store: bool = False

    def __post_init__(self) -> None:
        where = "DistContext"
        world = check_positive_int(where, "world_size", self.world_size)
        check_positive_int(where, "rank", self.rank, allow_zero=True)
        if self.rank >= world:
            raise InvalidArgumentError(where, "rank", self.rank, f"an int in [0, {world})")
        parts = check_positive_int(where, "num_partitions", self.num_partitions)
        if world % parts:
            raise InvalidArgumentError(where, "num_partitions", parts,
                                       f"a divisor of world_size={world} (one or more ranks per partition)")
        self._post_init_machine(where, world)
        if not isinstance(self.master_addr, str) or not self.master_addr:
            raise InvalidArgumentError(where, "master_addr", self.master_addr, "a non-empty host name")
        _check_port(where, "master_port", self.master_port)
        if self.rpc_port is None:
            object.__setattr__(self, "rpc_port", self.master_port + 1 if self.master_port < 65535 else 65534)
        _check_port(where, "rpc_port", self.rpc_port)
        if self.rpc_port == self.master_port:
            raise InvalidArgumentError(where, "rpc_port", self.rpc_port,
                                       "a port different from master_port (DDP and RPC cannot share one)")
        check_positive_int(where, "num_workers", self.num_workers, allow_zero=True)
        if self.worker_id is not None:
            check_positive_int(where, "worker_id", self.worker_id, allow_zero=True)
            if self.worker_id >= self.num_workers:
                raise InvalidArgumentError(where, "worker_id", self.worker_id,
                                           f"an int in [0, num_workers={self.num_workers})")
        if not isinstance(self.use_agent_store, bool):
            raise InvalidArgumentError(where, "use_agent_store", self.use_agent_store, "a bool")

    def _post_init_machine(self, where: str, world: int) -> None:
        lws = world if self.local_world_size is None else self.local_world_size
        check_positive_int(where, "local_world_size", lws)
        if world % lws:
            raise InvalidArgumentError(where, "local_world_size", lws,
                                       f"a divisor of world_size={world} (same number of ranks per machine)")
        object.__setattr__(self, "local_world_size", lws)
        expected = self.rank % lws
        local = expected if self.local_rank is None else self.local_rank
        check_positive_int(where, "local_rank", local, allow_zero=True)
        if local != expected:
            raise InvalidArgumentError(where, "local_rank", local,
                                       f"rank % local_world_size = {expected} (machine-contiguous ranks)")
        object.__setattr__(self, "local_rank", local)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_env(cls, num_partitions: int, *, num_workers: int = 0, rpc_port: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None) -> "DistContext":
        """Builds the context of this process from torchrun's environment.

        Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
        ``MASTER_PORT``, ``PYG_DIST_RPC_PORT`` and ``TORCHELASTIC_USE_AGENT_STORE``. Without ``RANK``
        and ``WORLD_SIZE`` it is a one-process world.

        Args:
            num_partitions: Number of partitions of the graph (from its ``META.json``).
            num_workers: Sampler workers per trainer (``0``: the trainer joins RPC).
            rpc_port: Overrides ``$PYG_DIST_RPC_PORT`` / ``MASTER_PORT + 1``.
            env: Mapping to read instead of ``os.environ``.

        Example:
            >>> DistContext.from_env(2, env={"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "6000"}).partition
            1
        """
        environ = envvars.environ(env)
        where = "DistContext.from_env"
        if ("RANK" in environ) != ("WORLD_SIZE" in environ):
            raise InvalidArgumentError(where, "RANK/WORLD_SIZE", (environ.get("RANK"), environ.get("WORLD_SIZE")),
                                       "both set (torchrun) or both unset (one process)")

        def read_int(name: str, default: _Default) -> Union[int, _Default]:
            raw = environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                return int(raw)
            except ValueError:
                raise InvalidArgumentError(where, name, raw, "an integer environment variable") from None

        if rpc_port is None:
            rpc_port = env_rpc_port(environ)
        if "WORLD_SIZE" not in environ and isinstance(num_partitions, int) and num_partitions > 1:
            script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "<script>"
            raise InvalidArgumentError(
                where, "WORLD_SIZE", "unset (not launched by torchrun)",
                f"one process per partition at least: the folder has {num_partitions} partitions, so launch "
                f"`torchrun --nproc-per-node {num_partitions} {script} ...` (or --nnodes N across machines)")
        return cls(rank=read_int("RANK", 0), world_size=read_int("WORLD_SIZE", 1),
                   num_partitions=num_partitions, local_rank=read_int("LOCAL_RANK", None),
                   local_world_size=read_int("LOCAL_WORLD_SIZE", None),
                   master_addr=environ.get("MASTER_ADDR") or "127.0.0.1",
                   master_port=read_int("MASTER_PORT", 29500), rpc_port=rpc_port,
                   num_workers=num_workers, use_agent_store=environ.get(AGENT_STORE_ENV) == "True")

    def for_worker(self, worker_id: int) -> "DistContext":
        """The context of this trainer's sampler worker ``worker_id`` (it joins the worker world).

        Example:
            >>> DistContext(rank=1, world_size=2, num_partitions=2, num_workers=3).for_worker(2).rpc_rank
            5
        """
        if self.num_workers == 0:
            raise InvalidArgumentError("DistContext.for_worker", "worker_id", worker_id,
                                       "no worker context: this context has num_workers=0")
        if self.worker_id is not None:
            raise InvalidArgumentError("DistContext.for_worker", "worker_id", worker_id,
                                       f"a trainer context (this is already worker {self.worker_id})")
        return dataclasses.replace(self, worker_id=worker_id)

    def for_loader(self, index: int, num_workers: int, port: Optional[int] = None) -> "DistContext":
        """The trainer context of the ``index``-th loader with sampler workers in this process.

        Every such loader has its own worker RPC world (its workers are its members), rendezvousing on
        ``port`` (default ``rpc_port + index``; the loaders agree on it across ranks, see
        :func:`pyg_dist.loader.workers.agree_world`), so a training loader and evaluation loaders can all
        keep workers alive at once. ``num_workers`` is that loader's (it may differ from this context's).

        Example:
            >>> t = DistContext(rank=0, world_size=2, num_partitions=2, master_port=29500, num_workers=2)
            >>> t.for_loader(1, num_workers=3).rpc_port, t.for_loader(1, num_workers=3).rpc_world_size
            (29502, 6)
        """
        where = "DistContext.for_loader"
        check_positive_int(where, "index", index, allow_zero=True)
        check_positive_int(where, "num_workers", num_workers)
        if self.num_workers == 0 or self.worker_id is not None:
            raise InvalidArgumentError(where, "ctx", self, "a trainer context with num_workers > 0 "
                                       "(TrainConfig.num_workers): its trainers stay out of RPC")
        if port is None:
            assert self.rpc_port is not None  # resolved by __post_init__
            port = self.rpc_port + index
        if port > 65535 or port == self.master_port:
            raise InvalidArgumentError(where, "index", index,
                                       f"a loader index whose port rpc_port + index = {port} is a free TCP "
                                       f"port other than master_port={self.master_port}; set another rpc_port")
        return dataclasses.replace(self, num_workers=num_workers, rpc_port=port)

    # ------------------------------------------------------------------ layout
    @property
    def ranks_per_partition(self) -> int:
        """Trainer ranks that serve each partition."""
        return self.world_size // self.num_partitions

    @property
    def partition(self) -> int:
        """The partition this process (trainer or its worker) serves."""
        return self.partition_of_rank(self.rank)

    @property
    def machine(self) -> int:
        """Index of this process's machine (``rank // local_world_size``)."""
        return self.rank // self._ranks_per_machine

    def partition_of_rank(self, rank: int) -> int:
        """Partition served by trainer ``rank``."""
        self._check_index("partition_of_rank", "rank", rank, self.world_size)
        return rank // self.ranks_per_partition

    @property
    def is_worker(self) -> bool:
        """True in a sampler worker's context."""
        return self.worker_id is not None

    @property
    def joins_rpc(self) -> bool:
        """Whether this process is a member of the RPC world (trainer with W=0, or any worker)."""
        return self.num_workers == 0 or self.is_worker

    @property
    def _ranks_per_machine(self) -> int:
        assert self.local_world_size is not None  # resolved by __post_init__
        return self.local_world_size

    @property
    def _per_trainer(self) -> int:
        return max(self.num_workers, 1)

    @property
    def rpc_world_size(self) -> int:
        """Members of the RPC world: ``world_size`` or ``world_size * num_workers``."""
        return self.world_size * self._per_trainer

    @property
    def rpc_rank(self) -> Optional[int]:
        """This process's RPC rank, or ``None`` for a trainer whose workers join RPC instead."""
        if not self.joins_rpc:
            return None
        return self.rank * self._per_trainer + (self.worker_id or 0)

    def worker_name(self, rpc_rank: int) -> str:
        """The RPC name of ``rpc_rank`` (unique in its world, stable across processes)."""
        self._check_index("worker_name", "rpc_rank", rpc_rank, self.rpc_world_size)
        kind = "sampler" if self.num_workers else "trainer"
        return f"pyg_dist_{kind}_{rpc_rank}"

    def trainer_of_rpc_rank(self, rpc_rank: int) -> int:
        """Trainer rank that owns RPC member ``rpc_rank`` (itself in the trainer world)."""
        self._check_index("trainer_of_rpc_rank", "rpc_rank", rpc_rank, self.rpc_world_size)
        return rpc_rank // self._per_trainer

    def partition_of_rpc_rank(self, rpc_rank: int) -> int:
        """Partition served by RPC member ``rpc_rank``."""
        return self.partition_of_rank(self.trainer_of_rpc_rank(rpc_rank))

    def rpc_ranks_of(self, partition: int) -> range:
        """RPC ranks that serve ``partition`` (contiguous)."""
        self._check_index("rpc_ranks_of", "partition", partition, self.num_partitions)
        width = self.ranks_per_partition * self._per_trainer
        return range(partition * width, (partition + 1) * width)

    def pick_rpc_rank(self, partition: int) -> int:
        """The RPC rank this process should call for ``partition``.

        Itself when it serves ``partition``; otherwise a server on the same machine if there is one,
        chosen by this process's own rank so that callers spread over the servers (deterministic,
        stateless).
        """
        candidates = self.rpc_ranks_of(partition)
        me = self.rpc_rank if self.rpc_rank is not None else self.rank * self._per_trainer
        if me in candidates:
            return me
        near = [c for c in candidates
                if self.trainer_of_rpc_rank(c) // self._ranks_per_machine == self.machine]
        pool = near or list(candidates)
        return pool[me % len(pool)]

    # ------------------------------------------------------------------ rendezvous
    @property
    def rpc_init_method(self) -> str:
        """``env://`` for a trainer world under torchrun, else ``tcp://master_addr:rpc_port``."""
        if self.use_agent_store and not self.is_worker:
            return "env://"
        return f"tcp://{self.master_addr}:{self.rpc_port}"

    @property
    def hosts_rpc_store(self) -> bool:
        """True when this process will host the TCP rendezvous store on ``rpc_port``."""
        return self.rpc_rank == 0 and self.rpc_init_method.startswith("tcp://")

    def _check_index(self, where: str, name: str, value, bound: int) -> None:
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < bound
        if not ok:
            raise InvalidArgumentError(f"DistContext.{where}", name, value, f"an int in [0, {bound})")
