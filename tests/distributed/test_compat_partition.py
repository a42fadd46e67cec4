"""``pyg_dist.distributed``'s Partitioner and stores, in one process: PyG's layout with input ids kept,
read back through ``from_partition`` (PyG-written, compat-written and native folders) against the
original graph: every node and edge exactly once, features, labels, time and partition books equal."""
from __future__ import annotations

import json

import pytest
import torch

import pyg_dist
from pyg_dist.errors import InvalidArgumentError, PyGDistError


def _graphs():
    return {
        "homo": pyg_dist.synthetic_graph(300, 5, num_features=6, edge_dim=2, seed=2),
        "hetero": pyg_dist.synthetic_graph(300, 5, num_features=6, hetero=True, edge_dim=2, seed=2),
        "node_time": pyg_dist.synthetic_graph(300, 5, num_features=6, node_time=True, seed=2),
        "edge_time": pyg_dist.synthetic_graph(300, 5, num_features=6, hetero=True, edge_time=True, seed=2),
    }


def _types(data):
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        return [(t, t, data[t]) for t in data.node_types], [(e, e, data[e]) for e in data.edge_types]
    return [(None, "_N", data)], [(None, ("_N", "_E", "_N"), data)]


def _identity(data):
    return {k: torch.arange(s.num_nodes if isinstance(k, str) else s.num_edges)
            for _, k, s in _types(data)[0] + _types(data)[1]}


def _expected_names(s, node: bool):
    keys = [k for k in s.keys() if k not in ("edge_index", "num_nodes")]
    return {k for k in keys if (s.is_node_attr(k) if node else s.is_edge_attr(k))}


def check_folder(root, data, orig, num_parts, complete=True):
    """Every owned node / edge once, rows equal the originals, books agree with ownership; with
    ``complete``, every attribute of the input is there."""
    from pyg_dist.distributed import LocalFeatureStore, LocalGraphStore
    nodes, edges = _types(data)
    n_seen = {k: torch.zeros(s.num_nodes, dtype=torch.long) for _, k, s in nodes}
    e_seen = {k: torch.zeros(s.num_edges, dtype=torch.long) for _, k, s in edges}
    for p in range(num_parts):
        gs, fs = LocalGraphStore.from_partition(root, p), LocalFeatureStore.from_partition(root, p)
        assert gs.meta["num_parts"] == fs.num_partitions == num_parts and gs.partition_idx == p
        for group, k, s in nodes:
            ids = fs.get_global_id(group)
            book = gs.node_pb if group is None else gs.node_pb[group]
            assert bool((book[ids] == p).all()) and torch.equal(book, fs.node_feat_pb if group is None
                                                                 else fs.node_feat_pb[group])
            n_seen[k][orig[k][ids]] += 1
            assert not complete or set(fs.attr_names(group)) == _expected_names(s, True), k
            for name in fs.attr_names(group):
                rows = orig[k] if name == "time" else orig[k][ids]  # node time: every node's, as PyG's
                assert torch.equal(fs.get_tensor(group, name), s[name][rows]), (k, name)
        for group, k, s in edges:
            row, col = gs.get_edge_index(group, "coo")
            eid = gs.get_edge_id(group, "coo")
            oe = orig[k][eid]
            assert torch.equal(s.edge_index[0, oe], orig[k[0]][row])
            assert torch.equal(s.edge_index[1, oe], orig[k[2]][col])
            book = gs.edge_pb if group is None else gs.edge_pb[group]
            assert bool((book[eid] == p).all())
            e_seen[k][oe] += 1
            fgroup = (None, None) if group is None else group
            feid = fs.get_global_id(fgroup)
            assert not complete or set(fs.attr_names(fgroup, is_node=False)) == _expected_names(s, False), k
            for name in fs.attr_names(fgroup, is_node=False):
                assert torch.equal(fs.get_tensor(fgroup, name), s[name][orig[k][feid]]), (k, name)
    assert all(bool((v == 1).all()) for v in n_seen.values())
    assert all(bool((v == 1).all()) for v in e_seen.values())


@pytest.mark.parametrize("kind", ["homo", "hetero", "node_time", "edge_time"])
@pytest.mark.parametrize("parts", [2, 3])
def test_partitioner_keeps_ids_and_everything(tmp_path, kind, parts):
    from pyg_dist.distributed import Partitioner
    data = _graphs()[kind]
    p = Partitioner(data, parts, str(tmp_path / "p"))
    assert p.is_hetero == (kind in ("hetero", "edge_time"))
    assert p.is_node_level_time == (kind == "node_time") and p.is_edge_level_time == (kind == "edge_time")
    assert (p.node_types is None) == (not p.is_hetero)
    p.generate_partition(progress=False)
    meta = json.loads((tmp_path / "p" / "META.json").read_text())
    assert "pyg_dist" not in meta and meta["num_parts"] == parts and meta["is_hetero"] == p.is_hetero
    check_folder(str(tmp_path / "p"), data, _identity(data), parts)
    pm = pyg_dist.read_meta(tmp_path / "p")
    assert pm.node_time_types == (["_N"] if kind == "node_time" else [])
    assert len(pm.edge_time_types) == (len(data.edge_types) if kind == "edge_time" else 0)


