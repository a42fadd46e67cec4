"""The out-of-core partitioner: graphs whose edge list does not fit in memory, same folder as :class:`Partitioner`.

Pipeline (per-node state is O(N); edges only ever in chunks, one block, or one partition at a time):

1. one pass over the edge chunks counts in-degrees (a balance constraint, as for METIS);
2. assignment: ``random`` (as the in-memory ``random``, bit for bit), ``fennel`` (restreaming Fennel) or
   ``coarsen`` (label propagation, METIS on the cluster graph, refinement), the last two over a symmetric
   adjacency spilled to disk in node blocks (:class:`~pyg_dist.partition.ooc.spill.BlockAdjacency`);
3. relabelling (contiguous ranges, as in memory), edges spilled by their destination's owner;
4. one partition at a time: CSC order, ``graph.pt`` / ``node_feats.pt`` / ``edge_feats.pt`` with feature
   rows gathered from memory-mapped arrays; then the maps, the quality report and META.json.

Example:
    >>> from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    >>> part = OutOfCorePartitioner("/data/graph", 4, "coarsen", memory_budget="2GB")  # doctest: +SKIP
    >>> stats = part.save("/tmp/graph-4")  # doctest: +SKIP
"""
from __future__ import annotations

import logging
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from pyg_dist import _fsio
from pyg_dist._types import NodeType
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format import digests as D
from pyg_dist.format import meta as M
from pyg_dist.partition import assign
from pyg_dist.partition.config import PartitionConfig
from pyg_dist.partition.ooc.chunked import ChunkedGraph, check_ids, chunked_from_data, open_chunked
from pyg_dist.partition.ooc.comm import Comm
from pyg_dist.partition.ooc.spill import BlockAdjacency
from pyg_dist.partition.ooc.write import (
    PartTally,
    save_npy,
    spill_edges,
    write_edge_maps,
    write_node_maps,
    write_part,
)
from pyg_dist.partition.partitioner import _Clock, build_meta
from pyg_dist.partition.renumber import order_nodes
from pyg_dist.partition.report import _balance, _constraint_balance, folder_bytes, format_report
from pyg_dist.partition.writer import finalize_output, prepare_output, removed_on_error, write_stamps

_WHERE = "OutOfCorePartitioner"
LOG = logging.getLogger("pyg_dist")
_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KIB": 2 ** 10, "MIB": 2 ** 20,
          "GIB": 2 ** 30, "TIB": 2 ** 40}


