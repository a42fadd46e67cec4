"""Distributed training scaffolding for torchrun: init, DDP wrap, teardown in ``finally``.

A training script launched by ``torchrun`` needs three lines of this module::

    from pyg_dist.train.session import TrainConfig, dist_session, wrap_ddp

    with dist_session(TrainConfig(partition_dir="/data/cora-2")) as env:   # PG, stores, RPC
        train_loader = DistNeighborLoader(env, [10, 5], input_nodes="train_mask", batch_size=256)
        model = wrap_ddp(GraphSAGE(...), env)
        ...                                                                 # an ordinary PyG loop

What :func:`dist_session` does, in order (:mod:`pyg_dist.train.startup`: each step with its own settings, made
from the :class:`TrainConfig` in one place, and timed: ``DistEnv.startup_seconds``): builds the
:class:`~pyg_dist.context.DistContext` from torchrun's environment and the folder's partition count; initialises
the process group (``gloo`` on CPU, ``nccl`` on CUDA, on ``MASTER_PORT``); opens this rank's partition
(memory-mapped: the ranks of one partition on one machine share one copy); registers this partition's callees
(feature lookups, one-hop sampling); joins RPC when ``num_workers == 0`` (else the loaders' workers join); fills
the caches. On exit it shuts RPC down first (gracefully when the body succeeded, locally after a failure), then
destroys the process group, whatever happened.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Union

import torch

from pyg_dist import timeouts
from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError, check_choice, check_positive_int, check_seconds
from pyg_dist.format.precision import BATCH_DTYPES, parse_dtype
from pyg_dist.rpc.settings import MODES as WIRE_MODES
from pyg_dist.rpc.settings import TRANSPORTS
from pyg_dist.train import startup
from pyg_dist.train.startup import teardown

LOG = logging.getLogger("pyg_dist")
_WHERE = "TrainConfig"


@dataclass(frozen=True)
class TrainConfig:
    """Validated settings of a distributed run (everything else comes from torchrun's environment).

    Args:
        partition_dir: Folder written by ``pyg-dist-partition`` / :class:`~pyg_dist.partition.Partitioner`.
        num_workers: Sampler workers per trainer (``0``: the trainer samples and joins RPC itself).
        rpc: Start the sampling RPC world (serve this partition, join RPC). ``False``: a process group and the
            stores only, for trainers that sample their own partition alone (TMA: :func:`pyg_dist.tma.run_tma`
            over :func:`pyg_dist.tma.local_subgraph`); distributed loaders then cannot reach other partitions.
        backend: The gradients' backend: ``"gloo"``, ``"nccl"`` or ``None``: ``nccl`` on a CUDA device when every
            rank of the machine has a GPU of its own, else ``gloo`` (ranks sharing a GPU: NCCL refuses two ranks on
            one GPU, and ``backend="nccl"`` is then an ``InvalidArgumentError``). With NCCL the process group is
            ``cpu:gloo,cuda:nccl``: CUDA tensors (DDP's gradients) reduce over NCCL, CPU tensors (seed balancing,
            metrics) over gloo; sampling and feature rows travel over RPC on the CPU either way.
        device: The rank's device: ``None`` (default: ``cuda:LOCAL_RANK % GPUs`` when CUDA is available, else
            ``cpu``), ``"cpu"``, ``"cuda"`` (the same GPU rule) or ``"cuda:N"``. ``wrap_ddp`` puts the model there and
            the distributed loaders built on the ``DistEnv`` deliver batches there (:mod:`pyg_dist.loader.device`).
        gpu_cache_bytes: Keep this many bytes of the partition's hottest node rows on the GPU
            (:mod:`pyg_dist.cache.device`: the remote-feature cache's rows first, then owned rows by in-edge
            count); the loaders built on the ``DistEnv`` then gather those rows there instead of copying them per
            batch. ``None`` (default): no GPU cache. Needs a CUDA ``device``.
        rpc_port: RPC's own port (default ``$PYG_DIST_RPC_PORT`` or ``MASTER_PORT + 1``).
        transport: RPC's transport (:mod:`pyg_dist.rpc.settings`): ``"sockets"`` (pyg_dist's own: authenticated,
            no pickle, junk-proof) or ``"tensorpipe"`` (``torch.distributed.rpc``). ``None`` (default):
            ``$PYG_DIST_TRANSPORT``, else ``"sockets"``. The loaders built on the run's ``DistEnv`` hand it to their
            sampler workers. Every rank must use the same transport.
        wire_protection: What the ``sockets`` transport does to every frame (:mod:`pyg_dist.rpc.sockets.seal`):
            ``"integrity"`` (every frame's bytes checked, AES-GCM tag per frame), ``"encrypt"`` (also encrypted, for
            networks that are not trusted) or ``"off"``. ``None`` (default): ``$PYG_DIST_WIRE_PROTECTION``, else
            ``"integrity"``. The loaders built on the run's ``DistEnv`` hand it to their sampler workers.
        timeout: Seconds for start-up: rendezvous (process group and RPC), opening partitions (plus the largest
            partition's bytes at 100 MB/s, so ranks wait for one that opens a larger partition), caches, and the
            first batch's gate (every rank waits there until all have their first batch:
            :func:`pyg_dist.timeouts.first_step_gate`).
        failure_timeout: The bound after start-up (:mod:`pyg_dist.timeouts`): a peer that dies or hangs
            ends every other rank within it, in remote calls, collectives (DDP) and shutdown. Default:
            ``$PYG_DIST_FAILURE_TIMEOUT`` or 20 s.
        call_timeout: Seconds per remote sampling / feature call (default: ``failure_timeout``).
        mmap: Memory-map the partition (shared page cache between ranks of one machine).
        verify: ``"once"`` (default): recompute the content digests META.json lists for the files this rank
            opens once per machine (remembered by path, size, mtime and inode;
            :mod:`pyg_dist.format.verified`), so flipped bytes or a same-size file from another run are refused
            at open. ``True``:
            every time (shared files too); ``False``: sizes and sampled blocks only.
        cache_ratio: Fill a remote-feature cache at start-up (:mod:`pyg_dist.cache`): copies of the
            remote rows ranked first by ``cache_policy``, within this fraction of the partition's own
            feature bytes. ``None`` (default): the folder's ``feature_cache.pt`` if the partitioner wrote
            one (``--cache-ratio``), else no cache.
        cache_policy: ``"degree"`` or ``"presample"`` (needs ``cache_num_neighbors``, the loader's fanouts).
        cache_num_neighbors: Fanouts of the ``"presample"`` warm-up batches.
        checkpoint_dir: Folder of this run's checkpoints (:mod:`pyg_dist.train.checkpoint`); a run started on a
            folder that holds one resumes from it (written by as many ranks: another world size is a
            ``CheckpointError``). Created and checked writable when the config is made (a ``CheckpointError``
            naming it otherwise). ``None``: no checkpoints.
        checkpoint_every: Write one every this many optimizer steps.
        checkpoint_interval: Write one when this many seconds passed since the last (default, when
            neither is given: every 60 s).
        checkpoint_keep: Complete checkpoints kept.
        feature_dtype: The dtype the distributed loaders built on this run's ``DistEnv`` deliver features in
            (floating attributes except ``y``, ``edge_label``, ``edge_weight`` and times), cast once per batch on
            the training side: ``torch.float32`` (default), ``torch.bfloat16``, ``torch.float16``,
            ``torch.float64`` or a name; ``None`` keeps the folder's stored dtype (``pyg-dist-partition
            --feature-dtype``). A loader's own ``feature_dtype`` argument wins.
        remote_rows: How the distributed loaders built on this run's ``DistEnv`` fetch feature rows other
            partitions own: ``"exact"`` (default) or ``"int8"`` (opt-in: floating feature rows as int8 codes plus a
            float32 scale and offset per row, ~4x fewer bytes; each element within ``scale / 2`` of its value,
            ``scale = (max - min) / 255`` over its row, plus float32 rounding: :mod:`pyg_dist.store.quant`).
            Local and cached rows, labels, masks and times stay exact. A loader's own ``remote_rows`` wins.

    Example:
        >>> TrainConfig("/tmp/cora-2", num_workers=-1)
        Traceback (most recent call last):
        ...
        pyg_dist.errors.InvalidArgumentError: TrainConfig: argument 'num_workers' got -1; expected a non-negative int
    """
    partition_dir: str
    num_workers: int = 0
    rpc: bool = True
    backend: Optional[str] = None
    rpc_port: Optional[int] = None
    transport: Optional[str] = None
    wire_protection: Optional[str] = None
    timeout: float = 120.0
    call_timeout: Optional[float] = None
    failure_timeout: Optional[float] = None
    mmap: bool = True
    verify: Union[bool, str] = "once"
    cache_ratio: Optional[float] = None
    cache_policy: str = "degree"
    cache_num_neighbors: Optional[Any] = None
    checkpoint_dir: Optional[str] = None
    checkpoint_every: Optional[int] = None
    checkpoint_interval: Optional[float] = None
    checkpoint_keep: int = 2
    feature_dtype: Optional[Union[str, torch.dtype]] = torch.float32
    remote_rows: str = "exact"
    device: Optional[Union[str, torch.device]] = None
    gpu_cache_bytes: Optional[int] = None

    def __post_init__(self):
        if not isinstance(self.partition_dir, (str, Path)) or not str(self.partition_dir):
            raise InvalidArgumentError(_WHERE, "partition_dir", self.partition_dir, "a folder path")
        check_positive_int(_WHERE, "num_workers", self.num_workers, allow_zero=True)
        if self.backend is not None:
            check_choice(_WHERE, "backend", self.backend, ("gloo", "nccl"))
        for name in ("timeout", "call_timeout", "failure_timeout"):
            if name == "timeout" or getattr(self, name) is not None:
                check_seconds(_WHERE, name, getattr(self, name))
        for name in ("mmap", "rpc", "verify"):  # verify: also "once" (pyg_dist.store.folder.VERIFY)
            if not isinstance(getattr(self, name), bool) and not (name == "verify" and self.verify == "once"):
                raise InvalidArgumentError(_WHERE, name, getattr(self, name), "a bool (verify: or 'once')")
        r = self.cache_ratio
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1):
            raise InvalidArgumentError(_WHERE, "cache_ratio", r, "None or a fraction in (0, 1]")
        check_choice(_WHERE, "cache_policy", self.cache_policy, ("degree", "presample"))
        check_choice(_WHERE, "remote_rows", self.remote_rows, ("exact", "int8"))
        if self.transport is not None:
            check_choice(_WHERE, "transport", self.transport, TRANSPORTS)
        if self.wire_protection is not None:
            check_choice(_WHERE, "wire_protection", self.wire_protection, WIRE_MODES)
        object.__setattr__(self, "feature_dtype", parse_dtype(_WHERE, "feature_dtype", self.feature_dtype,
                                                              BATCH_DTYPES))
        if r is not None and not self.rpc:
            raise InvalidArgumentError(_WHERE, "cache_ratio", r, "None with rpc=False (a remote-feature cache "
                                       "serves distributed sampling)")
        if r is not None and self.cache_policy == "presample" and self.cache_num_neighbors is None:
            raise InvalidArgumentError(_WHERE, "cache_num_neighbors", None, "the loader's fanouts (cache_policy="
                                       "'presample' samples warm-up batches with them)")
        self._check_device()
        if self.checkpoint_dir is not None:  # the Checkpointer checks the rest when it is built
            from pyg_dist.train.checkpoint import Checkpointer
            Checkpointer(self.checkpoint_dir, every_steps=self.checkpoint_every,
                         every_seconds=self.checkpoint_interval, keep=self.checkpoint_keep)

    def rpc_choices(self) -> dict:
        """``init_rpc``'s ``transport`` and ``wire_protection`` for this run (``None`` ones: the variables'), as
        ``dist_session`` passes them and the loaders hand them to their sampler workers."""
        return {"transport": self.transport, "wire_protection": self.wire_protection}

    def _check_device(self) -> None:
        from pyg_dist.loader.device import resolve_device
        if self.device is not None:
            dev = resolve_device(_WHERE, self.device, current=False)
            if dev is not None and dev.type == "cpu" and self.backend == "nccl":
                raise InvalidArgumentError(_WHERE, "backend", "nccl", "'gloo' or None with device 'cpu' (NCCL "
                                           "reduces CUDA tensors only)")
        b = self.gpu_cache_bytes
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b <= 0):
            raise InvalidArgumentError(_WHERE, "gpu_cache_bytes", b, "None or a positive number of bytes")
        if b is not None and not _on_cuda(self.device):
            raise InvalidArgumentError(_WHERE, "gpu_cache_bytes", b, "None without a CUDA device (device="
                                       f"{self.device!r}; torch.cuda.is_available() is {torch.cuda.is_available()})")


def _on_cuda(device) -> bool:
    """Whether a configured ``device`` (``None``: CUDA when available) is a CUDA device."""
    return torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"


@dataclass
class DistEnv:
    """What a training script gets from :func:`dist_session`.

    Attributes:
        config: The run's :class:`TrainConfig`.
        ctx: This process's :class:`~pyg_dist.context.DistContext`.
        device: ``TrainConfig.device``, by default ``cuda:LOCAL_RANK % GPUs`` with CUDA, else ``cpu``.
        graph_store / feature_store: This rank's partition (``LocalGraphStore`` / ``LocalFeatureStore``).
        gpu_cache: The :class:`~pyg_dist.cache.device.DeviceFeatureCache` of ``TrainConfig.gpu_cache_bytes``,
            or ``None``; the distributed loaders built on this env use it.
        startup_seconds: Wall seconds of each start-up step (:mod:`pyg_dist.train.startup`), in order:
            ``world``, ``local``, ``group``, ``open``, ``rpc``, ``caches``.
    """
    config: TrainConfig
    ctx: DistContext
    device: torch.device
    graph_store: Any
    feature_store: Any
    gpu_cache: Any = None
    startup_seconds: Dict[str, float] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        return self.ctx.world_size

    @property
    def data(self):
        """``(feature_store, graph_store)``: PyG's remote-backend pair, what the loaders take."""
        return self.feature_store, self.graph_store

    @property
    def meta(self):
        """The folder's :class:`~pyg_dist.format.PartitionMeta` (node / edge types, counts, method)."""
        return self.graph_store.partition_meta

    def num_features(self, node_type: Optional[str] = None, attr: str = "x") -> int:
        """Width of a node attribute (default ``x``; the same in every partition): a model's input size.

        Example:
            >>> model = GraphSAGE(env.num_features(), 64, 2, env.num_classes())  # doctest: +SKIP
        """
        shape = self.feature_store.get_tensor_size(group_name=node_type, attr_name=self._attr("num_features",
                                                                                              node_type, attr))
        return int(shape[-1]) if len(shape) > 1 else 1

    def _attr(self, where: str, node_type: Optional[str], attr: str) -> str:
        if attr not in self.feature_store.attr_names(node_type):
            raise InvalidArgumentError(f"DistEnv.{where}", "attr", attr,
                                       f"a node attribute of the folder (type {node_type!r}: "
                                       f"{self.feature_store.attr_names(node_type)})")
        return attr

    def checkpointer(self, **state):
        """A :class:`~pyg_dist.train.checkpoint.Checkpointer` on ``config.checkpoint_dir`` (disabled when it is
        ``None``) saving ``state``: ``model=``, ``optimizer=``, ``scheduler=``, ``loaders={name: loader}``,
        ``extra={name: obj}``. Call :meth:`~pyg_dist.train.checkpoint.Checkpointer.resume` next (every rank)."""
        from pyg_dist.train.checkpoint import Checkpointer
        cfg = self.config
        every_seconds = cfg.checkpoint_interval
        if every_seconds is None and cfg.checkpoint_every is None:
            every_seconds = 60.0
        return Checkpointer(cfg.checkpoint_dir, every_steps=cfg.checkpoint_every, every_seconds=every_seconds,
                            keep=cfg.checkpoint_keep, partition_writer=self.rank % self.ctx.ranks_per_partition == 0,
                            **state)

    def num_classes(self, node_type: Optional[str] = None, attr: str = "y") -> int:
        """``max(y) + 1`` over the whole graph (one all_reduce: call it on every rank): a model's output size."""
        import torch.distributed as dist
        y = self.feature_store.get_tensor(group_name=node_type, attr_name=self._attr("num_classes", node_type, attr))
        top = torch.tensor([int(y.max()) + 1 if y.numel() else 0])
        if dist.is_initialized() and self.world_size > 1:
            dist.all_reduce(top, op=dist.ReduceOp.MAX)
        return int(top)


