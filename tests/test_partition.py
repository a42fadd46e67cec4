"""Partitioner + reader: exact reassembly for every method, homo and hetero; books; the on-disk format."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.partition import (PartitionBook, Partitioner, load_original_ids, load_partition, read_meta)

METHOD_CASES = [("metis", 1), ("random", 1), ("supernode", 1), ("hybrid", 1), ("metis", 2), ("random", 3)]


def _homo(n=600, seed=0):
    return synthetic_graph(n, 8, num_features=6, community_size=50, node_time=True, edge_time=True,
                           edge_dim=3, edge_weight=True, seed=seed)


def _hetero(n=600, seed=0):
    return synthetic_graph(n, 8, num_features=5, community_size=50, hetero=True, node_time=True,
                           edge_time=True, edge_dim=2, seed=seed)


def _typed(data):
    """Original graph as typed dicts: nodes {t: {attr: tensor}}, edges {et: {attr: tensor}}."""
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        nodes = {t: {k: v for k, v in data[t].items() if k != "num_nodes"} for t in data.node_types}
        edges = {et: dict(data[et].items()) for et in data.edge_types}
        return nodes, edges
    nodes = {HOMO_NODE: {k: v for k, v in data.items() if k in ("x", "y", "time") or k.endswith("_mask")}}
    edges = {HOMO_EDGE: {k: v for k, v in data.items() if k in ("edge_index", "edge_time", "edge_attr",
                                                                   "edge_weight")}}
    return nodes, edges


def _fill(store, key, idx, value, seen):
    if key not in store:
        store[key] = torch.zeros((seen.numel(),) + tuple(value.shape[1:]), dtype=value.dtype)
    store[key][idx] = value


def reassemble(root):
    """Rebuilds the graph in original ids from every partition; checks each item is stored once."""
    meta = read_meta(root)
    orig = load_original_ids(root)
    nodes = {t: {} for t in meta.node_types}
    edges = {e: {} for e in meta.edge_types}
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


def check_roundtrip(data, root):
    meta, nodes, edges, n_seen, e_seen, g_seen = reassemble(root)
    want_nodes, want_edges = _typed(data)
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


@pytest.mark.parametrize("method,sub", METHOD_CASES)
def test_roundtrip_homo(tmp_path, method, sub):
    data = _homo()
    Partitioner(data, 3, method=method, sub_parts=sub, num_clusters=24 if method == "supernode" else None
                ).save(tmp_path / "out", progress=False)
    meta = check_roundtrip(data, tmp_path / "out")
    assert meta.method == method and meta.sub_parts == sub and meta.hybrid == (method == "hybrid")


@pytest.mark.parametrize("method,sub", METHOD_CASES)
def test_roundtrip_hetero(tmp_path, method, sub):
    data = _hetero()
    Partitioner(data, 2, method=method, sub_parts=sub).save(tmp_path / "out", progress=False)
    meta = check_roundtrip(data, tmp_path / "out")
    assert meta.is_hetero and meta.node_types == ["paper", "author", "field"]


def test_hybrid_stores_topology_everywhere_and_features_once(tmp_path):
    data = _homo()
    Partitioner(data, 3, method="hybrid", base_method="random").save(tmp_path / "h", progress=False)
    for p in range(3):
        gp = load_partition(tmp_path / "h", p).graph[HOMO_EDGE]
        assert gp.row.numel() == data.num_edges and (gp.dst_start, gp.dst_end) == (0, data.num_nodes)
    meta = read_meta(tmp_path / "h")
    assert meta.base_method == "random"
    assert sum(meta.stats["nodes_per_part"][HOMO_NODE]) == data.num_nodes


def test_contiguous_ranges_and_book_roundtrip(tmp_path):
    data = _hetero()
    Partitioner(data, 3, method="metis").save(tmp_path / "o", progress=False)
    meta = read_meta(tmp_path / "o")
    for p in range(3):
        pd = load_partition(tmp_path / "o", p)
        book = pd.book
        assert isinstance(book, PartitionBook)
        for t, nf in pd.node_feats.items():
            lo, hi = book.owned_range(t, p)
            assert torch.equal(nf.global_id, torch.arange(lo, hi))
            assert bool((book.owner(t, nf.global_id) == p).all())
            assert torch.equal(book.to_local(t, nf.global_id), torch.arange(hi - lo))
            assert torch.equal(book.to_global(t, p, torch.arange(hi - lo)), nf.global_id)
        for e, gp in pd.graph.items():
            assert torch.equal(gp.edge_id, torch.arange(*book.owned_range(e, p)))
            assert (gp.dst_start, gp.dst_end) == book.owned_range(e[2], p)
    for t in meta.node_types:  # the PyG node_map agrees with the range book
        nmap = torch.load(tmp_path / "o" / "node_map" / f"{t}.pt", weights_only=True)
        assert torch.equal(nmap, book.owner(t, torch.arange(meta.num_nodes[t])))


def test_every_file_loads_with_weights_only(tmp_path):
    Partitioner(_hetero(), 2, method="random").save(tmp_path / "o", progress=False)
    files = list((tmp_path / "o").rglob("*.pt"))
    assert len(files) > 10
    for f in files:
        torch.load(f, weights_only=True)
    raw = json.loads((tmp_path / "o" / "META.json").read_text())
    assert {"num_parts", "node_types", "edge_types", "node_offset", "is_hetero", "is_sorted"} <= set(raw)
    assert raw["pyg_dist"]["format_version"] == 1 and "stats" in raw["pyg_dist"]


def test_random_cut_near_expected_and_metis_beats_it(tmp_path):
    data = synthetic_graph(4000, 10, community_size=100, intra_frac=0.9, seed=3)
    cut_r = Partitioner(data, 4, method="random").save(tmp_path / "r", progress=False)["edge_cut"]
    cut_m = Partitioner(data, 4, method="metis").save(tmp_path / "m", progress=False)["edge_cut"]
    cut_s = Partitioner(data, 4, method="supernode", num_clusters=64).save(tmp_path / "s",
                                                                            progress=False)["edge_cut"]
    assert abs(cut_r - 0.75) < 0.03
    assert cut_m < 0.5 * cut_r
    assert cut_m < cut_s < cut_r


def test_multi_constraint_balance_measured_from_folder(tmp_path):
    data = synthetic_graph(6000, 10, community_size=100, split=(0.3, 0.1, 0.1), seed=5)
    Partitioner(data, 4, method="metis", ufactor=30).save(tmp_path / "m", progress=False)
    per = {k: [] for k in ("nodes", "train_mask", "val_mask", "test_mask", "in_edges")}
    for p in range(4):
        pd = load_partition(tmp_path / "m", p)
        f = pd.node_feats[HOMO_NODE].feats
        per["nodes"].append(f["y"].numel())
        for k in ("train_mask", "val_mask", "test_mask"):
            per[k].append(int(f[k].sum()))
        per["in_edges"].append(pd.graph[HOMO_EDGE].row.numel())
    for k, counts in per.items():
        counts = torch.tensor(counts, dtype=torch.float)
        assert float(counts.max() / counts.mean()) < 1.06, (k, counts)
    assert len(read_meta(tmp_path / "m").extra["constraints"]) == 5


def test_same_seed_same_folder(tmp_path):
    data = _homo()
    for name in ("a", "b"):
        Partitioner(data, 3, method="supernode", seed=4).save(tmp_path / name, progress=False)
    ga = load_partition(tmp_path / "a", 1).graph[HOMO_EDGE]
    gb = load_partition(tmp_path / "b", 1).graph[HOMO_EDGE]
    assert torch.equal(ga.row, gb.row) and torch.equal(ga.colptr, gb.colptr)
    assert torch.equal(load_original_ids(tmp_path / "a")[HOMO_NODE],
                       load_original_ids(tmp_path / "b")[HOMO_NODE])


def test_two_level_sub_ranges(tmp_path):
    data = synthetic_graph(2000, 8, community_size=50, seed=2)
    Partitioner(data, 2, method="metis", sub_parts=3).save(tmp_path / "o", progress=False)
    meta = read_meta(tmp_path / "o")
    sb, b = meta.sub_node_bounds[HOMO_NODE], meta.node_bounds[HOMO_NODE]
    assert sb.numel() == 7 and torch.equal(sb[::3], b)
    sizes = torch.diff(sb).float()
    assert float(sizes.max() / sizes.mean()) < 1.1
    # trainer shares are METIS sub-partitions: far fewer cut edges than a random split would give
    pd = load_partition(tmp_path / "o", 0)
    gp = pd.graph[HOMO_EDGE]
    dst = gp.dst_start + torch.repeat_interleave(torch.arange(gp.dst_end - gp.dst_start), torch.diff(gp.colptr))
    local = (gp.row >= b[0]) & (gp.row < b[1])
    share = lambda ids: torch.searchsorted(sb, ids, right=True) - 1  # noqa: E731
    same = (share(gp.row[local]) == share(dst[local])).float().mean()
    assert float(same) > 0.6


def test_mmap_loading_matches(tmp_path):
    data = _homo()
    Partitioner(data, 2, method="random").save(tmp_path / "o", progress=False)
    a, b = load_partition(tmp_path / "o", 1), load_partition(tmp_path / "o", 1, mmap=True)
    assert torch.equal(a.graph[HOMO_EDGE].row, b.graph[HOMO_EDGE].row)
    assert torch.equal(a.node_feats[HOMO_NODE].feats["x"], b.node_feats[HOMO_NODE].feats["x"])


@pytest.mark.parametrize("method", ["metis", "random", "supernode", "hybrid"])
def test_edge_cases_roundtrip(tmp_path, method):
    """One partition; a hetero graph with an empty edge type; a graph without edges."""
    from torch_geometric.data import Data, HeteroData
    Partitioner(_homo(200), 1, method=method).save(tmp_path / "one", progress=False)
    check_roundtrip(_homo(200), tmp_path / "one")
    h = HeteroData()
    h["a"].x, h["b"].x = torch.randn(10, 2), torch.randn(5, 2)
    h["a", "r", "b"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 4]])
    h["b", "s", "a"].edge_index = torch.empty(2, 0, dtype=torch.long)
    Partitioner(h, 2, method=method, num_clusters=4).save(tmp_path / "h", progress=False)
    check_roundtrip(h, tmp_path / "h")
    e = Data(x=torch.randn(6, 2), edge_index=torch.empty(2, 0, dtype=torch.long))
    Partitioner(e, 3, method=method, num_clusters=3).save(tmp_path / "e", progress=False)
    check_roundtrip(e, tmp_path / "e")
