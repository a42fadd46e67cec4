"""Writes a relabelled graph in PyG's partition layout (plus the ``pyg_dist`` extras), atomically and durably.

Everything goes into a hidden sibling folder first, every file ``fsync``'ed as it is written; META.json is
written last, the folders are synced and the folder is then swapped into place in one atomic step
(:func:`pyg_dist._fsio.replace_dir`), so a crash never leaves a folder that looks complete, and a failure
removes the temporary folder. A full disk or any other ``OSError`` is a
:class:`~pyg_dist.errors.FileWriteError` naming the file (and the bytes needed and free). Saved objects are
plain dicts of tensors (``torch.load(weights_only=True)`` works).
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import torch
from torch import Tensor
from tqdm.auto import tqdm

from pyg_dist import _fsio
from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType, untyped
from pyg_dist.cache.file import (
    DEFAULT_CACHE_ATTRS,
    CacheEntry,
    rows_within,
    save_feature_cache,
    save_topology_cache,
)
from pyg_dist.cache.ranking import degree_ranked
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import meta as M
from pyg_dist.format.schema import WEIGHT, EdgeEntry, GraphEntry, NodeEntry, TopologyCacheEntry
from pyg_dist.partition.renumber import EdgeOrder, NodeOrder
from pyg_dist.partition.source import TypedGraph

_WHERE = "Partitioner"


def check_output(out, overwrite: bool) -> Path:
    """Raises :class:`InvalidArgumentError` unless ``out`` is new, empty, or ``overwrite`` is set."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(_WHERE, "out", str(out), "a folder path (a file exists there)")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise InvalidArgumentError(_WHERE, "out", str(out), "an empty or new folder (or pass overwrite=True / "
                                   "--overwrite)")
    return out


def prepare_output(out, overwrite: bool) -> Path:
    """Checks ``out`` and returns a fresh temporary sibling folder to write into."""
    out = check_output(out, overwrite)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    with _fsio.writing(tmp):
        out.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    return tmp


def finalize_output(tmp: Path, out) -> None:
    """Syncs every folder of the finished temporary folder and swaps it in at ``out`` in one atomic step (an
    old folder there is removed after the swap; see :func:`pyg_dist._fsio.replace_dir`)."""
    _fsio.fsync_tree(tmp)
    _fsio.replace_dir(tmp, out)


@contextmanager
def removed_on_error(*folders: Path):
    """Deletes ``folders`` (a temporary output, spill files) when the block raises, then re-raises."""
    try:
        yield
    except BaseException:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def estimate_bytes(g: TypedGraph, num_parts: int, hybrid: bool) -> int:
    """Bytes of the tensors a partitioning of ``g`` writes: ``graph.pt`` (row, col, edge id per edge, in every
    partition when ``hybrid``; a CSC pointer per destination), the node and edge files (global id, every
    attribute, time), the maps and original ids. The files' framing and the optional caches (at most
    ``cache_ratio`` of the feature bytes) come on top, so the folder is a little larger, never smaller."""
    nb = lambda t: t.numel() * t.element_size()  # noqa: E731
    copies = num_parts if hybrid else 1
    total = 0
    for t, n in g.num_nodes.items():
        time = nb(g.node_time[t]) if t in g.node_time else 0
        total += 3 * 8 * n + sum(nb(v) for v in g.node_attrs.get(t, {}).values()) + 2 * time
    for et in g.edge_types:
        e, n_dst = g.num_edges(et), g.num_nodes[et[2]]
        attrs = sum(nb(v) for v in g.edge_attrs.get(et, {}).values())
        time = nb(g.edge_time[et]) if et in g.edge_time else 0
        colptr = 8 * num_parts * (n_dst + 1) if hybrid else 8 * (n_dst + num_parts)
        total += copies * 3 * 8 * e + colptr + 2 * 8 * e
        if attrs or time:
            total += 8 * e + attrs + time
        if hybrid:
            total += copies * (time + (nb(g.edge_attrs[et][WEIGHT]) if WEIGHT in g.edge_attrs.get(et, {}) else 0))
    return total


def _take(t: Tensor, idx: Tensor) -> Tensor:
    return t.index_select(0, idx)


