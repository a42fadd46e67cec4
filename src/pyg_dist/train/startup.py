"""A rank's start-up, six steps in the order :func:`~pyg_dist.train.session.dist_session` runs them.

Each step is given its own small settings (:class:`StartupSettings`, made from the ``TrainConfig`` in one place,
already checked there) and each timed (:class:`StartupClock`; ``DistEnv.startup_seconds``)::

    step    settings         what it does                                                     function
    world   WorldSettings    PYG_DIST_* variables checked, META read (and its largest         resolve_world
                             partition's bytes), torchrun's world -> DistContext, this rank's
                             device and gradient backend
    local   BoundSettings    this process: its CUDA device, the allocator, the failure bound  prepare_process
                             (sampler workers inherit it)
    group   BoundSettings    the process group, its rendezvous watched for a peer that failed join_world_group
    open    OpenSettings     this rank's partition; every rank told of any rank's failure     open_everywhere
    rpc     RpcSettings      this partition's callees served, then the RPC world joined       start_rpc
    caches  CacheSettings    the remote-row cache (host), then the GPU cache                  build_caches

then :func:`ready` (collectives fail within the failure bound, but for the first batch's gate) and, whatever
happened, :func:`teardown` (RPC first, then the process group). The order is forced: RPC's callees serve the
opened partition, and the caches read remote rows over RPC (or the process group). A step only reads its own
settings and what the steps before it returned (passed in by ``dist_session``, nothing on the side).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterator, Optional, Union

import torch

from pyg_dist import timeouts
from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError, PyGDistError

LOG = logging.getLogger("pyg_dist")
_WHERE = "TrainConfig"


@dataclass(frozen=True)
class WorldSettings:
    """The ``world`` step's: which folder, how this rank's process is placed and reduces gradients."""
    partition_dir: str
    num_workers: int
    rpc_port: Optional[int]
    device: Optional[Union[str, torch.device]]
    backend: Optional[str]
    env_overrides: FrozenSet[str]  # PYG_DIST_* variables a setting overrides: not checked (the setting wins)


@dataclass(frozen=True)
class BoundSettings:
    """The bounds: ``timeout`` for start-up (rendezvous, opening, caches, the first batch's gate);
    ``failure_timeout`` after it (``None``: ``$PYG_DIST_FAILURE_TIMEOUT`` or 20 s)."""
    timeout: float
    failure_timeout: Optional[float]


@dataclass(frozen=True)
class OpenSettings:
    """The ``open`` step's (:func:`pyg_dist.store.load_stores`)."""
    partition_dir: str
    mmap: bool
    verify: Union[bool, str]
    timeout: float


@dataclass(frozen=True)
class RpcSettings:
    """The ``rpc`` step's: whether this run has an RPC world, and :func:`pyg_dist.rpc.init_rpc`'s arguments."""
    enabled: bool
    timeout: float
    call_timeout: Optional[float]
    transport: Optional[str]
    wire_protection: Optional[str]


@dataclass(frozen=True)
class CacheSettings:
    """The ``caches`` step's: the host cache (``ratio`` ``None``: none) and the GPU cache (``gpu_bytes``)."""
    ratio: Optional[float]
    policy: str
    num_neighbors: Any
    gpu_bytes: Optional[int]
    timeout: float  # per remote read while filling


@dataclass(frozen=True)
class StartupSettings:
    """Each start-up step's settings, made from a checked ``TrainConfig`` (:meth:`of`)."""
    world: WorldSettings
    bounds: BoundSettings
    open: OpenSettings
    rpc: RpcSettings
    cache: CacheSettings

    @classmethod
    def of(cls, config) -> "StartupSettings":
        """Each step's settings from ``config`` (a checked ``TrainConfig``: nothing is checked again)."""
        from pyg_dist.train.env_check import overridden
        c = config
        return cls(
            WorldSettings(str(c.partition_dir), c.num_workers, c.rpc_port, c.device, c.backend,
                          frozenset(overridden(c))),
            BoundSettings(c.timeout, c.failure_timeout),
            OpenSettings(str(c.partition_dir), c.mmap, c.verify, c.timeout),
            RpcSettings(c.rpc, c.timeout, c.call_timeout, c.transport, c.wire_protection),
            CacheSettings(c.cache_ratio, c.cache_policy, c.cache_num_neighbors, c.gpu_cache_bytes,
                          c.call_timeout or c.timeout))


@dataclass
class StartupClock:
    """Wall seconds per start-up step, in the order they ran."""
    seconds: Dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        """Times the ``with`` body as ``step`` (recorded even when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = round(time.perf_counter() - t0, 4)

    def line(self) -> str:
        """``world 0.01 s, group 0.52 s, ...`` (and the total)."""
        steps = ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items())
        return f"start-up {sum(self.seconds.values()):.2f} s: {steps}"


@dataclass(frozen=True)
class World:
    """What the ``world`` step found: the folder's META (and its largest partition's bytes: the ``open`` step's
    bound grows with them), this process's context, device and backend string."""
    meta: Any
    part_bytes: int
    ctx: DistContext
    device: torch.device
    backend: str


