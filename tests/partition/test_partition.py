"""Partitioner + reader: exact reassembly for every method, homo and hetero; books; the on-disk format."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, edge_type_str
from pyg_dist.datasets import synthetic_graph
from pyg_dist.format import PartitionBook, load_original_ids, load_partition, read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.testing import check_roundtrip

METHOD_CASES = [("metis", 1), ("random", 1), ("supernode", 1), ("hybrid", 1), ("metis", 2), ("random", 3)]


def _homo(n=600, seed=0):
    return synthetic_graph(n, 8, num_features=6, community_size=50, node_time=True, edge_time=True,
                           edge_dim=3, edge_weight=True, seed=seed)


def _hetero(n=600, seed=0):
    return synthetic_graph(n, 8, num_features=5, community_size=50, hetero=True, node_time=True,
                           edge_time=True, edge_dim=2, seed=seed)


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
    meta = read_meta(tmp_path / "o")
    want = {f"part_{p}/{name}.pt" for p in range(2) for name in ("graph", "node_feats", "edge_feats")}
    want |= {f"{d}/{t}.pt" for t in meta.node_types for d in ("node_map", "pyg_dist/original_ids/node")}
    want |= {f"{d}/{edge_type_str(e)}.pt" for e in meta.edge_types for d in ("edge_map", "pyg_dist/original_ids/edge")}
    assert want <= {f.relative_to(tmp_path / "o").as_posix() for f in files}  # PyG's layout and the id maps
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


def test_supernode_default_cluster_count(tmp_path):
    from pyg_dist.partition.assign import default_num_clusters
    assert [default_num_clusters(4, n) for n in (2_449_029, 20_000, 2708, 10)] == [128, 128, 64, 4]
    assert default_num_clusters(2, 2708) == 64 and default_num_clusters(3, 1000) == 3 * 8
    data = synthetic_graph(3000, 6, community_size=60, seed=4)  # 3000 // (40 * 4) = 18 clusters per part
    Partitioner(data, 4, method="supernode").save(tmp_path / "d", progress=False)
    Partitioner(data, 4, method="supernode", num_clusters=72).save(tmp_path / "k", progress=False)
    Partitioner(data, 4, method="supernode", num_clusters=128).save(tmp_path / "old", progress=False)
    ids = [load_original_ids(tmp_path / f)[HOMO_NODE] for f in ("d", "k", "old")]
    assert torch.equal(ids[0], ids[1]) and not torch.equal(ids[0], ids[2])


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
