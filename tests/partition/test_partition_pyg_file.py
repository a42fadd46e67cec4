"""``pyg-dist-partition --dataset pyg``: a graph saved with ``torch.save`` is partitioned exactly as
``Partitioner(data, ...)`` partitions it; anything else is one typed line, and nothing of a foreign class runs."""
from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, HeteroData, InMemoryDataset

import pyg_dist
from pyg_dist.datasets.registry import load_dataset
from pyg_dist.errors import DataFileError
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main
from pyg_dist.testing.folders import check_roundtrip

REPO = Path(__file__).resolve().parents[2]
BUILT = []  # every MyData ever unpickled or built here (the refusal test checks none is added)


class MyData(Data):
    """A custom ``Data`` subclass: its file must be refused before any of it is built."""

    def __setstate__(self, state):
        BUILT.append(self)
        super().__setstate__(state)


def _homo():
    return pyg_dist.synthetic_graph(240, 5, num_features=6, num_classes=3, edge_dim=2, node_time=True,
                                    edge_time=True, edge_weight=True, seed=3)


def _hetero():
    return pyg_dist.synthetic_graph(240, 5, num_features=4, hetero=True, node_time=True, edge_time=True, seed=4)


def _same_folders(a: Path, b: Path) -> None:
    """Every file equal byte for byte (META.json: all but the timings)."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files_a:
        if rel.name != "META.json":
            assert filecmp.cmp(a / rel, b / rel, shallow=False), rel
    meta_a, meta_b = pyg_dist.format.read_meta(a), pyg_dist.format.read_meta(b)
    assert meta_a.extra["fingerprint"] == meta_b.extra["fingerprint"]
    assert meta_a.extra["files"] == meta_b.extra["files"]


@pytest.mark.parametrize("make", [_homo, _hetero])
@pytest.mark.parametrize("used", [False, True])
def test_cli_equals_python_partitioner_and_reassembles(tmp_path, make, used):
    data = make()
    if not used:
        torch.save(data, tmp_path / "graph.pt")
    Partitioner(data, 2).save(tmp_path / "py", progress=False)
    if used:  # a graph used before saving holds PyG's attribute cache (a defaultdict of AttrType sets)
        torch.save(data, tmp_path / "graph.pt")
    rc = main(["--dataset", "pyg", "--root", str(tmp_path / "graph.pt"), "--num-parts", "2", "--out",
               str(tmp_path / "cli"), "--quiet"])
    assert rc == 0
    _same_folders(tmp_path / "cli", tmp_path / "py")
    meta = check_roundtrip(data, tmp_path / "cli")              # oracle: the original tensors
    assert meta.is_hetero == isinstance(data, HeteroData) and meta.node_time_types and meta.edge_time_types


def test_inmemory_dataset_file_of_one_graph(tmp_path):
    data = _homo()
    InMemoryDataset.save([data], str(tmp_path / "data.pt"))
    loaded = load_dataset("pyg", tmp_path / "data.pt")
    assert type(loaded) is Data and sorted(loaded.keys()) == sorted(data.keys())
    assert main(["--dataset", "pyg", "--root", str(tmp_path / "data.pt"), "--num-parts", "2", "--method", "random",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    check_roundtrip(data, tmp_path / "o")


def _write_bad(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.pt"
    data = pyg_dist.synthetic_graph(60, 4, seed=0)
    if kind == "tensor":
        torch.save(data.edge_index, path)
    elif kind == "dict":
        torch.save(data.to_dict(), path)
    elif kind == "state_dict":
        torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    elif kind == "model":
        torch.save(torch.nn.Linear(3, 2), path)
    elif kind == "subclass":
        torch.save(MyData(**data.to_dict()), path)
    elif kind == "several":
        InMemoryDataset.save([data, pyg_dist.synthetic_graph(30, 4, seed=1)], str(path))
    else:
        torch.save(data, path)
        raw = bytearray(path.read_bytes())
        if kind == "truncated":
            raw = raw[: len(raw) // 2]
        else:  # one flipped byte inside a tensor's record
            raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("kind,needles", [
    ("tensor", ["holds a tensor of shape [2,", "--dataset edgelist", "torch.save(data, path)"]),
    ("dict", ["holds a dict", "edge_index", "torch.save(Data(**the_dict), path)"]),
    ("state_dict", ["holds a dict (2 keys: bias, weight)", "state_dict"]),
    ("model", ["torch.nn.modules.linear.Linear", "nothing of it was run", "torch.save(data, path)"]),
    ("subclass", ["test_partition_pyg_file.MyData", "nothing of it was run", "Data(**data.to_dict())"]),
    ("several", ["InMemoryDataset file of 2 graphs", "torch.save(dataset[i], path)"]),
    ("truncated", ["not a readable torch.save file", "torch.save(data, path)"]),
    ("flipped", ["fails its CRC check"]),
])
def test_not_a_graph_is_one_typed_line(tmp_path, capsys, kind, needles):
    path = _write_bad(tmp_path, kind)
    built = len(BUILT)
    rc = main(["--dataset", "pyg", "--root", str(path), "--num-parts", "2", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("pyg-dist-partition: error: data file error"), err
    assert all(n in err for n in needles), err
    assert len(BUILT) == built and not (tmp_path / "o").exists()
    with pytest.raises(DataFileError):
        load_dataset("pyg", path)


def test_unpickler_of_cached_graphs_refuses_other_classes_itself(tmp_path, monkeypatch):
    """Past the static check (bypassed here), the unpickler for graphs with a cache admits no other class."""
    from pyg_dist.datasets import pyg_file
    data = MyData(**pyg_dist.synthetic_graph(60, 4, seed=0).to_dict())
    Partitioner(data, 2, method="random").save(tmp_path / "p", progress=False)   # fills the cache
    torch.save(data, tmp_path / "sub.pt")
    found = pyg_file.file_globals(tmp_path / "sub.pt")
    assert "collections.defaultdict" in found and any(g.endswith("MyData") for g in found)
    monkeypatch.setattr(pyg_file, "file_globals", lambda path: {"collections.defaultdict"})
    built = len(BUILT)
    with pytest.raises(DataFileError, match="MyData is not one of PyG's graph classes"):
        pyg_file.load_pyg_file(tmp_path / "sub.pt")
    assert len(BUILT) == built


def test_edgelist_given_a_saved_graph_points_at_pyg(tmp_path, capsys):
    torch.save(_homo(), tmp_path / "graph.pt")
    rc = main(["--dataset", "edgelist", "--root", str(tmp_path / "graph.pt"), "--num-parts", "2", "--out",
               str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--dataset pyg --root FILE" in err, err


def test_options_of_other_datasets_are_refused(tmp_path, capsys):
    torch.save(_homo(), tmp_path / "graph.pt")
    rc = main(["--dataset", "pyg", "--root", str(tmp_path / "graph.pt"), "--x-dim", "4", "--num-parts", "2",
               "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and "--x-dim" in capsys.readouterr().err


def test_script_prints_no_traceback(tmp_path):
    path = _write_bad(tmp_path, "subclass")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "partition_graph.py"), "--dataset", "pyg",
                           "--root", str(path), "--num-parts", "2", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "MyData" in proc.stderr


def test_saved_cora_partitions_and_reassembles(tmp_path):
    """Cora as PyG's Planetoid builds it, saved with torch.save: the CLI's folder reassembles into it."""
    from pyg_dist.datasets.planetoid import load_planetoid, shared_data_root
    root = shared_data_root() / "planetoid"
    if not (root / "Cora" / "raw").is_dir():
        pytest.skip(f"Cora raw files not found under {root}")
    data = load_planetoid("cora", root)
    torch.save(data, tmp_path / "cora.pt")
    assert main(["--dataset", "pyg", "--root", str(tmp_path / "cora.pt"), "--num-parts", "2", "--out",
                 str(tmp_path / "cora-2"), "--quiet"]) == 0
    meta = check_roundtrip(data, tmp_path / "cora-2")
    assert meta.num_nodes["_N"] == 2708 and meta.num_edges[("_N", "_E", "_N")] == 10556


def test_reading_a_saved_graph_leaves_pygs_own_allowlist_as_it_was(tmp_path):
    # PyG allows its classes for torch.load(weights_only=True) when imported (its Planetoid / InMemoryDataset
    # loads rely on that); reading a file must not take them away (a later Planetoid load warned and unpickled
    # without weights_only)
    from pyg_dist.datasets.pyg_file import load_pyg_file
    before = list(torch.serialization.get_safe_globals())
    data = _homo()
    torch.save(data, tmp_path / "g.pt")
    assert torch.equal(load_pyg_file(tmp_path / "g.pt").x, data.x)
    after = torch.serialization.get_safe_globals()
    assert len(after) == len(before) and all(g in after for g in before)   # the same set (its order may change)
    assert Data in after