def resolve_world(s: WorldSettings) -> World:
    """The ``world`` step. A bad setting here is published (:mod:`pyg_dist.rpc.verdict`) before it is raised:
    the other ranks, other machines too, wait in the rendezvous and read that line instead of timing out."""
    from pyg_dist.format import read_meta
    from pyg_dist.format.digests import largest_part_bytes
    from pyg_dist.rpc import verdict
    from pyg_dist.train import env_check
    try:
        env_check.validate_env(skip=s.env_overrides)
        meta = read_meta(s.partition_dir)
        part_bytes = largest_part_bytes(meta)
        ctx = DistContext.from_env(meta.num_parts, num_workers=s.num_workers, rpc_port=s.rpc_port)
        device = rank_device(s, ctx)
        backend = gradient_backend(s, ctx, device, torch.cuda.device_count() if device.type == "cuda" else 0)
    except PyGDistError:
        verdict.publish_in_flight()
        raise
    return World(meta, part_bytes, ctx, device, backend)


def rank_device(s, ctx: DistContext) -> torch.device:
    """This rank's device: ``s.device``; ``None`` or ``"cuda"`` -> ``cuda:LOCAL_RANK % GPUs`` when CUDA is
    available (``None`` without CUDA -> ``cpu``)."""
    dev = torch.device(s.device) if s.device is not None else None
    if dev is not None and (dev.type == "cpu" or dev.index is not None):
        return dev
    if dev is None and not torch.cuda.is_available():
        return torch.device("cpu")
    local = ctx.local_rank if ctx.local_rank is not None else ctx.rank
    return torch.device("cuda", local % torch.cuda.device_count())


def gradient_backend(s, ctx: DistContext, device: torch.device, gpus: int) -> str:
    """The process group's backend string: ``gloo`` on the CPU or when ranks of one machine share a GPU
    (``gpus`` GPUs for ``ctx.local_world_size`` ranks), else ``cpu:gloo,cuda:nccl`` (``s.backend`` wins;
    ``nccl`` where NCCL cannot run is an ``InvalidArgumentError``)."""
    if device.type != "cuda":
        if s.backend == "nccl":
            raise InvalidArgumentError(_WHERE, "backend", "nccl", f"'gloo' or None on device {device} (NCCL reduces "
                                       "CUDA tensors only)")
        return "gloo"
    ranks = ctx.local_world_size or ctx.world_size
    shared = ranks > gpus
    if s.backend == "nccl" and shared:
        raise InvalidArgumentError(_WHERE, "backend", "nccl", f"'gloo' or None: {ranks} ranks on this machine share "
                                   f"{gpus} GPU(s), and NCCL refuses two ranks on one GPU")
    if s.backend == "gloo" or shared:
        return "gloo"
    return "cpu:gloo,cuda:nccl"


def prepare_process(world: World, s: BoundSettings) -> None:
    """The ``local`` step: this process's CUDA device, the allocator (batches reuse freed memory instead of
    faulting it in again), and the failure bound (written where sampler workers inherit it)."""
    from pyg_dist._alloc import tune_allocator, warn_huge_pages_missed
    if world.device.type == "cuda":
        torch.cuda.set_device(world.device)
    tune_allocator()
    warn_huge_pages_missed(world.ctx.rank)
    if s.failure_timeout is not None:
        timeouts.set_failure_timeout(s.failure_timeout)