@contextlib.contextmanager
def dist_session(config: TrainConfig) -> Iterator[DistEnv]:
    """Starts this rank's part of a distributed run; tears it down in ``finally`` (see module doc).

    Raises:
        InvalidArgumentError: a ``PYG_DIST_*`` variable is bad (:mod:`~pyg_dist.train.env_check`), before anything.
        PartitionFormatError: the folder does not match the world (partition count, missing files).
        RpcTimeoutError: a peer did not arrive within ``config.timeout``.
    """
    from pyg_dist.train import orphan
    from pyg_dist.train.opening import open_everywhere

    if not isinstance(config, TrainConfig):
        raise InvalidArgumentError("dist_session", "config", config, "a pyg_dist.train.session.TrainConfig")
    s = startup.StartupSettings.of(config)  # each step's own settings (pyg_dist.train.startup: the steps, in order)
    clock = startup.StartupClock()
    with clock("world"):
        world = startup.resolve_world(s.world)
    with clock("local"):
        startup.prepare_process(world, s.bounds)
    with orphan.watch_agent(world.ctx.rank, on_orphan=teardown):  # ends this rank if its torchrun agent dies
        ok = False
        try:
            with clock("group"):
                bound = startup.join_world_group(world, s.bounds)
            with clock("open"):
                graph_store, feature_store = open_everywhere(s.open, world.ctx, bound)
            env = DistEnv(config, world.ctx, world.device, graph_store, feature_store, startup_seconds=clock.seconds)
            with clock("rpc"):
                startup.start_rpc(s.rpc, world.ctx, graph_store, feature_store)
            with clock("caches"):
                env.gpu_cache = startup.build_caches(s.cache, world, graph_store, feature_store)
            startup.ready(s.bounds)
            LOG.info("rank %d: %s", world.ctx.rank, clock.line())
            yield env
            ok = True
        finally:
            teardown(ok, timeouts.failure_timeout())


def wrap_ddp(model: torch.nn.Module, env: DistEnv, **kwargs) -> torch.nn.Module:
    """Moves ``model`` to the rank's device and wraps it in ``DistributedDataParallel`` (world > 1).

    Example:
        >>> model = wrap_ddp(torch.nn.Linear(4, 2), env)   # doctest: +SKIP
    """
    from torch.nn.parallel import DistributedDataParallel

    model = model.to(env.device)
    if env.world_size == 1:
        return model
    ids = [env.device.index] if env.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, **kwargs)


def all_mean(value: float, env: DistEnv) -> float:
    """Mean of a float over all ranks (for printing epoch loss / accuracy)."""
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.is_initialized() and env.world_size > 1:
        dist.all_reduce(t)
        t /= env.world_size
    return float(t)


def all_sum(values, env: DistEnv) -> torch.Tensor:
    """Element-wise sum of a list of numbers over all ranks (e.g. correct / total counts)."""
    import torch.distributed as dist

    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if dist.is_initialized() and env.world_size > 1:
        dist.all_reduce(t)
    return t