def graph_part(g: TypedGraph, et: EdgeType, eo: EdgeOrder, dst: NodeOrder, p: int,
               hybrid: bool) -> Dict[str, object]:
    """``graph.pt`` entry of one edge type: in-edges of owned destinations (all edges in hybrid).

    Keys: PyG's ``row`` / ``col`` (global ids), ``edge_id``, ``size``; plus ``colptr`` (CSC over the
    destination range ``[dst_start, dst_end)``), ``dst_start``, ``dst_end``; in hybrid also the
    per-edge ``edge_time`` / ``weight`` the sampler needs (elsewhere they live in ``edge_feats.pt``).
    """
    if hybrid:
        lo, hi, d_lo, d_hi = 0, eo.row.numel(), 0, g.num_nodes[et[2]]
    else:
        lo, hi = int(eo.bounds[p]), int(eo.bounds[p + 1])
        d_lo, d_hi = int(dst.bounds[p]), int(dst.bounds[p + 1])
    out = GraphEntry(row=eo.row[lo:hi].clone(), col=eo.col[lo:hi].clone(), edge_id=torch.arange(lo, hi),
                     size=(g.num_nodes[et[0]], g.num_nodes[et[2]]),
                     colptr=eo.colptr[d_lo:d_hi + 1] - lo, dst_start=d_lo, dst_end=d_hi)
    if hybrid:
        if et in g.edge_time:
            out.edge_time = _take(g.edge_time[et], eo.perm)
        if WEIGHT in g.edge_attrs[et]:
            out.weight = _take(g.edge_attrs[et][WEIGHT], eo.perm)
    return out.to_dict()


def node_part(g: TypedGraph, t: NodeType, no: NodeOrder, p: int) -> Dict[str, object]:
    """``node_feats.pt`` entry: ``global_id``, ``feats`` (every node attribute), ``time`` of owned nodes."""
    lo, hi = int(no.bounds[p]), int(no.bounds[p + 1])
    idx = no.perm[lo:hi]
    out = NodeEntry(torch.arange(lo, hi), {k: _take(v, idx) for k, v in g.node_attrs.get(t, {}).items()})
    if t in g.node_time:
        out.time = _take(g.node_time[t], idx)
    return out.to_dict()


def edge_part(g: TypedGraph, et: EdgeType, eo: EdgeOrder, p: int) -> Optional[Dict[str, object]]:
    """``edge_feats.pt`` entry of owned edges, or ``None`` when the type has no attributes or time."""
    attrs = g.edge_attrs.get(et, {})
    if not attrs and et not in g.edge_time:
        return None
    lo, hi = int(eo.bounds[p]), int(eo.bounds[p + 1])
    idx = eo.perm[lo:hi]
    out = EdgeEntry(torch.arange(lo, hi), {k: _take(v, idx) for k, v in attrs.items()})
    if et in g.edge_time:
        out.edge_time = _take(g.edge_time[et], idx)
    return out.to_dict()


def _write_part(root: Path, g: TypedGraph, nodes: Dict[NodeType, NodeOrder],
                edges: Dict[EdgeType, EdgeOrder], p: int, hybrid: bool) -> None:
    h = g.is_hetero
    graph = {et: graph_part(g, et, eo, nodes[et[2]], p, hybrid) for et, eo in edges.items()}
    _fsio.save(untyped(graph, HOMO_EDGE, h), M.graph_path(root, p))
    del graph
    nfeat = {t: node_part(g, t, no, p) for t, no in nodes.items()}
    _fsio.save(untyped(nfeat, HOMO_NODE, h), M.node_feats_path(root, p))
    del nfeat
    efeat = {et: e for et, eo in edges.items() if (e := edge_part(g, et, eo, p)) is not None}
    _fsio.save(untyped(efeat, HOMO_EDGE, h) if h else efeat.get(HOMO_EDGE, {}), M.edge_feats_path(root, p))


