"""Bad input raises typed errors naming the argument; failed writes leave nothing that looks complete."""
from __future__ import annotations

import pytest
import torch

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import PartitionBook, load_partition, read_meta
from pyg_dist.partition import Partitioner


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(200, 6, num_features=4, seed=0)


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_parts=0), "num_parts"), (dict(num_parts=201), "num_parts"), (dict(num_parts=1.5), "num_parts"),
    (dict(num_parts=2, method="kmeans"), "method"), (dict(num_parts=2, base_method="hybrid"), "base_method"),
    (dict(num_parts=2, sub_parts=0), "sub_parts"), (dict(num_parts=4, num_clusters=2), "num_clusters"),
    (dict(num_parts=2, seed=-1), "seed"),
])
def test_bad_arguments(data, kwargs, name):
    with pytest.raises(InvalidArgumentError) as e:
        Partitioner(data, **kwargs)
    assert e.value.name == name and repr(e.value.value)[:20] in str(e.value)


def test_mask_of_wrong_length(data):
    bad = data.clone()
    bad.train_mask = torch.ones(150, dtype=torch.bool)
    with pytest.raises(InvalidArgumentError, match="train_mask"):
        Partitioner(bad, 2)


def test_edge_index_out_of_range(data):
    bad = data.clone()
    bad.edge_index = bad.edge_index.clone()
    bad.edge_index[0, 0] = 999
    with pytest.raises(InvalidArgumentError, match="edge_index"):
        Partitioner(bad, 2)


def test_not_a_graph():
    with pytest.raises(InvalidArgumentError, match="data"):
        Partitioner({"x": torch.zeros(3)}, 2)


def test_graph_level_attribute_kept_or_rejected(tmp_path, data):
    d = data.clone()
    d.num_classes = 8
    Partitioner(d, 2, method="random").save(tmp_path / "o", progress=False)
    assert read_meta(tmp_path / "o").extra["graph_attrs"] == {"num_classes": 8}
    d.some_object = object()
    with pytest.raises(InvalidArgumentError, match="some_object"):
        Partitioner(d, 2)


def test_output_not_empty_needs_overwrite(tmp_path, data):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        Partitioner(data, 2, method="random").save(out, progress=False)
    Partitioner(data, 2, method="random").save(out, overwrite=True, progress=False)
    assert not (out / "keep.txt").exists() and read_meta(out).num_parts == 2


def test_failed_write_leaves_no_folder(tmp_path, data, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk full")
    monkeypatch.setattr("pyg_dist.partition.partitioner.write_maps", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        Partitioner(data, 2, method="random").save(tmp_path / "o", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_and_missing_files(tmp_path, data):
    out = tmp_path / "o"
    Partitioner(data, 2, method="random").save(out, progress=False)
    (out / "part_1" / "graph.pt").write_bytes(b"not a tensor file")
    with pytest.raises(PartitionFormatError, match="graph.pt"):
        load_partition(out, 1)
    (out / "part_0" / "node_feats.pt").unlink()
    with pytest.raises(PartitionFormatError, match="node_feats.pt"):
        load_partition(out, 0)
    with pytest.raises(InvalidArgumentError, match="part"):
        load_partition(out, 2)
    (out / "META.json").write_text("{not json")
    with pytest.raises(PartitionFormatError, match="META.json"):
        read_meta(out)
    (out / "META.json").write_text('{"num_parts": 2}')
    with pytest.raises(PartitionFormatError, match="missing one of the keys"):
        read_meta(out)
    with pytest.raises(PartitionFormatError, match="missing"):
        read_meta(tmp_path / "nowhere")


def test_book_rejects_bad_ids_and_types():
    book = PartitionBook({"_N": torch.tensor([0, 3, 5])})
    with pytest.raises(InvalidArgumentError, match="ids"):
        book.owner("_N", torch.tensor([5]))
    with pytest.raises(InvalidArgumentError, match="type"):
        book.owner("paper", torch.tensor([0]))
    with pytest.raises(InvalidArgumentError, match="part"):
        book.owned_range("_N", 2)
    empty_part = PartitionBook({"_N": torch.tensor([0, 2, 2, 4])})
    assert empty_part.owner("_N", torch.arange(4)).tolist() == [0, 0, 2, 2]


def test_pyg_readers_load_our_folder(tmp_path, data):
    from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore
    Partitioner(data, 2, method="metis").save(tmp_path / "o", progress=False)
    gs = LocalGraphStore.from_partition(str(tmp_path / "o"), 1)
    fs = LocalFeatureStore.from_partition(str(tmp_path / "o"), 1)
    ours = load_partition(tmp_path / "o", 1)
    ei = gs.get_edge_index(edge_type=None, layout="coo")
    assert torch.equal(ei[0], ours.graph[("_N", "_E", "_N")].row)
    x = fs.get_tensor(group_name=None, attr_name="x", index=None)
    assert torch.equal(x, ours.node_feats["_N"].feats["x"])


def test_non_finite_features_are_refused_unless_allowed(tmp_path, caplog):
    import pyg_dist
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.partition import Partitioner
    data = pyg_dist.synthetic_graph(100, 4, seed=1)
    data.x[7, 2] = float("nan")
    data.x[9, 0] = float("inf")
    with pytest.raises(InvalidArgumentError, match=r"x.*2 rows with NaN/inf.*\[7, 9\]"):
        Partitioner(data, 2)
    with caplog.at_level("WARNING", logger="pyg_dist"):
        Partitioner(data, 2, allow_nonfinite=True).save(tmp_path / "p", progress=False)
    assert "non-finite" in caplog.text