def join_world_group(world: World, s: BoundSettings) -> float:
    """The ``group`` step: the process group within ``s.timeout``; its collectives wait as long as opening
    the largest partition may take (:func:`~pyg_dist.train.opening.open_bound`, returned: the ``open`` step's
    bound), so ranks that open a small partition wait for one that opens a large one."""
    from pyg_dist.train.opening import join_group, open_bound
    bound = open_bound(s.timeout, world.part_bytes)
    join_group(world.backend, s.timeout, world.ctx, collective=bound)
    return bound


def start_rpc(s: RpcSettings, ctx: DistContext, graph_store, feature_store) -> None:
    """The ``rpc`` step, on ranks that join the RPC world (``num_workers == 0``; else the loaders' sampler
    workers join it): this partition's callees first (a peer may call as soon as it joined), then the world."""
    from pyg_dist import rpc
    from pyg_dist.sampler.dist_neighbor import serve_partition
    if not (s.enabled and ctx.joins_rpc):
        return
    serve_partition(graph_store, feature_store)
    rpc.init_rpc(ctx, timeout=s.timeout, call_timeout=s.call_timeout or timeouts.call_timeout(),
                 transport=s.transport, wire_protection=s.wire_protection)


def build_caches(s: CacheSettings, world: World, graph_store, feature_store) -> Optional[Any]:
    """The ``caches`` step (every rank at once): the remote-row cache (over RPC when this rank is in the RPC
    world, else through the process group) set on ``feature_store``; then the GPU cache, returned (or ``None``)."""
    from pyg_dist.cache.device import build_device_cache
    from pyg_dist.sampler.cache_policy import build_cache
    ctx = world.ctx
    if s.ratio is not None:
        if not ctx.joins_rpc and s.policy == "presample":
            raise InvalidArgumentError(_WHERE, "cache_policy", "presample", "'degree' with num_workers > 0 (the "
                                       "trainers are not in an RPC world to sample warm-up batches), or a folder cache")
        cache = build_cache(graph_store, feature_store, s.policy, cache_ratio=s.ratio, num_neighbors=s.num_neighbors,
                            timeout=s.timeout, transfer="rpc" if ctx.joins_rpc else "collective")
        feature_store.set_cache(cache)
        LOG.info("rank %d: feature cache %s", ctx.rank, cache)
    if s.gpu_bytes is None:
        return None
    gpu_cache = build_device_cache(feature_store, graph_store, world.device, s.gpu_bytes, timeout=s.timeout)
    LOG.info("rank %d: %s", ctx.rank, gpu_cache)
    return gpu_cache


def ready(s: BoundSettings) -> None:
    """Start-up is over: collectives now fail within the failure bound, but for the first batch's gate (every
    rank waits there, within ``s.timeout``, until all have their first batch: :func:`timeouts.first_step_gate`)."""
    timeouts.apply_to_process_group()
    timeouts.hold_first_step(s.timeout)


def teardown(ok: bool, timeout: float = 60.0) -> None:
    """RPC first (graceful only if ``ok``), then the process group; every step runs, errors re-raised."""
    import torch.distributed as dist

    from pyg_dist import rpc

    problems: list = []
    try:
        rpc.shutdown_rpc(graceful=ok, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 -- the process group is still destroyed; re-raised below
        problems.append(exc)
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001
        problems.append(exc)
    if problems and ok:
        raise PyGDistError(f"teardown failed: {problems[0]}") from problems[0]
    for err in problems:
        LOG.warning("teardown after a failure: %s", err)


__all__ = ["StartupSettings", "WorldSettings", "BoundSettings", "OpenSettings", "RpcSettings", "CacheSettings",
           "StartupClock", "World", "resolve_world", "rank_device", "gradient_backend", "prepare_process",
           "join_world_group", "start_rpc", "build_caches", "ready", "teardown"]
