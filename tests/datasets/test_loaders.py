"""Offline dataset loaders (OGB folder, edge list, CSR file) and the load_dataset registry."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from pyg_dist.datasets.edgelist import load_edgelist
from pyg_dist.datasets.ogb import load_ogb_node
from pyg_dist.datasets.planetoid import shared_data_root
from pyg_dist.datasets.registry import load_csr_file, load_dataset
from pyg_dist.errors import InvalidArgumentError


def _gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in rows:
            f.write(",".join(str(v) for v in (r if isinstance(r, (list, tuple)) else [r])) + "\n")


@pytest.fixture
def ogb_root(tmp_path):
    base = tmp_path / "ogb" / "ogbn_products"
    edges = [(0, 1), (1, 2), (2, 3), (4, 0)]
    _gz(base / "raw" / "edge.csv.gz", edges)
    _gz(base / "raw" / "node-feat.csv.gz", [(i, i + 0.5) for i in range(5)])
    _gz(base / "raw" / "node-label.csv.gz", [3, 1, "nan", 0, 2])
    _gz(base / "raw" / "num-node-list.csv.gz", [5])
    _gz(base / "split" / "sales_ranking" / "train.csv.gz", [0, 1])
    _gz(base / "split" / "sales_ranking" / "valid.csv.gz", [2])
    _gz(base / "split" / "sales_ranking" / "test.csv.gz", [3, 4])
    return tmp_path / "ogb", edges


def test_ogb_folder(ogb_root):
    root, edges = ogb_root
    data = load_ogb_node("ogbn-products", root)
    e = torch.tensor(edges).t()
    assert torch.equal(data.edge_index, torch.cat([e, e.flip(0)], 1))  # products adds inverse edges
    assert torch.equal(data.x, torch.tensor([[i, i + 0.5] for i in range(5)], dtype=torch.float32))
    assert data.y.tolist() == [3, 1, -1, 0, 2]
    assert data.train_mask.tolist() == [True, True, False, False, False]
    assert data.val_mask.tolist() == [False, False, True, False, False]
    assert data.test_mask.sum() == 2 and data.num_nodes == 5
    same = load_dataset("ogbn-products", root, add_inverse_edge=False)
    assert torch.equal(same.edge_index, e)


def test_ogb_errors(ogb_root, tmp_path):
    root, _ = ogb_root
    with pytest.raises(InvalidArgumentError, match="root"):
        load_ogb_node("ogbn-products", tmp_path / "missing")
    _gz(root / "ogbn_products" / "split" / "other" / "train.csv.gz", [0])
    with pytest.raises(InvalidArgumentError, match="split"):
        load_ogb_node("ogbn-products", root, split="nope")


def test_edgelist_folder_and_file(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "edges.txt").write_text("# src dst\n0 1\n1 2\n3 0\n")
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.save(folder / "x.npy", x)
    torch.save(torch.tensor([1, 0, 1, 1]), folder / "y.pt")
    np.save(folder / "train_mask.npy", np.array([1, 0, 0, 1]))
    np.save(folder / "edge_weight.npy", np.array([0.5, 0.25, 1.0], dtype=np.float32))
    data = load_edgelist(folder, undirected=True)
    assert data.edge_index.tolist() == [[0, 1, 3, 1, 2, 0], [1, 2, 0, 0, 1, 3]]
    assert torch.equal(data.x, torch.from_numpy(x)) and data.y.tolist() == [1, 0, 1, 1]
    assert data.train_mask.dtype == torch.bool and data.edge_weight.numel() == 6
    torch.save(torch.tensor([[0, 1], [1, 2]]), tmp_path / "e.pt")  # [2, E] with E = 2
    assert load_edgelist(tmp_path / "e.pt").edge_index.tolist() == [[0, 1], [1, 2]]
    np.save(tmp_path / "e.npy", np.array([[0, 1], [1, 2], [2, 0]]))  # [E, 2]
    assert load_dataset("edgelist", tmp_path / "e.npy", num_nodes=5).num_nodes == 5


def test_edgelist_errors(tmp_path):
    (tmp_path / "edges.csv").write_text("0,1\n1,x\n")
    with pytest.raises(InvalidArgumentError, match="edges"):
        load_edgelist(tmp_path / "edges.csv")
    (tmp_path / "edges.csv").write_text("0,1\n1,2\n")
    np.save(tmp_path / "y.npy", np.array([0, 1]))
    with pytest.raises(InvalidArgumentError, match="'y'"):
        load_edgelist(tmp_path)
    with pytest.raises(InvalidArgumentError, match="path"):
        load_edgelist(tmp_path / "nothing_here")


def test_csr_file(tmp_path):
    torch.save({"rowptr": torch.tensor([0, 2, 3, 3]), "col": torch.tensor([1, 2, 0]), "N": 3}, tmp_path / "g.pt")
    data = load_csr_file(tmp_path / "g.pt", x_dim=4, num_classes=3, train_frac=0.5)
    assert data.edge_index.tolist() == [[0, 0, 1], [1, 2, 0]] and data.x.shape == (3, 4)
    with pytest.raises(InvalidArgumentError, match="root"):
        load_csr_file(tmp_path / "missing.pt")


def test_registry():
    data = load_dataset("synthetic", num_nodes=300, avg_degree=4, hetero=True)
    assert data.node_types == ["paper", "author", "field"]
    with pytest.raises(InvalidArgumentError, match="name"):
        load_dataset("imagenet")
    with pytest.raises(InvalidArgumentError, match="bogus"):
        load_dataset("synthetic", bogus=1)
    with pytest.raises(InvalidArgumentError, match="root"):
        load_dataset("edgelist", None)


def test_symmetrize_adds_only_missing_reverses_with_attributes():
    from torch_geometric.data import Data

    from pyg_dist.datasets.direction import edge_direction_report, symmetrize
    ei = torch.tensor([[0, 1, 2, 2, 3], [1, 0, 3, 2, 1]])  # 0<->1 both, 2->3, loop 2->2, 3->1
    data = Data(edge_index=ei.clone(), edge_attr=torch.arange(5.).view(-1, 1), edge_time=torch.arange(5),
                x=torch.zeros(4, 1))
    assert "2 of 5" in edge_direction_report(data)
    out = symmetrize(data)
    assert out.edge_index.tolist() == [[0, 1, 2, 2, 3, 3, 1], [1, 0, 3, 2, 1, 2, 3]]
    assert out.edge_attr.view(-1).tolist() == [0, 1, 2, 3, 4, 2, 4] and out.edge_time.tolist() == [0, 1, 2, 3, 4, 2, 4]
    assert edge_direction_report(out).startswith("edges: symmetric")
    assert symmetrize(out).edge_index.size(1) == 7  # idempotent


def test_every_reader_honours_undirected(tmp_path, ogb_root):
    root, _ = ogb_root
    base = root / "ogbn_tiny" / "raw"
    base.mkdir(parents=True)
    _gz(base / "edge.csv.gz", [(0, 1), (1, 2)])
    assert load_dataset("ogbn-tiny", root).edge_index.size(1) == 2           # unknown name: as stored
    assert load_dataset("ogbn-tiny", root, undirected=True).edge_index.size(1) == 4
    assert load_dataset("ogbn-products", root, undirected=False).edge_index.size(1) == 4
    (tmp_path / "edges.txt").write_text("0 1\n1 0\n1 2\n")
    assert load_dataset("edgelist", tmp_path / "edges.txt", undirected=True).edge_index.size(1) == 4
    torch.save({"rowptr": torch.tensor([0, 1, 1]), "col": torch.tensor([1]), "N": 2}, tmp_path / "g.pt")
    assert load_dataset("products_like", tmp_path / "g.pt", undirected=True).edge_index.size(1) == 2
    with pytest.raises(InvalidArgumentError, match="undirected"):
        load_dataset("synthetic", num_nodes=50, undirected=False)
    with pytest.raises(InvalidArgumentError, match="undirected"):
        load_dataset("edgelist", tmp_path / "edges.txt", undirected="yes")


def test_planetoid_without_scipy_names_the_package(monkeypatch):
    import sys

    from pyg_dist.errors import MissingDependencyError
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(MissingDependencyError, match="pip install scipy"):
        load_dataset("cora", shared_data_root() / "planetoid")


def test_registry_planetoid():
    root = shared_data_root() / "planetoid"
    if not (root / "Cora" / "raw").is_dir():
        pytest.skip(f"Cora raw files not found under {root}")
    data = load_dataset("cora", root)
    assert data.num_nodes == 2708 and int(data.train_mask.sum()) == 140
    assert load_dataset("cora", root, undirected=True).edge_index.size(1) == data.edge_index.size(1) == 10556


def test_a_crafted_planetoid_pickle_is_refused_before_any_code_runs(tmp_path):
    import shutil

    from pyg_dist.datasets.planetoid import load_planetoid
    from pyg_dist.errors import DataFileError
    root = shared_data_root() / "planetoid"
    if not (root / "Cora" / "raw").is_dir():
        pytest.skip(f"Cora raw files not found under {root}")
    shutil.copytree(root / "Cora" / "raw", tmp_path / "Cora" / "raw")
    marker = tmp_path / "ran"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()        # pickle protocol 0: os.system(...)
    (tmp_path / "Cora" / "raw" / "ind.cora.x").write_bytes(payload)
    with pytest.raises(DataFileError, match=r"ind\.cora\.x.*os\.system"):
        load_planetoid("cora", tmp_path)
    assert not marker.exists()                                          # nothing of the file was run
    assert load_planetoid("cora", root).num_nodes == 2708              # the real files pass the check
