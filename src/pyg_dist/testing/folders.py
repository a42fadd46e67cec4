"""Partition folders for tests: exact reassembly, and folders in PyG's own layout.

A folder is reassembled into the original graph, and folders are hand-written in the layout of PyG's
own ``torch_geometric.distributed.Partitioner`` (which needs pyg-lib to run).

- :func:`reassemble` / :func:`check_roundtrip`: a partitioned graph reassembles exactly, every node and
  edge feature stored once (topology once, or once per partition for hybrid folders).
- :func:`write_pyg_homo` / :func:`write_pyg_hetero`: what PyG's partitioner writes for a ``Data`` /
  ``HeteroData`` (ids not relabelled; node ids in METIS order, not sorted).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, edge_type_str

PathLike = Union[str, Path]


def _typed_attrs(data) -> Tuple[dict, dict]:
    """Original graph as typed dicts: nodes ``{t: {attr: tensor}}``, edges ``{et: {attr: tensor}}``."""
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        nodes = {t: {k: v for k, v in data[t].items() if k != "num_nodes"} for t in data.node_types}
        edges = {et: dict(data[et].items()) for et in data.edge_types}
        return nodes, edges
    nodes = {HOMO_NODE: {k: v for k, v in data.items() if k in ("x", "y", "time") or k.endswith("_mask")}}
    edges = {HOMO_EDGE: {k: v for k, v in data.items() if k in ("edge_index", "edge_time", "edge_attr",
                                                                   "edge_weight")}}
    return nodes, edges


def _fill(store: dict, key: str, idx: Tensor, value: Tensor, seen: Tensor) -> None:
    if key not in store:
        store[key] = torch.zeros((seen.numel(),) + tuple(value.shape[1:]), dtype=value.dtype)
    store[key][idx] = value


def reassemble(root: PathLike):
    """Rebuilds the graph in original ids from every partition of a folder.

    Args:
        root: A partition folder (pyg_dist's own or PyG's layout).

    Returns:
        ``(meta, nodes, edges, n_seen, e_seen, g_seen)``: the folder's ``PartitionMeta``; per node type
        ``{attr: tensor}`` in original ids (``time`` from the node features, ``full_time`` from the
        full node-time vectors); per edge type ``{attr: tensor}`` in original edge ids
        (``edge_index_T``, ``graph_edge_time`` and ``graph_weight`` from the topology, the others from
        the edge features); and how many times each node feature row, edge feature row and topology
        edge was stored.

    Raises:
        AssertionError: a partition's CSC is inconsistent (destinations, rows and edge ids differ in
            length).
    """
    from pyg_dist.format import load_original_ids, load_partition, read_meta
    meta = read_meta(root)
    orig = load_original_ids(root)
    nodes: Dict[Any, Dict[str, Tensor]] = {t: {} for t in meta.node_types}
    edges: Dict[Any, Dict[str, Tensor]] = {e: {} for e in meta.edge_types}
    n_seen = {t: torch.zeros(meta.num_nodes[t], dtype=torch.long) for t in meta.node_types}
    e_seen = {e: torch.zeros(meta.num_edges[e], dtype=torch.long) for e in meta.edge_types}
    g_seen = {e: torch.zeros(meta.num_edges[e], dtype=torch.long) for e in meta.edge_types}
    for p in range(meta.num_parts):
        pd = load_partition(root, p)
        for t, nf in pd.node_feats.items():
            o = orig[t][nf.global_id]
            n_seen[t][o] += 1
            for k, v in nf.feats.items():
                _fill(nodes[t], k, o, v, n_seen[t])
            if nf.time is not None:
                _fill(nodes[t], "time", o, nf.time, n_seen[t])
        for t, ft in pd.full_node_time.items():
            nodes[t]["full_time"] = torch.empty_like(ft)
            nodes[t]["full_time"][orig[t]] = ft
        for e, gp in pd.graph.items():
            dst = gp.dst_start + torch.repeat_interleave(torch.arange(gp.dst_end - gp.dst_start),
                                                         torch.diff(gp.colptr))
            assert dst.numel() == gp.row.numel() == gp.edge_id.numel()
            oe = orig[e][gp.edge_id]
            g_seen[e][oe] += 1
            ei = torch.stack([orig[e[0]][gp.row], orig[e[2]][dst]])
            _fill(edges[e], "edge_index_T", oe, ei.t(), g_seen[e])
            if gp.edge_time is not None:
                _fill(edges[e], "graph_edge_time", oe, gp.edge_time, g_seen[e])
            if gp.weight is not None:
                _fill(edges[e], "graph_weight", oe, gp.weight, g_seen[e])
        for e, ef in pd.edge_feats.items():
            oe = orig[e][ef.global_id]
            e_seen[e][oe] += 1
            for k, v in ef.feats.items():
                _fill(edges[e], k, oe, v, e_seen[e])
            if ef.edge_time is not None:
                _fill(edges[e], "edge_time", oe, ef.edge_time, e_seen[e])
    return meta, nodes, edges, n_seen, e_seen, g_seen


def check_roundtrip(data, root: PathLike):
    """Asserts that a partition folder reassembles exactly into ``data``.

    Every node feature row and edge feature row is stored exactly once, every topology edge once (once
    per partition in a hybrid folder), and every attribute (features, labels, masks, node and edge
    time, edge weights, the edges themselves) equals the original.

    Args:
        data: The ``Data`` or ``HeteroData`` the folder was written from.
        root: The partition folder.

    Returns:
        The folder's ``PartitionMeta``.

    Raises:
        AssertionError: naming the type (and attribute) that differs.
    """
    meta, nodes, edges, n_seen, e_seen, g_seen = reassemble(root)
    want_nodes, want_edges = _typed_attrs(data)
    topo_copies = meta.num_parts if meta.hybrid else 1
    for t, attrs in want_nodes.items():
        assert bool((n_seen[t] == 1).all()), f"node of {t} stored {n_seen[t].unique().tolist()} times"
        for k, v in attrs.items():
            assert torch.equal(nodes[t][k], v), (t, k)
        if "time" in attrs:
            assert torch.equal(nodes[t]["full_time"], attrs["time"])
    for e, attrs in want_edges.items():
        assert bool((g_seen[e] == topo_copies).all())
        assert torch.equal(edges[e]["edge_index_T"].t(), attrs["edge_index"]), e
        for k, v in attrs.items():
            if k == "edge_index":
                continue
            assert bool((e_seen[e] == 1).all())
            assert torch.equal(edges[e][k], v), (e, k)
        if "edge_time" in attrs:
            assert torch.equal(edges[e]["graph_edge_time"], attrs["edge_time"])
        if "edge_weight" in attrs:
            assert torch.equal(edges[e]["graph_weight"], attrs["edge_weight"])
    return meta


def _sorted_csc(row: Tensor, col: Tensor, eid: Tensor):
    order = torch.sort(col, stable=True).indices
    return row[order], col[order], eid[order], order


def write_pyg_homo(data, owner: Tensor, root: Path, num_parts: int) -> None:
    """Writes what ``torch_geometric.distributed.Partitioner`` writes for a ``Data`` (ids not relabelled).

    Partition ``p`` holds the in-edges of the nodes it owns (sorted by destination) and the features of
    those nodes (in reverse id order, like METIS's unsorted order) and edges: ``x`` and, when present,
    ``y`` per node; ``edge_attr`` per edge; the full ``time`` vector and ``edge_time`` when the graph
    has them.

    Args:
        data: A ``Data`` with ``x`` and ``edge_attr``.
        owner: ``[num_nodes]`` owning partition of every node.
        root: The folder to create (must not exist).
        num_parts: Number of partitions.
    """
    root.mkdir()
    row, col = data.edge_index
    node_keys = [k for k in ("x", "y") if k in data]
    for p in range(num_parts):
        d = root / f"part_{p}"
        d.mkdir()
        eid = (owner[col] == p).nonzero().view(-1)
        r, c, e, _ = _sorted_csc(row[eid], col[eid], eid)
        torch.save({"edge_id": e, "row": r, "col": c, "size": (data.num_nodes,) * 2}, d / "graph.pt")
        nid = (owner == p).nonzero().view(-1).flip(0)  # METIS order: not sorted
        node_feats = {"global_id": nid, "feats": {k: data[k][nid] for k in node_keys}}
        if "time" in data:
            node_feats["time"] = data.time
        edge_feats = {"global_id": e, "feats": {"edge_attr": data.edge_attr[e]}}
        if "edge_time" in data:
            edge_feats["edge_time"] = data.edge_time[e]
        torch.save(node_feats, d / "node_feats.pt")
        torch.save(edge_feats, d / "edge_feats.pt")
    torch.save(owner, root / "node_map.pt")
    torch.save(owner[col], root / "edge_map.pt")
    meta = {"num_parts": num_parts, "node_types": None, "edge_types": None, "node_offset": None,
            "is_hetero": False, "is_sorted": True}
    (root / "META.json").write_text(json.dumps(meta))


def write_pyg_hetero(data, owners: Dict[str, Tensor], root: Path, num_parts: int) -> None:
    """Writes PyG's layout for a ``HeteroData``.

    Homogeneous (offset) ids go into ``graph.pt``'s ``edge_id`` and ``node_feats.pt``'s ``global_id``,
    per-type owner maps under ``node_map/`` and ``edge_map/``.

    Args:
        data: A ``HeteroData`` with ``x`` and ``time`` on every node type and ``edge_attr`` on every
            edge type.
        owners: Per node type, ``[num_nodes]`` owning partition of every node.
        root: The folder to create (must not exist).
        num_parts: Number of partitions.
    """
    root.mkdir()
    noff, acc = {}, 0
    for t in data.node_types:
        noff[t], acc = acc, acc + data[t].num_nodes
    eoff, acc = {}, 0
    for et in data.edge_types:
        eoff[et], acc = acc, acc + data[et].num_edges
    for p in range(num_parts):
        d = root / f"part_{p}"
        d.mkdir()
        graph, nfeat, efeat = {}, {}, {}
        for et in data.edge_types:
            row, col = data[et].edge_index
            eid = (owners[et[2]][col] == p).nonzero().view(-1)
            r, c, e, _ = _sorted_csc(row[eid], col[eid], eid)
            graph[et] = {"edge_id": e + eoff[et], "row": r, "col": c,
                         "size": (data[et[0]].num_nodes, data[et[2]].num_nodes)}
            efeat[et] = {"global_id": e, "feats": {"edge_attr": data[et].edge_attr[e]}}
        for t in data.node_types:
            nid = (owners[t] == p).nonzero().view(-1).flip(0)
            nfeat[t] = {"global_id": nid + noff[t], "id": nid, "feats": {"x": data[t].x[nid]},
                        "time": data[t].time}
        torch.save(graph, d / "graph.pt")
        torch.save(nfeat, d / "node_feats.pt")
        torch.save(efeat, d / "edge_feats.pt")
    (root / "node_map").mkdir()
    (root / "edge_map").mkdir()
    for t in data.node_types:
        torch.save(owners[t], root / "node_map" / f"{t}.pt")
    for et in data.edge_types:
        torch.save(owners[et[2]][data[et].edge_index[1]], root / "edge_map" / f"{edge_type_str(et)}.pt")
    meta = {"num_parts": num_parts, "node_types": data.node_types,
            "edge_types": [list(e) for e in data.edge_types], "node_offset": list(noff.values()),
            "is_hetero": True, "is_sorted": True}
    (root / "META.json").write_text(json.dumps(meta))


def partitioned(root: PathLike, specs: Dict[str, Tuple[Any, int, Dict[str, Any]]]) -> Dict[str, Tuple[Any, Path]]:
    """Writes one partition folder per entry: ``{name: (data, num_parts, Partitioner options)}`` ->
    ``{name: (data, root / name)}`` (what the store tests' module fixtures share).

    Example:
        >>> folders = partitioned(tmp, {"homo": (data, 2, {"method": "random"})})  # doctest: +SKIP
    """
    from pyg_dist.partition.partitioner import Partitioner
    out = {}
    for name, (data, parts, options) in specs.items():
        Partitioner(data, parts, **options).save(Path(root) / name, progress=False)
        out[name] = (data, Path(root) / name)
    return out


def served_folders(jobs, ctx):
    """For each ``(root, spec)`` of ``jobs`` (a folder and the ``synthetic_graph`` options it was made from): the
    graph, its original ids, and this rank's stores opened and served to peers (call before ``init_rpc``); yields
    ``(root, spec, data, orig, graph_store, feature_store)`` (what the multi-rank store and sampler tests share).

    Example:
        >>> for root, spec, data, orig, gs, fs in served_folders(jobs, ctx): ...  # doctest: +SKIP
    """
    from pyg_dist.datasets import synthetic_graph
    from pyg_dist.format import load_original_ids
    from pyg_dist.sampler.dist_neighbor import serve_partition
    from pyg_dist.store import load_stores
    for root, spec in jobs:
        data, orig = synthetic_graph(**spec), load_original_ids(root)
        gs, fs = load_stores(root, ctx=ctx)
        serve_partition(gs, fs)
        yield root, spec, data, orig, gs, fs


__all__ = ["reassemble", "check_roundtrip", "write_pyg_homo", "write_pyg_hetero", "partitioned", "served_folders"]
