"""The out-of-core partitioner's writing half: edges spilled to on-disk buckets by their destination's owner,
then one partition at a time built (CSC, relabelled), written in the same layout and with the same bytes as
:mod:`pyg_dist.partition.writer` (every file ``fsync``'ed; a failed write is a
:class:`~pyg_dist.errors.FileWriteError` naming the file), and measured for the quality report.

Memory: the O(N) node orders, one chunk of edges while spilling, then one partition's edges sorted within
the memory budget (:mod:`.csc`) and its rows, a chunk at a time (:mod:`.rows`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist import _fsio
from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, untyped
from pyg_dist.format import meta as M
from pyg_dist.format.schema import EdgeEntry, GraphEntry, NodeEntry
from pyg_dist.partition.ooc.chunked import ChunkedGraph, check_ids, take_rows
from pyg_dist.partition.ooc.comm import Comm
from pyg_dist.partition.ooc.csc import SortedInEdges, edge_range, mapped
from pyg_dist.partition.ooc.rows import drop_scratch, mapped_rows
from pyg_dist.partition.ooc.spill import Buckets
from pyg_dist.partition.renumber import NodeOrder


@dataclass
class SpilledEdges:
    """One edge type after spilling: per-partition buckets, edge ``bounds``, and ``within_dst`` order."""
    buckets: Buckets
    bounds: Tensor
    within_dst: str


@dataclass
class PartTally:
    """What the quality report needs, gathered while writing the partitions (per partition index, so the
    tallies of several ranks merge with :meth:`merge`)."""
    cut: int = 0
    total: int = 0
    edges_pp: Dict[int, int] = field(default_factory=dict)
    halo_pp: Dict[int, int] = field(default_factory=dict)
    train_pp: Dict[NodeType, Dict[int, int]] = field(default_factory=dict)
    nonfinite: List[str] = field(default_factory=list)
    remote: Dict[NodeType, np.ndarray] = field(default_factory=dict)  # this partition's, marked per source type

    def mark_remote(self, ntype: NodeType, ids: np.ndarray, num_nodes: int) -> None:
        """Marks remote source ids of the partition being written (its halo, once per id)."""
        if ntype not in self.remote:
            self.remote[ntype] = np.zeros(num_nodes, dtype=bool)
        self.remote[ntype][ids] = True

    def close_part(self, p: int) -> None:
        """Counts the partition's halo (distinct remote sources per type, over all its edge types)."""
        self.halo_pp[p] = sum(int(marks.sum()) for marks in self.remote.values())
        self.remote = {}

    @staticmethod
    def merge(tallies: List["PartTally"]) -> "PartTally":
        """One tally from several ranks' (each wrote different partitions)."""
        out = PartTally()
        for t in tallies:
            out.cut, out.total = out.cut + t.cut, out.total + t.total
            out.edges_pp.update(t.edges_pp)
            out.halo_pp.update(t.halo_pp)
            for ntype, per in t.train_pp.items():
                out.train_pp.setdefault(ntype, {}).update(per)
            out.nonfinite += t.nonfinite
        return out


def spill_edges(g: ChunkedGraph, nodes: Dict[NodeType, NodeOrder], num_parts: int, folder: Path, chunk_size: int,
                progress=None, comm: Optional[Comm] = None) -> Dict[EdgeType, SpilledEdges]:
    """Routes every edge, relabelled, to its destination owner's bucket; across ranks, each rank reads its
    share of the chunks and ships each edge to the rank writing its partition (``p % world``)."""
    comm = comm or Comm()
    out = {}
    for i, (et, source) in enumerate(g.edges.items()):
        time = g.edge_time.get(et)
        small = max(g.num_nodes[et[0]], g.num_nodes[et[2]]) < 2 ** 31  # ids spilled as int32 then
        cols: Dict[str, Any] = {"row": np.int32 if small else np.int64, "col": np.int32 if small else np.int64,
                                "eid": np.int64}
        if time is not None:
            cols["time"] = _np_dtype(time)
        buckets = Buckets(folder / f"edges_{i}", num_parts, cols)
        inv_s, inv_d = nodes[et[0]].inv.numpy(), nodes[et[2]].inv.numpy()
        dst_bounds = nodes[et[2]].bounds.numpy()
        for chunk in comm.rounds(source.chunks(chunk_size, comm.mine)):
            start, src, dst = chunk if chunk is not None else (0, np.zeros(0, np.int64), np.zeros(0, np.int64))
            check_ids(src, dst, g.num_nodes[et[0]], g.num_nodes[et[2]], source, start)
            col = inv_d[dst]
            row = {"row": inv_s[src], "col": col, "eid": np.arange(start, start + src.size)}
            if time is not None:
                row["time"] = take_rows(time, np.arange(start, start + src.size)).numpy().astype(cols["time"])
            part = np.searchsorted(dst_bounds, col, side="right") - 1
            row["part"] = part
            got = comm.exchange(part % comm.world, row)
            buckets.append(got.pop("part"), **got)
            if progress is not None:
                progress.update(src.size)
        counts = comm.all_reduce_(buckets.counts.copy())
        bounds = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]))
        out[et] = SpilledEdges(buckets, bounds, "edge_time" if time is not None else "input")
    return out


