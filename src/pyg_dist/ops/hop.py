"""One-hop neighbour sampling on a :class:`~pyg_dist.ops.csc.CSC`: unfused (:func:`one_hop`, what a
remote partition sends back) and fused with relabelling (:func:`sample_hop`, what a batch uses).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, PyGDistError, check_choice
from pyg_dist.ops._torch_kernels import sample_torch
from pyg_dist.ops.backend import numba_call, resolve_backend
from pyg_dist.ops.csc import CSC, normalize_time
from pyg_dist.ops.keys import key_generator, mix, random_key

TEMPORAL_STRATEGIES = ("uniform", "last")
_E64 = np.empty(0, np.int64)
_EF64 = np.empty(0, np.float64)


@dataclass
class OneHop:
    """Result of :func:`one_hop`, grouped by seed in seed order.

    Attributes:
        nbr: Global ids of the sampled neighbours (the ``row`` values).
        edge: Their global edge ids.
        count: Number of samples of each seed (``nbr`` is split by it).
    """

    nbr: Tensor
    edge: Tensor
    count: Tensor


@dataclass
class Hop:
    """Result of :func:`sample_hop`: one edge type's sampled edges as batch-local indices."""

    row: Tensor   # local index of the neighbour in the source type's relabeler
    col: Tensor   # local index of the seed in the destination type's node list
    edge: Tensor  # global edge ids


