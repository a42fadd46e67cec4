"""A trainer's local-only graph: the nodes its partition owns and the edges among them (halo dropped).

Time-based model aggregation trains every trainer on its own partition with nothing fetched from the
others, so the partition is turned into an ordinary in-memory ``Data`` / ``HeteroData`` that the
one-machine :class:`~pyg_dist.loader.NeighborLoader` / ``LinkNeighborLoader`` sample from, with no RPC
world. Local node ``i`` of type ``t`` is the partition's ``i``-th owned node; ``global_id`` maps back to
the folder's ids. Works on every folder the stores read (pyg_dist's and PyG's layouts, hybrid ones).
"""
from __future__ import annotations

from typing import Dict, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist._types import EdgeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import meta as M
from pyg_dist.format.data import PartitionData
from pyg_dist.format.reader import load_partition


def _internal_edges(pd: PartitionData, et: EdgeType) -> Tuple[Tensor, Tensor, Tensor, Dict[str, Tensor]]:
    """``(local src, local dst, global edge id, per-edge attributes)`` of the edges between owned nodes."""
    g, book, part = pd.graph[et], pd.book, pd.part
    deg = g.colptr[1:] - g.colptr[:-1]
    dst = torch.arange(g.dst_start, g.dst_end).repeat_interleave(deg)
    keep = torch.ones(g.row.numel(), dtype=torch.bool)
    if g.row.numel():
        keep = (book.owner(et[0], g.row) == part) & (book.owner(et[2], dst) == part)
    src, dst, eid = g.row[keep], dst[keep], g.edge_id[keep]
    attrs: Dict[str, Tensor] = {}
    if g.edge_time is not None:
        attrs["edge_time"] = g.edge_time[keep]
    ef = pd.edge_feats.get(et)
    if ef is not None and eid.numel():
        rows = book.to_local(et, eid)  # kept edges have owned destinations: their rows live here
        attrs.update({k: v[rows] for k, v in ef.feats.items()})
        if "edge_time" not in attrs and ef.edge_time is not None:
            attrs["edge_time"] = ef.edge_time[rows]
    elif ef is not None:
        attrs.update({k: v[:0] for k, v in ef.feats.items()})
    return book.to_local(et[0], src), book.to_local(et[2], dst), eid, attrs


def local_subgraph(root, part: int, mmap: bool = False) -> Union[Data, HeteroData]:
    """Partition ``part`` of the folder ``root`` as a standalone graph: owned nodes, internal edges.

    Args:
        root: A partition folder (pyg_dist's or PyG's layout).
        part: The partition index.
        mmap: Memory-map the partition files while reading.

    Returns:
        A ``Data`` (homogeneous folder) or ``HeteroData`` with every node attribute of the owned nodes
        (``x``, ``y``, masks, ``time``), ``global_id`` per node, and per edge type the internal edges'
        ``edge_index`` (local ids), ``global_edge_id`` and edge attributes.

    Example:
        >>> data = local_subgraph("/tmp/cora-2", 0)                           # doctest: +SKIP
        >>> loader = NeighborLoader(data, [10, 5], input_nodes=data.train_mask)  # doctest: +SKIP
    """
    meta = M.read_meta(root)
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < meta.num_parts:
        raise InvalidArgumentError("local_subgraph", "part", part, f"an int in [0, {meta.num_parts})")
    pd = load_partition(root, part, mmap=mmap)
    out = HeteroData() if meta.is_hetero else Data()
    for t in meta.node_types:
        store = out[t] if meta.is_hetero else out
        nf = pd.node_feats.get(t)
        ids = nf.global_id.long() if nf is not None else torch.zeros(0, dtype=torch.long)
        store.num_nodes = ids.numel()
        store.global_id = ids
        for k, v in (nf.feats.items() if nf is not None else ()):
            store[k] = torch.as_tensor(v).clone()
        if nf is not None and nf.time is not None:
            store.time = nf.time.clone()
    for et in meta.edge_types:
        store = out[et] if meta.is_hetero else out
        src, dst, eid, attrs = _internal_edges(pd, et)
        store.edge_index = torch.stack([src, dst])
        store.global_edge_id = eid
        for k, v in attrs.items():
            store[k] = torch.as_tensor(v).clone()
    return out


def whole_graph(root) -> Union[Data, HeteroData]:
    """Every partition of ``root`` put back together, in the folder's ids (what an evaluator scores on).

    Node attributes are placed at their global ids; each edge is taken once, from the partition that
    owns it (hybrid folders store every edge in every partition).

    Example:
        >>> full = whole_graph("/tmp/cora-2")                                  # doctest: +SKIP
        >>> acc = (model(full.x, full.edge_index).argmax(-1) == full.y)[full.test_mask].float().mean()  # doctest: +SKIP
    """
    meta = M.read_meta(root)
    out = HeteroData() if meta.is_hetero else Data()
    nodes: Dict[str, Dict[str, list]] = {t: {} for t in meta.node_types}
    edges: Dict[EdgeType, Dict[str, list]] = {e: {} for e in meta.edge_types}
    for p in range(meta.num_parts):
        pd = load_partition(root, p)
        for t, nf in pd.node_feats.items():
            cols = dict(nf.feats, **({"time": nf.time} if nf.time is not None else {}))
            for k, v in dict(cols, _id=nf.global_id.long()).items():
                nodes[t].setdefault(k, []).append(torch.as_tensor(v))
        for et in meta.edge_types:
            g = pd.graph[et]
            dst = torch.arange(g.dst_start, g.dst_end).repeat_interleave(g.colptr[1:] - g.colptr[:-1])
            keep = pd.book.owner(et, g.edge_id) == p if g.edge_id.numel() else torch.zeros(0, dtype=torch.bool)
            for k, v in (("_id", g.edge_id[keep]), ("src", g.row[keep]), ("dst", dst[keep])):
                edges[et].setdefault(k, []).append(v.long())
    for t in meta.node_types:
        store = out[t] if meta.is_hetero else out
        ids = torch.cat(nodes[t].pop("_id"))
        store.num_nodes = meta.num_nodes[t]
        for k, parts in nodes[t].items():
            col = torch.cat(parts)
            full = col.new_zeros((meta.num_nodes[t],) + tuple(col.shape[1:]))
            full[ids] = col
            store[k] = full
    for et in meta.edge_types:
        store = out[et] if meta.is_hetero else out
        order = torch.sort(torch.cat(edges[et]["_id"])).indices
        store.edge_index = torch.stack([torch.cat(edges[et]["src"])[order], torch.cat(edges[et]["dst"])[order]])
    return out


__all__ = ["local_subgraph", "whole_graph"]