def _np_dtype(arr) -> np.dtype:
    return torch.empty(0, dtype=arr.dtype).numpy().dtype if isinstance(arr, Tensor) else arr.dtype


def _graph_entry(g, et, sp: SpilledEdges, dst: NodeOrder, p: int, perms: Path, tally: PartTally,
                 src_bounds: Tensor, budget: int) -> Tuple[Dict[str, Any], SortedInEdges]:
    """Partition ``p``'s CSC of ``et`` over memory-mapped arrays (:mod:`.csc`: sorted within ``budget`` bytes),
    and the sorted edges (closed once the entry is saved)."""
    s_lo, s_hi = int(src_bounds[p]), int(src_bounds[p + 1])
    d_lo, d_hi = int(dst.bounds[p]), int(dst.bounds[p + 1])

    def count(row: np.ndarray) -> None:  # the quality report: cut edges, halo sources
        remote = row[(row < s_lo) | (row >= s_hi)]
        tally.cut += remote.size
        tally.total += row.size
        tally.mark_remote(et[0], remote, g.num_nodes[et[0]])

    edges = SortedInEdges(sp.buckets, p, d_lo, d_hi, perms, perms / f"perm_{M.edge_type_str(et)}_{p}.npy",
                          budget, on_slice=count)
    lo, hi = edge_range(sp.bounds, p)
    tally.edges_pp[p] = tally.edges_pp.get(p, 0) + hi - lo
    entry = GraphEntry(row=torch.from_numpy(edges.row), col=torch.from_numpy(edges.col),
                       edge_id=torch.arange(lo, hi), size=(g.num_nodes[et[0]], g.num_nodes[et[2]]),
                       colptr=torch.from_numpy(edges.colptr), dst_start=d_lo, dst_end=d_hi).to_dict()
    return entry, edges


def _edge_entry(g, et, sp: SpilledEdges, p: int, perms: Path, tally: PartTally, allow: bool,
                feature_dtype: Optional[torch.dtype], budget: int):
    attrs = g.edge_attrs.get(et, {})
    if not attrs and et not in g.edge_time:
        return None
    eid = np.load(perms / f"perm_{M.edge_type_str(et)}_{p}.npy")
    out = EdgeEntry(torch.arange(int(sp.bounds[p]), int(sp.bounds[p + 1])),
                    mapped_rows(attrs, eid, f"edge attribute {et}", tally.nonfinite, allow, feature_dtype,
                                _scratch(perms, "edge", et, p), budget))
    if et in g.edge_time:
        out.edge_time = take_rows(g.edge_time[et], eid)
    return out.to_dict()


def _node_entry(g, t: NodeType, no: NodeOrder, p: int, perms: Path, tally: PartTally, allow: bool,
                feature_dtype: Optional[torch.dtype], budget: int) -> Dict[str, Any]:
    lo, hi = int(no.bounds[p]), int(no.bounds[p + 1])
    idx = no.perm[lo:hi].numpy()
    out = NodeEntry(torch.arange(lo, hi), mapped_rows(g.node_attrs.get(t, {}), idx, f"node attribute {t}",
                                                       tally.nonfinite, allow, feature_dtype,
                                                       _scratch(perms, "node", t, p), budget))
    if "train_mask" in out.feats:
        tally.train_pp.setdefault(t, {})[p] = int(out.feats["train_mask"].long().sum())
    if t in g.node_time:
        out.time = take_rows(g.node_time[t], idx)
    return out.to_dict()


def _scratch(perms: Path, kind: str, key, p: int) -> Path:
    name = M.edge_type_str(key) if kind == "edge" else str(key)
    return perms / f"{kind}_{name}_{p}"