class EdgeBuffer:
    """One edge type's sampled edges over the hops of a batch, written in place by the numba kernels
    (``capacity`` is a hint; it grows by doubling), so no concatenation at the end."""

    def __init__(self, capacity: int = 1024):
        self.size = 0
        self._a = np.empty((4, max(int(capacity), 16)), np.int64)  # nbr, edge, col, row

    def take(self, total: int):
        """Views ``(nbr, edge, col, row)`` of the next ``total`` slots."""
        if self.size + total > self._a.shape[1]:
            grown = np.empty((4, max(self.size + total, 2 * self._a.shape[1])), np.int64)
            grown[:, :self.size] = self._a[:, :self.size]
            self._a = grown
        lo, self.size = self.size, self.size + total
        return tuple(self._a[i, lo:self.size] for i in range(4))

    def tensors(self):
        """``(row, col, edge)`` of everything taken so far."""
        return tuple(torch.from_numpy(self._a[i, :self.size]) for i in (3, 2, 1))

    def append_one_hop(self, res: "OneHop", seed_offset: int, relabeler, seed_batch: Optional[Tensor]) -> "Hop":
        """Adds an unfused one-hop result (e.g. merged from several partitions): neighbours relabelled
        into ``relabeler``, seed ``i``'s local index ``seed_offset + i``."""
        count = res.count.numpy().astype(np.int64, copy=False)
        nbr, edge, col, row = self.take(int(res.nbr.numel()))
        nbr[:] = res.nbr.numpy()
        edge[:] = res.edge.numpy()
        col[:] = np.repeat(np.arange(seed_offset, seed_offset + count.size, dtype=np.int64), count)
        batch = None if seed_batch is None else np.repeat(seed_batch.numpy(), count)
        relabeler.add_numpy(nbr, batch, out=row)
        return Hop(torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(edge))

    def append_pieces(self, size: int, pieces: Sequence[Tuple[Tensor, "OneHop"]], seed_offset: int, relabeler,
                      seed_batch: Optional[Tensor]) -> "Hop":
        """Adds one hop answered in pieces, merged in seed order straight into the buffer (no merged copy).

        Args:
            size: Number of seeds.
            pieces: ``(positions, OneHop)``: the seeds at ``positions`` (the pieces' positions cover
                ``range(size)`` once) and their samples (checked by
                :func:`pyg_dist.store.routing.segment_pieces`).
            seed_offset: Batch-local index of seed 0 (seed ``i`` gets ``seed_offset + i``).
            relabeler: The source type's relabeler (neighbours get batch-local ids in seed order).
            seed_batch: Subgraph id of each seed (disjoint sampling), else ``None``.
        """
        from pyg_dist.ops._numba_rows import place_segments
        parts = [(pos.numpy(), h.count.numpy().astype(np.int64, copy=False), h.nbr.numpy(), h.edge.numpy())
                 for pos, h in pieces]
        counts = np.zeros(size, np.int64)
        for pos, count, _, _ in parts:
            counts[pos] = count
        start = np.zeros(size + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        total = sum(p[2].shape[0] for p in parts)
        if int(start[-1]) != total or (size and int(counts.min()) < 0):
            raise PyGDistError(f"one-hop pieces of {size} seeds count {int(start[-1])} samples and hold {total}")
        nbr, edge, col, row = self.take(total)
        for pos, count, p_nbr, p_edge in parts:
            place_segments(pos, count, p_nbr, p_edge, start, seed_offset, nbr, edge, col)
        batch = None if seed_batch is None else np.repeat(seed_batch.numpy(), counts)
        relabeler.add_numpy(nbr, batch, out=row)
        return Hop(torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(edge))


class TensorBuffer:
    """The torch backend's counterpart of :class:`EdgeBuffer`: collects hop tensors, concatenates once."""

    def __init__(self, capacity: int = 0):
        self._parts: Tuple[List[Tensor], List[Tensor], List[Tensor]] = ([], [], [])

    def append(self, hop: "Hop") -> None:
        """Adds one hop's ``row`` / ``col`` / ``edge`` tensors."""
        for part, value in zip(self._parts, (hop.row, hop.col, hop.edge)):
            part.append(value)

    def append_one_hop(self, res: "OneHop", seed_offset: int, relabeler, seed_batch: Optional[Tensor]) -> "Hop":
        """Adds an unfused one-hop result, as :meth:`EdgeBuffer.append_one_hop`."""
        dev = res.nbr.device
        col = torch.repeat_interleave(torch.arange(seed_offset, seed_offset + res.count.numel(), device=dev),
                                      res.count)
        batch = None if seed_batch is None else torch.repeat_interleave(seed_batch, res.count)
        hop = Hop(relabeler.add(res.nbr, batch), col, res.edge)
        self.append(hop)
        return hop

    def append_pieces(self, size: int, pieces: Sequence[Tuple[Tensor, "OneHop"]], seed_offset: int, relabeler,
                      seed_batch: Optional[Tensor]) -> "Hop":
        """Adds one hop answered in pieces, as :meth:`EdgeBuffer.append_pieces` (merged, then appended)."""
        from pyg_dist.ops.rows import scatter_segments
        pos = torch.cat([p for p, _ in pieces])
        counts = torch.cat([h.count.to(torch.int64) for _, h in pieces])
        nbr, edge = (torch.cat([getattr(h, name) for _, h in pieces]) for name in ("nbr", "edge"))
        merged = scatter_segments(pos, counts, nbr, edge)
        return self.append_one_hop(OneHop(*merged), seed_offset, relabeler, seed_batch)

    def tensors(self):
        """``(row, col, edge)`` of everything appended so far."""
        return tuple(torch.cat(p) if p else torch.empty(0, dtype=torch.int64) for p in self._parts)


class _ReplyBuffer:
    """What :func:`one_hop` samples into: ``nbr`` and ``edge`` on storages of their own (the reply holds
    16 bytes per sample, not a view pinning :class:`EdgeBuffer`'s four rows), ``col`` scratch freed after;
    each from ``alloc(n)`` (an int64 array of ``n``; default ``np.empty``)."""

    def __init__(self, alloc: Optional[Callable[[int], np.ndarray]] = None):
        self.alloc = alloc or (lambda n: np.empty(n, np.int64))

    def take(self, total: int):
        return self.alloc(total), self.alloc(total), self.alloc(total), None


def make_edge_buffer(backend: str, capacity: int = 1024):
    """The output buffer :func:`sample_hop` fills for ``backend`` ('numba' or 'torch')."""
    return EdgeBuffer(capacity) if backend == "numba" else TensorBuffer(capacity)


def _kernel_times(csc: CSC, node_time: Optional[Tensor],
                  seed_time: Optional[Tensor]) -> Tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(tmode, node time, edge time, seed time)`` as the numba kernels take them: ``tmode`` 0 = no
    time, 1 = node time of the source, 2 = edge time; the arrays not used are empty."""
    if seed_time is None:
        return 0, _E64, _E64, _E64
    if csc.edge_time is not None:
        tmode, t = 2, csc.edge_time.numpy()
    else:
        assert node_time is not None, "checked by _check: temporal sampling needs node or edge time"
        tmode, t = 1, node_time.numpy()
    empty_t = _E64 if t.dtype == np.int64 else _EF64
    # int times vs float seed times: t <= s  <=>  t <= floor(s)
    st = seed_time.numpy()
    st = (np.floor(st) if st.dtype.kind == "f" and t.dtype == np.int64 else st).astype(t.dtype, copy=False)
    return tmode, (t if tmode == 1 else empty_t), (t if tmode == 2 else empty_t), st


def _numba_sample(csc: CSC, seeds: Tensor, seed_offset: int, k: int, replace: bool, last: bool,
                  node_time: Optional[Tensor], seed_time: Optional[Tensor], key: int, id_offset: int = 0,
                  seed_batch: Optional[Tensor] = None, out=None, skip: int = 0):
    """Runs the two numba passes; returns numpy ``(nbr, edge, col, count, row_slot)`` (``row_slot``:
    where the relabelled rows go, a view into ``out`` or a fresh array; ``None`` from a :class:`_ReplyBuffer`)."""
    tmode, nt, et, st = _kernel_times(csc, node_time, seed_time)
    has_w = csc.weight is not None
    w = csc.weight.numpy() if csc.weight is not None else _EF64
    colptr, row = csc.colptr.numpy(), csc.row.numpy()
    s = seeds.numpy()
    start, deg = np.empty(s.shape[0], np.int64), np.empty(s.shape[0], np.int64)
    has_eid = csc.edge_id is not None
    eid = csc.edge_id.numpy() if csc.edge_id is not None else _E64
    with numba_call() as kern:
        counts = kern.count_kernel(colptr, row, s, k, replace and not last, has_w, w, tmode,
                                          nt, et, st, start, deg)
        offsets = np.zeros(s.shape[0] + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        nbr, edge, col, row_slot = (out if out is not None else EdgeBuffer(total)).take(total)
        sub = _E64 if seed_batch is None else seed_batch.numpy()
        kern.sample_kernel(start, deg, row, has_eid, eid, csc.edge_offset, seed_offset, offsets,
                           replace and not last, last, has_w, w, tmode, nt, et, st, key, s, id_offset, sub, nbr,
                           edge, col, int(skip))
    return nbr, edge, col, counts, row_slot


def _check(where: str, csc: CSC, seeds: Tensor, k, strategy: str, node_time, seed_time) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < -1:
        raise InvalidArgumentError(where, "num_neighbors", k, "an int >= -1 (-1 = all neighbours)")
    check_choice(where, "temporal_strategy", strategy, TEMPORAL_STRATEGIES)
    if seeds.dim() != 1 or seeds.dtype != torch.int64:
        raise InvalidArgumentError(where, "seeds", seeds, "a 1-D int64 tensor")
    if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= csc.num_dst):
        raise InvalidArgumentError(where, "seeds", seeds, f"local destination indices in [0, {csc.num_dst})")
    if seed_time is not None:
        if seed_time.shape != seeds.shape:
            raise InvalidArgumentError(where, "seed_time", seed_time, f"one time per seed ({seeds.numel()})")
        if csc.edge_time is None and node_time is None:
            raise InvalidArgumentError(where, "seed_time", "given", "node_time or csc.edge_time to compare with")


def one_hop(csc: CSC, seeds: Tensor, num_neighbors: int, *, replace: bool = False,
            node_time: Optional[Tensor] = None, seed_time: Optional[Tensor] = None,
            temporal_strategy: str = "uniform", backend: str = "auto", key: Optional[int] = None,
            id_offset: int = 0, seed_batch: Optional[Tensor] = None,
            generator: Optional[torch.Generator] = None, skip: int = 0,
            alloc: Optional[Callable[[int], np.ndarray]] = None) -> OneHop:
    """Samples up to ``num_neighbors`` in-neighbours of each seed (unfused: no relabelling).

    Args:
        csc: The edge type's in-edges; ``seeds`` index its ``colptr``.
        seeds: int64 local destination indices (in a partition: ``dst_global - dst_start``).
        num_neighbors: Fanout; ``-1`` takes every (allowed) neighbour.
        replace: Sample with replacement (then exactly ``num_neighbors`` per seed with neighbours).
        node_time: Timestamps of the SOURCE node type, indexed by ``row`` values (temporal by node time).
        seed_time: One timestamp per seed; enables temporal sampling (edge time if ``csc.edge_time``,
            else ``node_time``): no neighbour newer than its seed is ever returned.
        temporal_strategy: ``'uniform'`` among allowed neighbours, or ``'last'`` (the most recent).
        backend: ``'auto'``, ``'numba'`` or ``'torch'``.
        key: The random key of this call (an int; see :mod:`pyg_dist.ops.keys`). With numba, seed
            ``i`` draws from the stream of ``(key, seeds[i] + id_offset, seed_batch[i])``, so its
            sample does not depend on the other seeds; the torch backend seeds a generator with it.
            Default: one draw from ``generator``.
        id_offset: Added to ``seeds`` to get global ids (a partition's CSC starts at its first id).
        seed_batch: The subgraph of each seed (disjoint sampling: repeats of a node draw apart).
        generator: Torch generator the default ``key`` is drawn from (default: torch's global one).
        skip: With ``replace`` (and not ``'last'``): each seed's draws start at draw ``skip`` of its stream,
            so with numba the samples are the samples ``skip, ..., skip + num_neighbors - 1`` of a sample of
            more than ``num_neighbors`` (a large sample taken in pieces of draws equals it whole); the torch
            backend mixes ``skip`` into its key instead (independent draws: the same distribution).
        alloc: ``alloc(n)`` -> an int64 numpy array of ``n`` for each output of the numba kernels (e.g. an
            owner's recycled reply buffers); default ``np.empty``.

    Returns:
        :class:`OneHop` grouped by seed, in seed order. Edges with zero ``csc.weight`` are never drawn.

    Example:
        >>> csc = CSC.from_edge_index(torch.tensor([[1, 2, 3], [0, 0, 0]]), num_dst=4)
        >>> out = one_hop(csc, torch.tensor([0, 3]), 2)
        >>> out.count.tolist(), out.nbr.numel()
        ([2, 0], 2)
    """
    _check("one_hop", csc, seeds, num_neighbors, temporal_strategy, node_time, seed_time)
    node_time, seed_time = normalize_time(node_time), normalize_time(seed_time)
    last = temporal_strategy == "last" and seed_time is not None
    if not isinstance(skip, int) or isinstance(skip, bool) or skip < 0 or (skip and (not replace or last)):
        raise InvalidArgumentError("one_hop", "skip", skip, "an int >= 0, and 0 unless sampling with replacement "
                                   "(temporal strategy not 'last')")
    key = random_key(generator) if key is None else key
    if resolve_backend(backend, seeds.device, "one_hop") == "torch":
        nbr, edge, count = sample_torch(csc, seeds, num_neighbors, replace, last, node_time, seed_time,
                                        key_generator(mix(key, skip) if skip else key, seeds.device))
        return OneHop(nbr, edge, count)
    nbr, edge, _, count, _ = _numba_sample(csc, seeds, 0, num_neighbors, replace, last, node_time, seed_time,
                                           key, id_offset, seed_batch, _ReplyBuffer(alloc), skip)
    return OneHop(torch.from_numpy(nbr), torch.from_numpy(edge), torch.from_numpy(count))


def sample_hop(csc: CSC, seeds: Tensor, seed_offset: int, num_neighbors: int, relabeler, *,
               replace: bool = False, temporal_strategy: str = "uniform",
               node_time: Optional[Tensor] = None, seed_time: Optional[Tensor] = None,
               seed_batch: Optional[Tensor] = None, backend: str = "auto", key: Optional[int] = None,
               id_offset: int = 0, generator: Optional[torch.Generator] = None, out=None) -> Hop:
    """One hop sampled and relabelled in one go (the batch path of the multi-hop sampler).

    Like :func:`one_hop`, but the neighbours are added to ``relabeler`` (the source type's node list,
    see :func:`pyg_dist.ops.make_relabeler`) and returned as local ``row`` indices; ``col`` is the
    seed's own local index ``seed_offset + position`` (a frontier is a contiguous range of the
    destination type's node list); ``seed_batch`` gives each seed's subgraph when the relabeler is
    disjoint. ``out`` (from :func:`make_edge_buffer` for the same backend) collects the hop's edges.
    ``key``, ``id_offset``: as in :func:`one_hop`. Arguments are trusted (the sampler checked them).
    """
    last = temporal_strategy == "last" and seed_time is not None
    key = random_key(generator) if key is None else key
    if resolve_backend(backend, seeds.device, "sample_hop") == "torch":
        nbr, edge, count = sample_torch(csc, seeds, num_neighbors, replace, last, node_time, seed_time,
                                        key_generator(key, seeds.device))
        return _append(out, OneHop(nbr, edge, count), seed_offset, relabeler, seed_batch)
    nbr, edge, col, count, row = _numba_sample(csc, seeds, seed_offset, num_neighbors, replace, last,
                                               node_time, seed_time, key, id_offset, seed_batch, out)
    batch = None if seed_batch is None else np.repeat(seed_batch.numpy(), count)
    relabeler.add_numpy(nbr, batch, out=row)
    return Hop(torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(edge))


def _append(out, res: OneHop, seed_offset: int, relabeler, seed_batch: Optional[Tensor]) -> Hop:
    if out is None:
        out = TensorBuffer()
    return out.append_one_hop(res, seed_offset, relabeler, seed_batch)


def _warm_batch_kernels() -> None:
    """The numba kernels of a distributed batch besides sampling: routing by owner, row copies, merges."""
    from pyg_dist.ops._numba_rows import place_segments
    from pyg_dist.ops.graph_kernels import count_by_range, rows_in_range, split_by_range
    from pyg_dist.ops.rows import copy_rows, scatter_segments, take_rows
    ids, bounds = torch.tensor([3, 0, 1]), np.array([0, 2, 4], dtype=np.int64)  # what a partition book routes
    split_by_range(ids.numpy(), bounds), count_by_range(ids.numpy(), bounds)
    rows_in_range(ids.numpy(), 0, 2, np.empty(3, np.int64))
    for shape in ((2, 2), (2,)):  # rows of 8-byte words (features, labels) and of 4-byte ones (float time)
        copy_rows(torch.zeros((3,) + shape[1:]), ids[1:], torch.ones(shape), ids[1:])
        take_rows(torch.ones(shape), ids[1:], torch.empty((2,) + shape[1:]))
    scatter_segments(torch.tensor([1, 0]), torch.tensor([1, 1]), ids[:2], ids[:2])
    one, two = np.ones(2, np.int64), np.arange(2, dtype=np.int64)  # two seeds, one sample each, swapped
    outs = [np.empty(2, np.int64) for _ in range(3)]
    place_segments(two[::-1].copy(), one, two, two, np.arange(3, dtype=np.int64), 0, *outs)


def warmup(announce_after: float = 1.0) -> float:
    """Loads (or, the very first time, compiles and caches) the numba kernels; returns the seconds.

    The first call in a process otherwise pays this inside the first batch (about 1 s with a warm
    numba cache; 15-30 s when nothing is cached yet). Call it in DataLoader ``worker_init_fn`` or
    at start-up to move that cost out of the first batch. A no-op without numba. When loading takes
    longer than ``announce_after`` seconds (a first run on this machine: the kernels compile), the
    ``pyg_dist`` logger says so at INFO, and again with the duration when done.

    Example:
        >>> seconds = warmup()  # doctest: +SKIP
    """
    import logging
    import threading
    import time

    from pyg_dist.ops.backend import numba_available
    log = logging.getLogger("pyg_dist")
    t0 = time.perf_counter()
    if not numba_available():
        return 0.0
    timer = threading.Timer(announce_after, log.info, ("compiling sampling kernels (once per machine; "
                                                       "later runs load them from numba's cache) ...",))
    timer.daemon = True
    timer.start()
    try:
        _warm_sampling_kernels()
        _warm_batch_kernels()
    finally:
        timer.cancel()
    seconds = time.perf_counter() - t0
    if seconds > announce_after:
        log.info("sampling kernels ready in %.1f s", seconds)
    return seconds


def _warm_sampling_kernels() -> None:
    """One tiny call of each sampling kernel: the serial build (1 thread) and the parallel one."""
    from pyg_dist.ops.relabel import make_relabeler
    wide = CSC.from_edge_index(torch.tensor([[1, 2], [0, 0]]), num_dst=3)
    seeds = torch.tensor([0, 1])
    threads = torch.get_num_threads()
    try:
        for n, csc in itertools.product({1, threads}, (wide, wide.compact())):  # int64 and int32 ids
            torch.set_num_threads(n)
            one_hop(csc, seeds, 1, backend="numba", key=0)  # key given: no draw from the global generator
            for disjoint in (False, True):
                rel = make_relabeler(3, disjoint=disjoint, backend="numba")
                sample_hop(csc, seeds, 0, 1, rel, seed_batch=seeds if disjoint else None, backend="numba", key=0)
                rel.close()
    finally:
        torch.set_num_threads(threads)
