"""Folders in the layout of PyG's own Partitioner (hand-built here; PyG's needs pyg-lib to run)."""
from __future__ import annotations

import json

import torch

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, edge_type_str
from pyg_dist.datasets import synthetic_graph
from pyg_dist.partition import DensePartitionBook, load_original_ids, load_partition, read_meta


def _sorted_csc(row, col, eid):
    order = torch.sort(col, stable=True).indices
    return row[order], col[order], eid[order], order


def write_pyg_homo(data, owner, root, num_parts):
    """What torch_geometric.distributed.Partitioner writes for a Data (ids not relabelled)."""
    root.mkdir()
    row, col = data.edge_index
    for p in range(num_parts):
        d = root / f"part_{p}"
        d.mkdir()
        eid = (owner[col] == p).nonzero().view(-1)
        r, c, e, _ = _sorted_csc(row[eid], col[eid], eid)
        torch.save({"edge_id": e, "row": r, "col": c, "size": (data.num_nodes,) * 2}, d / "graph.pt")
        nid = (owner == p).nonzero().view(-1).flip(0)  # METIS order: not sorted
        torch.save({"global_id": nid, "feats": {"x": data.x[nid]}, "time": data.time}, d / "node_feats.pt")
        torch.save({"global_id": e, "feats": {"edge_attr": data.edge_attr[e]}, "edge_time": data.edge_time[e]},
                   d / "edge_feats.pt")
    torch.save(owner, root / "node_map.pt")
    torch.save(owner[col], root / "edge_map.pt")
    meta = {"num_parts": num_parts, "node_types": None, "edge_types": None, "node_offset": None,
            "is_hetero": False, "is_sorted": True}
    (root / "META.json").write_text(json.dumps(meta))


def test_pyg_homo_folder_reads_back(tmp_path):
    data = synthetic_graph(300, 6, node_time=True, edge_time=True, edge_dim=2, seed=1)
    owner = torch.randint(0, 3, (300,), generator=torch.Generator().manual_seed(0))
    write_pyg_homo(data, owner, tmp_path / "pyg", 3)
    meta = read_meta(tmp_path / "pyg")
    assert not meta.is_native and meta.method == "pyg" and meta.num_nodes[HOMO_NODE] == 300
    assert torch.equal(load_original_ids(tmp_path / "pyg")[HOMO_NODE], torch.arange(300))
    x = torch.zeros_like(data.x)
    ea = torch.zeros_like(data.edge_attr)
    edges_seen = torch.zeros(data.num_edges, dtype=torch.long)
    for p in range(3):
        pd = load_partition(tmp_path / "pyg", p)
        assert isinstance(pd.book, DensePartitionBook)
        nf, gp, ef = pd.node_feats[HOMO_NODE], pd.graph[HOMO_EDGE], pd.edge_feats[HOMO_EDGE]
        assert torch.equal(nf.global_id, pd.book.owned_ids(HOMO_NODE, p))
        assert torch.equal(pd.book.to_local(HOMO_NODE, nf.global_id), torch.arange(nf.global_id.numel()))
        assert torch.equal(nf.time, data.time[nf.global_id])
        assert torch.equal(pd.full_node_time[HOMO_NODE], data.time)
        x[nf.global_id] = nf.feats["x"]
        ea[ef.global_id] = ef.feats["edge_attr"]
        dst = torch.repeat_interleave(torch.arange(300), torch.diff(gp.colptr))
        assert torch.equal(torch.stack([gp.row, dst]), data.edge_index[:, gp.edge_id])
        assert torch.equal(gp.edge_time, data.edge_time[gp.edge_id])
        edges_seen[gp.edge_id] += 1
    assert torch.equal(x, data.x) and torch.equal(ea, data.edge_attr)
    assert bool((edges_seen == 1).all())


def write_pyg_hetero(data, owners, root, num_parts):
    """PyG's hetero layout: homogeneous (offset) ids in graph.pt edge_id and node_feats global_id."""
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


def test_pyg_hetero_folder_reads_back(tmp_path):
    data = synthetic_graph(300, 6, hetero=True, node_time=True, edge_dim=2, seed=2)
    gen = torch.Generator().manual_seed(1)
    owners = {t: torch.randint(0, 2, (data[t].num_nodes,), generator=gen) for t in data.node_types}
    write_pyg_hetero(data, owners, tmp_path / "pyg", 2)
    meta = read_meta(tmp_path / "pyg")
    assert meta.is_hetero and not meta.is_native and meta.edge_types == data.edge_types
    seen = {et: torch.zeros(data[et].num_edges, dtype=torch.long) for et in data.edge_types}
    for p in range(2):
        pd = load_partition(tmp_path / "pyg", p)
        for t, nf in pd.node_feats.items():
            assert torch.equal(nf.feats["x"], data[t].x[nf.global_id])
            assert bool((pd.book.owner(t, nf.global_id) == p).all())
            assert torch.equal(pd.full_node_time[t], data[t].time)
        for et, gp in pd.graph.items():
            dst = torch.repeat_interleave(torch.arange(gp.dst_end), torch.diff(gp.colptr))
            assert torch.equal(torch.stack([gp.row, dst]), data[et].edge_index[:, gp.edge_id])
            ef = pd.edge_feats[et]
            assert torch.equal(ef.feats["edge_attr"], data[et].edge_attr[ef.global_id])
            seen[et][gp.edge_id] += 1
    assert all(bool((s == 1).all()) for s in seen.values())