def test_partition_is_a_min_cut_and_recursive_works(tmp_path):
    from pyg_dist.distributed import LocalGraphStore, Partitioner
    data = pyg_dist.synthetic_graph(600, 6, seed=4)
    cuts = []
    for recursive in (False, True):
        root = str(tmp_path / f"r{recursive}")
        Partitioner(data, 4, root, recursive=recursive).generate_partition(progress=False)
        owner = LocalGraphStore.from_partition(root, 0).node_pb
        assert torch.bincount(owner, minlength=4).min() > 600 // 4 * 0.8          # balanced
        cuts.append(float((owner[data.edge_index[0]] != owner[data.edge_index[1]]).float().mean()))
    random_cut = 0.75                                                              # 4 random parts
    assert max(cuts) < random_cut * 0.7


def test_rewrites_a_partition_folder_but_never_other_files(tmp_path):
    from pyg_dist.distributed import Partitioner
    data = pyg_dist.synthetic_graph(200, 4, seed=1)
    root = tmp_path / "p"
    Partitioner(data, 2, str(root)).generate_partition(progress=False)
    Partitioner(data, 3, str(root)).generate_partition(progress=False)          # PyG rewrites in place
    assert json.loads((root / "META.json").read_text())["num_parts"] == 3
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidArgumentError, match="root"):
        Partitioner(data, 2, str(other)).generate_partition(progress=False)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(InvalidArgumentError, match="num_parts"):
        Partitioner(data, 0, str(root))


def test_pyg_written_and_native_folders_load_through_the_same_stores(tmp_path):
    from pyg_dist.distributed import LocalFeatureStore, LocalGraphStore
    from pyg_dist.format import load_original_ids
    from pyg_dist.partition import Partitioner as Native
    from pyg_dist.testing import write_pyg_homo
    data = pyg_dist.synthetic_graph(300, 5, num_features=6, edge_dim=2, seed=2)
    owner = torch.randint(0, 3, (data.num_nodes,), generator=torch.Generator().manual_seed(0))
    write_pyg_homo(data, owner, tmp_path / "pyg", 3)                          # as PyG's Partitioner wrote it
    check_folder(str(tmp_path / "pyg"), data, _identity(data), 3, complete=False)  # PyG kept x, y, edge_attr
    assert torch.equal(LocalGraphStore.from_partition(str(tmp_path / "pyg"), 0).node_pb, owner)
    Native(data, 3).save(tmp_path / "native", progress=False)
    check_folder(str(tmp_path / "native"), data, load_original_ids(tmp_path / "native"), 3)
    fs = LocalFeatureStore.from_partition(str(tmp_path / "native"), 1)
    assert "pyg_dist" in fs.meta and fs.meta["num_parts"] == 3


def test_feature_store_pyg_methods(tmp_path):
    import pickle

    from pyg_dist.distributed import LocalFeatureStore, Partitioner
    data = pyg_dist.synthetic_graph(200, 4, seed=1)
    Partitioner(data, 1, str(tmp_path / "p")).generate_partition(progress=False)
    fs = LocalFeatureStore.from_partition(str(tmp_path / "p"), 0)
    ids = torch.tensor([5, 0, 199, 5])
    fut = fs.lookup_features(ids)                                                # PyG: a future
    assert torch.equal(fut.wait(), data.x[ids])
    assert torch.equal(fs.lookup_features(ids, is_node_feat=True, input_type=None).wait(), data.x[ids])
    assert torch.equal(fs.get_tensor_from_global_id(group_name=None, attr_name="y", index=ids), data.y[ids])
    assert fs.has_edge_attr() is False and fs.labels is None
    fs.labels = data.y * 2
    again = pickle.loads(pickle.dumps(fs))                                       # spawned workers keep labels
    assert torch.equal(again.labels, data.y * 2) and again.partition_idx == 0
    with pytest.raises(InvalidArgumentError, match="group_name"):
        fs.put_global_id(ids, None)
    with pytest.raises(PyGDistError, match="read-only"):
        fs.put_tensor(data.x, group_name=None, attr_name="x")
    with pytest.raises(InvalidArgumentError, match="ids"):
        fs.lookup_features(torch.tensor([200])).wait()