def write_part(root: Path, perms: Path, g: ChunkedGraph, nodes: Dict[NodeType, NodeOrder],
               edges: Dict[EdgeType, SpilledEdges], p: int, tally: PartTally, allow_nonfinite: bool,
               feature_dtype: Optional[torch.dtype] = None, budget: int = 2 << 30) -> None:
    """Writes ``part_<p>/{graph,node_feats,edge_feats}.pt`` from partition ``p``'s bucket (and its original
    edge ids to ``perms``, for the edge maps), features in ``feature_dtype`` (``None``: as given); its edges are
    sorted, and its rows taken, within ``budget`` bytes of working memory (:mod:`.csc`, :mod:`.rows`)."""
    h = g.is_hetero
    tally.edges_pp[p] = 0
    built = {et: _graph_entry(g, et, sp, nodes[et[2]], p, perms, tally, nodes[et[0]].bounds, budget)
             for et, sp in edges.items()}
    tally.close_part(p)
    _fsio.save(untyped({et: entry for et, (entry, _) in built.items()}, HOMO_EDGE, h), M.graph_path(root, p))
    for _, sorted_edges in built.values():
        sorted_edges.close()
    del built
    nfeat = {t: _node_entry(g, t, no, p, perms, tally, allow_nonfinite, feature_dtype, budget)
             for t, no in nodes.items()}
    _fsio.save(untyped(nfeat, HOMO_NODE, h), M.node_feats_path(root, p))
    del nfeat  # the rows' scratch files go with the tensors over them
    for t in nodes:
        drop_scratch(_scratch(perms, "node", t, p), g.node_attrs.get(t, {}))
    efeat = {et: e for et, sp in edges.items()
             if (e := _edge_entry(g, et, sp, p, perms, tally, allow_nonfinite, feature_dtype, budget)) is not None}
    _fsio.save(untyped(efeat, HOMO_EDGE, h) if h else efeat.get(HOMO_EDGE, {}), M.edge_feats_path(root, p))
    del efeat
    for et in edges:
        drop_scratch(_scratch(perms, "edge", et, p), g.edge_attrs.get(et, {}))


def write_node_maps(root: Path, g: ChunkedGraph, nodes: Dict[NodeType, NodeOrder]) -> None:
    """``node_map`` (id -> partition, PyG layout), original node ids and the full node time per type."""
    for t, no in nodes.items():
        _fsio.save(range_map(no.bounds), M.node_map_path(root, t, g.is_hetero))
        _fsio.save(no.perm, M.original_node_ids_path(root, t))
        if t in g.node_time:
            _fsio.save(take_rows(g.node_time[t], no.perm.numpy()), M.full_node_time_path(root, t))


def write_edge_maps(root: Path, perms: Path, g: ChunkedGraph, edges: Dict[EdgeType, SpilledEdges]) -> None:
    """``edge_map`` and original edge ids per type (from the per-partition files), one array at a time."""
    for et, sp in edges.items():  # each array over a scratch file: 8 bytes per edge that need not fit in memory
        n, parts = int(sp.bounds[-1]), sp.bounds.numel() - 1
        emap = mapped(perms / "edge_map.npy", n)
        for p in range(parts):
            emap[int(sp.bounds[p]):int(sp.bounds[p + 1])] = p
        _fsio.save(torch.from_numpy(emap), M.edge_map_path(root, et, g.is_hetero))
        del emap
        (perms / "edge_map.npy").unlink(missing_ok=True)
        files = [perms / f"perm_{M.edge_type_str(et)}_{p}.npy" for p in range(parts)]
        perm = mapped(perms / "edge_ids.npy", n)
        for p, f in enumerate(files):
            perm[int(sp.bounds[p]):int(sp.bounds[p + 1])] = np.load(f, mmap_mode="r")
            f.unlink()
        _fsio.save(torch.from_numpy(perm), M.original_edge_ids_path(root, et))
        del perm
        (perms / "edge_ids.npy").unlink(missing_ok=True)


def range_map(bounds: Tensor) -> Tensor:
    """``[bounds[-1]]`` int64: the range (partition) of every id, filled range by range (one allocation;
    ``repeat_interleave`` would also allocate an index of the same size)."""
    out = torch.empty(int(bounds[-1]), dtype=torch.long)
    for p in range(bounds.numel() - 1):
        out[int(bounds[p]):int(bounds[p + 1])] = p
    return out


def save_npy(path: Path, array: np.ndarray) -> None:
    """A temporary ``.npy`` (original edge ids of one partition, for the edge maps); typed error on failure."""
    with _fsio.writing(path, needed=array.nbytes):
        np.save(path, array)