def parse_bytes(value: Union[int, str], name: str = "memory_budget") -> int:
    """``8GB``, ``512MiB``, ``1.5e9`` or an int -> bytes; raises :class:`InvalidArgumentError` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", str(value))
    unit = m.group(2).upper() if m else None
    try:
        number = float(m.group(1)) if m else -1.0
    except ValueError:
        number = -1.0
    if unit not in _UNITS or number <= 0:
        raise InvalidArgumentError(_WHERE, name, value, "a positive size such as 8GB, 512MB or 2GiB")
    return int(number * _UNITS[unit])


def _as_graph(data) -> ChunkedGraph:
    if isinstance(data, ChunkedGraph):
        return data.check()
    if isinstance(data, (str, Path)):
        return open_chunked(data)
    return chunked_from_data(data)


class OutOfCorePartitioner:
    """Partitions a graph read in chunks from disk into ``num_parts`` partitions, with bounded memory.

    Args:
        data: A :class:`~pyg_dist.partition.ooc.chunked.ChunkedGraph`, a folder for
            :func:`~pyg_dist.partition.ooc.chunked.open_chunked`, or an in-memory ``Data`` / ``HeteroData``.
        num_parts: Number of partitions.
        method: ``"coarsen"`` (label propagation + METIS on the clusters + refinement; the best cut),
            ``"fennel"`` (restreaming Fennel) or ``"random"`` (identical to the in-memory ``random``).
        seed: Seed of every random choice.
        ufactor: Allowed imbalance per balance constraint, in thousandths (30 = 3 %).
        balance: Balance on node count, train/val/test counts and in-degree (else nodes only).
        passes: Fennel passes (default 3) or ``coarsen`` refinement passes (default 2; 0 = none).
        memory_budget: Working memory to plan chunk and block sizes for (``"8GB"``, bytes); O(N) node
            state and one partition's edges come on top.
        chunk_size: Edges per chunk (default from ``memory_budget``).
        allow_nonfinite: Keep NaN / inf feature rows (reported) instead of raising.
        feature_dtype: Store the features as ``"float32"``, ``"bfloat16"`` or ``"float16"`` (cast as each
            partition's rows are gathered; ``None``: as given): as :class:`~pyg_dist.partition.Partitioner`'s.
        workdir: Where the spill files go (default: inside the output's temporary folder).
        comm: Several machines: a :class:`~pyg_dist.partition.ooc.comm.TorchComm` over the initialised gloo
            process group (``world_comm()`` under ``torchrun``); every rank calls :meth:`save` with the
            same arguments. Each reads its share of the chunks, ships edges to the rank writing their
            partition (``p % world``) and writes those partitions; rank 0 writes the maps. The input must
            be readable by every rank (a shared filesystem, or a copy on each machine); ``out`` may be
            shared (one folder, META.json written once, by rank 0) or on each machine's own disk (one
            rank per machine; each folder gets META.json, every stamp and its own partitions, rank 0's
            the maps too). Spill files stay local. Together, the folders are the one a single process
            writes, byte for byte.
    """

    def __init__(self, data, num_parts: int, method: str = "coarsen", *, seed: int = 0, ufactor: int = 30,
                 balance: bool = True, passes: Optional[int] = None, memory_budget: Union[int, str] = "2GB",
                 chunk_size: Optional[int] = None, allow_nonfinite: bool = False,
                 workdir: Optional[Union[str, Path]] = None, comm: Optional[Comm] = None,
                 feature_dtype: Optional[Union[str, torch.dtype]] = None):
        self.config = PartitionConfig(num_parts, method, seed=seed, ufactor=ufactor, balance=balance, passes=passes,
                                      memory_budget=parse_bytes(memory_budget), chunk_size=chunk_size,
                                      out_of_core=True, feature_dtype=feature_dtype)
        if not isinstance(allow_nonfinite, bool):
            raise InvalidArgumentError(_WHERE, "allow_nonfinite", allow_nonfinite, "a bool")
        self.allow_nonfinite, self.workdir, self.comm = allow_nonfinite, workdir, comm or Comm()
        self.graph = _as_graph(data)
        if num_parts > self.graph.total_nodes():
            raise InvalidArgumentError(_WHERE, "num_parts", num_parts,
                                       f"<= number of nodes ({self.graph.total_nodes()})")
        self.info: Dict[str, Any] = {}

    def _bar(self, desc: str, total: int, progress: bool):
        return tqdm(total=total, desc=desc, unit_scale=True, disable=not progress, leave=False)

    def in_degrees(self, progress: bool = False) -> Dict[NodeType, torch.Tensor]:
        """In-degree of every node, from one pass over the edge chunks."""
        g, out = self.graph, {t: np.zeros(n, dtype=np.int64) for t, n in self.graph.num_nodes.items()}
        total = sum(g.num_edges(et) for et in g.edge_types)
        with self._bar("in-degrees", total, progress) as bar:
            for et, source in g.edges.items():
                for start, src, dst in source.chunks(self.config.edges_per_chunk, self.comm.mine):
                    check_ids(src, dst, g.num_nodes[et[0]], g.num_nodes[et[2]], source, start)
                    out[et[2]] += np.bincount(dst, minlength=g.num_nodes[et[2]])[:g.num_nodes[et[2]]]
                    bar.update(src.size)
        return {t: torch.from_numpy(self.comm.all_reduce_(v)) for t, v in out.items()}

    def weights(self, progress: bool = False):
        """``(constraint names, [N, C] int64 weights)``: the METIS balance constraints."""
        if not self.config.balance:
            return ["nodes"], np.ones((self.graph.total_nodes(), 1), dtype=np.int64)
        return assign.constraint_weights(self.graph, self.in_degrees(progress))

    def assign(self, weights: np.ndarray, work: Path, progress: bool = False) -> Dict[NodeType, np.ndarray]:
        """Partition of every node per type (int64 arrays)."""
        g, c = self.graph, self.config
        if c.method == "random":
            return {t: v.numpy() for t, v in assign.random_assign(g.num_nodes, c.num_parts, c.seed).items()}
        entries = 2 * sum(g.num_edges(et) for et in g.edge_types)
        block = max(1, int(g.total_nodes() * (c.memory_budget // 160) / max(entries, 1)))
        with self._bar("adjacency", entries // 2, progress) as bar:
            adj = BlockAdjacency(g, work / "adjacency", block, c.edges_per_chunk, bar, self.comm)
        self.info.update(blocks=adj.num_blocks)
        try:
            if c.method == "fennel":
                passes = c.passes or 3
                with self._bar(f"fennel x{passes}", passes * g.total_nodes(), progress) as bar:
                    flat = _fennel(adj, weights, c, passes, bar)
            else:
                from pyg_dist.partition.ooc.coarsen import coarsen_assign
                refine = 2 if c.passes is None else c.passes
                with self._bar("coarsen", (3 + refine) * g.total_nodes(), progress) as bar:
                    flat, info = coarsen_assign(adj, weights, c.num_parts, c.seed, c.ufactor, refine=refine,
                                                progress=bar)
                self.info.update(info)
        finally:
            adj.close()
        off = g.offsets()
        return {t: flat[off[t]:off[t] + n] for t, n in g.num_nodes.items()}

    def save(self, out: Union[str, Path], overwrite: bool = False, progress: bool = True,
             verbose: bool = False) -> Dict[str, Any]:
        """Partitions and writes the folder ``out``; returns the quality statistics (also in META).

        Raises:
            FileWriteError: a write failed (a full disk, spill files included): names the file (or the spill
                folder) and the cause; the temporary folders are removed.
        """
        comm, progress = self.comm, progress and self.comm.rank == 0
        tmp, self._shared = shared_output(out, overwrite, comm)
        with removed_on_error(tmp):
            with _fsio.writing(self.workdir or tmp):
                work = Path(tempfile.mkdtemp(prefix=f".spill-{comm.rank}-", dir=self.workdir or tmp))
            with tqdm(total=5, desc="partition (out-of-core)", disable=not progress) as bar, \
                    removed_on_error(work), _fsio.writing(work, only=_fsio.FULL):  # a full spill folder too
                clock = _Clock(bar)
                stats, meta = self._partition(tmp, work, clock, progress)
                shutil.rmtree(work, ignore_errors=True)
                comm.barrier()
                if comm.rank == 0 or not self._shared:  # local disks: every machine gets META and the stamps
                    M.write_meta(tmp, meta)
                    finalize_output(tmp, out)
                comm.barrier()
                clock.start(None)
        if verbose:
            print(format_report(stats))
        return stats

    def _partition(self, tmp: Path, work: Path, clock: _Clock, progress: bool):
        """Every stage; each O(N) array is dropped as soon as the stages after it no longer need it."""
        g, c = self.graph, self.config
        clock.start("weights")
        names, weights = self.weights(progress)
        clock.start(f"assign ({c.method})")
        parts = self.assign(weights, work, progress)
        nodes = {t: order_nodes(torch.from_numpy(parts.pop(t)), torch.zeros(n, dtype=torch.long), c.num_parts, 1)
                 for t, n in g.num_nodes.items()}
        clock.start("write")
        with self._bar("spill edges", sum(g.num_edges(et) for et in g.edge_types), progress) as bar:
            edges = spill_edges(g, nodes, c.num_parts, work, c.edges_per_chunk, bar, self.comm)
        perms, tally = tmp / ".perm", PartTally()  # per-partition original edge ids, for rank 0's edge maps
        perms.mkdir(exist_ok=True)
        for p in tqdm(range(c.num_parts), desc="writing partitions", disable=not progress, leave=False):
            if self.comm.mine(p):
                write_part(tmp, perms, g, nodes, edges, p, tally, self.allow_nonfinite, c.stored_dtype, c.memory_budget)
        tally = PartTally.merge(self.comm.all_gather(tally))  # also: every partition is written
        if not self._shared:
            collect_perms(self.comm, perms, edges, c.num_parts)
        for line in tally.nonfinite:
            LOG.warning("OutOfCorePartitioner keeps non-finite values: %s", line)
        stats = quality_report(tally, nodes, c.num_parts, names, weights, g)
        del weights
        bounds = self._write_maps(tmp, perms, nodes, edges)
        del nodes
        clock.start("digests")
        files = folder_digests(self.comm, tmp, c.num_parts)
        fingerprint = D.folder_fingerprint(files)  # the folder id: the same on every rank, from the same list
        if self.comm.rank == 0 or not self._shared:
            write_stamps(tmp, fingerprint, bounds, edges, c.num_parts, False)
        sizes = self.comm.all_gather({p: folder_bytes(M.part_dir(tmp, p)) for p in range(c.num_parts)
                                      if self.comm.mine(p)})
        stats["bytes_per_part"] = [next(s[p] for s in sizes if p in s) for p in range(c.num_parts)]
        clock.start("meta")
        stats["seconds"], stats["cpu_seconds"] = clock.seconds, clock.cpu_seconds
        used = [] if c.method == "random" else names
        meta = build_meta(g, c, tmp, bounds, edges, used, stats, fingerprint, files=files,
                          out_of_core={"memory_budget": c.memory_budget, **self.info})
        return stats, meta

    def _write_maps(self, tmp: Path, perms: Path, nodes, edges) -> Dict[NodeType, SimpleNamespace]:
        """Rank 0 writes the node and edge maps (and original ids); returns the node bounds per type (the
        caller drops the node orders before the edge maps, the largest arrays, are built)."""
        if self.comm.rank == 0:
            write_node_maps(tmp, self.graph, nodes)
        bounds = {t: SimpleNamespace(bounds=o.bounds, sub_bounds=o.sub_bounds) for t, o in nodes.items()}
        nodes.clear()  # the permutations
        if self.comm.rank == 0:
            write_edge_maps(tmp, perms, self.graph, edges)
        if self.comm.rank == 0 or not self._shared:
            shutil.rmtree(perms, ignore_errors=True)
        for sp in edges.values():
            sp.buckets.close()
        return bounds


def shared_output(out, overwrite: bool, comm: Comm) -> Tuple[Path, bool]:
    """The temporary output folder and whether every rank shares it: rank 0 makes it
    (:func:`prepare_output`); when no other rank sees it (each machine's own disk), every rank makes its own.

    Raises:
        PyGDistError: on every rank, when a rank refused ``out`` (e.g. not empty), or when only some ranks
            see rank 0's folder (run one rank per machine, or give every rank the same shared folder).
    """
    if comm.world == 1:
        return prepare_output(out, overwrite), True
    token = comm.broadcast_object(uuid.uuid4().hex)
    tmp, error = _prepare(out, overwrite, token) if comm.rank == 0 else (None, None)
    tmp, error = comm.broadcast_object((tmp, error))
    if error is not None:
        raise PyGDistError(f"rank 0: {error}")
    try:
        return _share(out, overwrite, comm, Path(tmp), token)
    except BaseException:
        if comm.rank == 0:  # its folder; another rank's own one is removed by _own_folder
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _share(out, overwrite: bool, comm: Comm, tmp: Path, token: str) -> Tuple[Path, bool]:
    """Whether every rank sees rank 0's temporary folder ``tmp`` (its ``.ranks`` holds ``token``); each rank's
    own folder where none does."""
    seen = tmp / ".ranks"
    views = comm.all_gather(seen.is_file() and seen.read_text() == token)
    comm.barrier()
    shared = all(views)
    if comm.rank == 0:
        seen.unlink()
    if any(views[1:]) and not shared:
        raise InvalidArgumentError(_WHERE, "out", str(out), f"a folder all ranks share, or one per rank (ranks "
                                   f"{[r for r, v in enumerate(views) if v]} share rank 0's {tmp}, the others not)")
    if not shared:
        tmp = _own_folder(out, overwrite, comm, tmp)
    return Path(tmp), shared


def _own_folder(out, overwrite: bool, comm: Comm, tmp0) -> Path:
    """Local disks: every rank's own temporary folder; two ranks that see each other's is an error."""
    token = uuid.uuid4().hex
    tmp, error = _prepare(out, overwrite, token) if comm.rank else (Path(tmp0), None)
    if comm.rank == 0:
        (Path(tmp0) / ".ranks").write_text(token)
    views = comm.all_gather((str(tmp), token, error))
    errors = [e for _, _, e in views if e is not None]
    clash = [r for r, (path, tok, _) in enumerate(views)
             if r != comm.rank and (Path(path) / ".ranks").is_file() and (Path(path) / ".ranks").read_text() == tok]
    clash = sorted(set(sum(comm.all_gather(clash), [])))
    comm.barrier()
    if tmp is not None:
        (Path(tmp) / ".ranks").unlink(missing_ok=True)
    if (errors or clash) and comm.rank and tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)  # this rank's own folder (rank 0's: shared_output)
    if errors:
        raise PyGDistError(f"a rank refused the output folder: {errors[0]}")
    if clash:
        raise InvalidArgumentError(_WHERE, "out", str(out), f"one rank per machine when out is on local disks "
                                   f"(ranks {clash} share a disk but not rank 0's)")
    return Path(tmp)


def _prepare(out, overwrite: bool, token: str):
    try:
        tmp = prepare_output(out, overwrite)
        (tmp / ".ranks").write_text(token)
        return tmp, None
    except PyGDistError as e:
        return None, str(e)


def folder_digests(comm: Comm, tmp: Path, num_parts: int) -> D.FileList:
    """Every listed file's size and digest: each rank hashes the partitions it wrote (rank 0 also the shared
    files: maps, original ids) and every rank gets the whole list (one ``all_gather``)."""
    mine = [p for p in range(num_parts) if comm.mine(p)]
    files: D.FileList = {}
    for part in comm.all_gather(D.file_digests(tmp, D.listed_paths(tmp, num_parts, mine, comm.rank == 0))):
        files.update(part)
    return files


def collect_perms(comm: Comm, perms: Path, edges, num_parts: int) -> None:
    """Local disks: every partition's original edge ids move to rank 0 (for the edge maps), one at a time."""
    for et in edges:
        for p in range(num_parts):
            src = comm.owner(p)
            if src == 0:
                continue
            path = perms / f"perm_{M.edge_type_str(et)}_{p}.npy"
            got = comm.move_to_root(np.load(path) if comm.rank == src else None, src)
            if comm.rank == 0 and got is not None:
                save_npy(path, got)


def _fennel(adj: BlockAdjacency, weights: np.ndarray, c: PartitionConfig, passes: int, bar):
    """:func:`~pyg_dist.partition.ooc.streaming.fennel_assign` with the config's slack (``ufactor``)."""
    from pyg_dist.partition.ooc.streaming import fennel_assign
    return fennel_assign(adj, weights, c.num_parts, passes=passes, slack=c.ufactor / 1000, progress=bar)


def quality_report(tally: PartTally, nodes, num_parts: int, names, weights, g) -> Dict[str, Any]:
    """The same statistics as :func:`pyg_dist.partition.report.quality_stats`, from the writer's tally."""
    nodes_pp = {t: torch.diff(o.bounds).tolist() for t, o in nodes.items()}
    owned = int(sum(sum(v) for v in nodes_pp.values()))
    edges_pp = [tally.edges_pp[p] for p in range(num_parts)]
    halo_pp = [tally.halo_pp[p] for p in range(num_parts)]
    train_pp = {t: [per[p] for p in range(num_parts)] for t, per in tally.train_pp.items()}
    stats: Dict[str, Any] = {
        "num_parts": num_parts, "edge_cut": tally.cut / tally.total if tally.total else 0.0,
        "edges_per_part": edges_pp, "edge_balance": _balance(edges_pp),
        "nodes_per_part": nodes_pp, "node_balance": {t: _balance(v) for t, v in nodes_pp.items()},
        "halo_nodes_per_part": halo_pp, "halo_ratio": float(sum(halo_pp) / max(owned, 1)),
        "train_per_part": train_pp, "train_balance": {t: _balance(v) for t, v in train_pp.items()},
    }
    stats["constraint_balance"] = _constraint_balance(g, nodes, num_parts, names, weights)
    return stats