def write_parts(root: Path, g: TypedGraph, nodes: Dict[NodeType, NodeOrder],
                edges: Dict[EdgeType, EdgeOrder], num_parts: int, hybrid: bool, progress: bool,
                threads: int = 2) -> None:
    """Writes ``part_<i>/{graph,node_feats,edge_feats}.pt`` for every partition, ``threads`` at a time
    (gathers and file writes release the GIL; two parts in flight keep both cores busy)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max(1, min(threads, num_parts))) as pool:
        jobs = [pool.submit(_write_part, root, g, nodes, edges, p, hybrid) for p in range(num_parts)]
        try:
            for job in tqdm(jobs, desc="writing partitions", disable=not progress):
                job.result()  # re-raises a failed write here
        except BaseException:
            for job in jobs:
                job.cancel()  # a full disk fails once, not once per partition still queued
            raise


def write_stamps(root: Path, fingerprint: str, nodes: Mapping[NodeType, Any], edges: Dict[EdgeType, Any],
                 num_parts: int, hybrid: bool) -> None:
    """``part_<i>/pyg_dist.json``: the folder's fingerprint, the partition index and its item counts (owned
    nodes per type, ``graph.pt`` edges per type), so a part copied from another partitioning is caught."""
    import json
    for p in range(num_parts):
        stamp = {"fingerprint": fingerprint, "part": p,
                 "nodes": {t: int(no.bounds[p + 1] - no.bounds[p]) for t, no in nodes.items()},
                 "graph_edges": {M.edge_type_str(et): int(eo.row.numel() if hybrid else eo.bounds[p + 1]
                                                          - eo.bounds[p]) for et, eo in edges.items()}}
        _fsio.write_text(M.part_stamp_path(root, p), json.dumps(stamp))  # folder made for a part written elsewhere


def write_maps(root: Path, g: TypedGraph, nodes: Dict[NodeType, NodeOrder],
               edges: Dict[EdgeType, EdgeOrder], num_parts: int) -> None:
    """``node_map`` / ``edge_map`` (id -> partition, PyG layout), original ids and full node time."""
    parts = torch.arange(num_parts)
    for t, no in nodes.items():
        _fsio.save(torch.repeat_interleave(parts, torch.diff(no.bounds)), M.node_map_path(root, t, g.is_hetero))
        _fsio.save(no.perm, M.original_node_ids_path(root, t))
        if t in g.node_time:
            _fsio.save(_take(g.node_time[t], no.perm), M.full_node_time_path(root, t))
    for et, eo in edges.items():
        _fsio.save(torch.repeat_interleave(parts, torch.diff(eo.bounds)), M.edge_map_path(root, et, g.is_hetero))
        _fsio.save(eo.perm, M.original_edge_ids_path(root, et))


def write_caches(root: Path, g: TypedGraph, nodes: Dict[NodeType, NodeOrder], edges: Dict[EdgeType, EdgeOrder],
                 num_parts: int, cache_ratio: float, fingerprint: str, topology: bool = False) -> None:
    """``part_<i>/feature_cache.pt``: per node type the remote nodes with the most edges into partition
    ``i``'s owned nodes (policy ``"degree"``), as many as ``cache_ratio`` of the partition's own bytes of
    the cached attributes allow, with their rows (see :mod:`pyg_dist.cache`). With ``topology``
    also ``part_<i>/topology_cache.pt``: the in-edges of those nodes (:func:`topology_entries`)."""
    for p in range(num_parts):
        entries = {}
        for t, no in nodes.items():
            cols = {n: v for n, v in g.node_attrs.get(t, {}).items() if n in DEFAULT_CACHE_ATTRS}
            if t in g.node_time:
                cols["time"] = g.node_time[t]
            lo, hi = int(no.bounds[p]), int(no.bounds[p + 1])
            row_bytes = sum(v[0].numel() * v.element_size() for v in cols.values() if v.size(0))
            n = rows_within(cache_ratio * (hi - lo) * row_bytes, row_bytes)
            if not cols or not n:
                continue
            sources = [eo.row[int(eo.bounds[p]):int(eo.bounds[p + 1])] for et, eo in edges.items() if et[0] == t]
            owned = torch.zeros(g.num_nodes[t], dtype=torch.bool)
            owned[lo:hi] = True
            ids = torch.sort(degree_ranked(sources, owned)[:n]).values
            orig = no.perm.index_select(0, ids)
            entries[t] = CacheEntry(ids, {k: _take(v, orig) for k, v in cols.items()})
        info = {"policy": "degree", "cache_ratio": cache_ratio, "part": p, "fingerprint": fingerprint}
        save_feature_cache(M.feature_cache_path(root, p), entries, info)
        if topology:
            topo = {M.edge_type_str(et): topology_entries(eo, entries[et[2]].ids)
                    for et, eo in edges.items() if et[2] in entries}
            save_topology_cache(M.topology_cache_path(root, p), info, topo)


def topology_entries(eo: EdgeOrder, ids: Tensor) -> Dict[str, Tensor]:
    """The in-edges of destinations ``ids`` (sorted), in the owner's order: ``ids``, ``count`` per id,
    ``row`` (global sources) and ``edge_id`` (global edge ids), grouped by destination."""
    starts, counts = eo.colptr.index_select(0, ids), eo.colptr.index_select(0, ids + 1) - eo.colptr.index_select(0, ids)
    offsets = torch.cumsum(counts, 0) - counts
    pos = torch.repeat_interleave(starts - offsets, counts) + torch.arange(int(counts.sum()))
    return TopologyCacheEntry(ids, counts, eo.row.index_select(0, pos), pos).to_dict()
