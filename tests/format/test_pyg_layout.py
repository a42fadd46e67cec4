"""Folders in the layout of PyG's own Partitioner (hand-built by pyg_dist.testing; PyG's needs pyg-lib to run)."""
from __future__ import annotations

import torch

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.format import DensePartitionBook, load_original_ids, load_partition, read_meta
from pyg_dist.testing import write_pyg_hetero, write_pyg_homo


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
