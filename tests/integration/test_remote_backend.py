"""``examples/remote_backend``: the SQLite ``FeatureStore`` (PyG's contract, one SELECT per batch), the in-memory
``GraphStore``, and the example on Cora (SQLite and partition stores within 1 point of the ``Data`` path)."""
from __future__ import annotations

import os
import pickle
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import FeatureStore, GraphStore, TensorAttr

import pyg_dist
from pyg_dist.datasets.planetoid import shared_data_root
from pyg_dist.errors import DataFileError, InvalidArgumentError
from pyg_dist.testing import load_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "remote_backend"


def _module(name):
    return load_script(EXAMPLE / f"{name}.py", f"remote_backend_{name}", register=True)


SQLiteFeatureStore = _module("sqlite_store").SQLiteFeatureStore
MemoryGraphStore = _module("memory_graph_store").MemoryGraphStore


def _selects(store):
    """Every SELECT the store's connection runs from now on (sqlite3's trace callback)."""
    seen = []
    store.connection.set_trace_callback(lambda sql: seen.append(sql) if sql.lstrip().upper().startswith("SELECT")
                                        else None)
    return seen


@pytest.fixture
def tensors():
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(50, 3, 4, generator=g), "y": torch.randint(0, 7, (50,), generator=g),
            "mask": torch.rand(50, generator=g) > 0.5, "h": torch.randn(50, 2, generator=g).to(torch.bfloat16)}


@pytest.fixture
def store(tmp_path, tensors):
    fs = SQLiteFeatureStore(tmp_path / "f.db")
    for name, t in tensors.items():
        assert fs.put_tensor(t, group_name=None, attr_name=name, index=None)
    fs.put_tensor(torch.arange(12.0).view(6, 2), group_name="paper", attr_name="x", index=None)
    fs.put_tensor(torch.ones(4, 1), group_name=("paper", "cites", "paper"), attr_name="edge_attr", index=None)
    yield fs
    fs.close()


def test_put_get_multi_get_round_trips(store, tensors):
    assert isinstance(store, FeatureStore)
    ids = torch.tensor([7, 0, 49, 7, 3])                          # unordered, repeated
    for name, t in tensors.items():
        assert torch.equal(store.get_tensor(None, name, ids), t[ids])
        assert torch.equal(store.get_tensor(None, name, None), t)
        assert torch.equal(store.get_tensor(None, name, slice(10, 20, 3)), t[10:20:3])
        assert store.get_tensor_size(None, name) == tuple(t.shape)
    paper = torch.tensor([5, 1])
    got = store.multi_get_tensor([TensorAttr(None, n, ids) for n in tensors] + [TensorAttr("paper", "x", paper)])
    for out, name in zip(got, tensors):
        assert out.dtype == tensors[name].dtype and torch.equal(out, tensors[name][ids])
    assert torch.equal(got[-1], torch.arange(12.0).view(6, 2)[paper])
    empty = store.get_tensor(None, "x", torch.tensor([], dtype=torch.long))
    assert empty.shape == (0, 3, 4) and empty.dtype == torch.float32
    assert sorted((str(a.group_name), a.attr_name) for a in store.get_all_tensor_attrs()) == sorted(
        [("None", n) for n in tensors] + [("paper", "x"), ("('paper', 'cites', 'paper')", "edge_attr")])


def test_hetero_groups_and_partial_updates(store, tensors):
    assert torch.equal(store.get_tensor("paper", "x", torch.tensor([5, 1])), torch.tensor([[10.0, 11.0], [2.0, 3.0]]))
    assert store.get_tensor_size(("paper", "cites", "paper"), "edge_attr") == (4, 1)
    new = torch.full((2, 3, 4), -1.0)
    assert store.put_tensor(new, group_name=None, attr_name="x", index=torch.tensor([4, 2]))
    want = tensors["x"].clone()
    want[[4, 2]] = new
    assert torch.equal(store.get_tensor(None, "x", None), want)
    assert store.put_tensor(torch.zeros(3), group_name=None, attr_name="y", index=None)      # replaced whole
    assert store.get_tensor_size(None, "y") == (3,) and store.get_tensor(None, "y", None).dtype == torch.float32
    assert store.remove_tensor(None, "mask", None) and not store.remove_tensor(None, "mask", None)
    assert (None, "mask") not in [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()]


def test_the_file_is_the_store(store, tensors, tmp_path):
    again = SQLiteFeatureStore(tmp_path / "f.db")
    for name, t in tensors.items():
        assert torch.equal(again.get_tensor(None, name, None), t)
    clone = pickle.loads(pickle.dumps(store))                    # what a spawned DataLoader worker gets
    assert torch.equal(clone.get_tensor(None, "y", torch.tensor([1, 2])), tensors["y"][[1, 2]])
    assert clone.connection is not store.connection
    tables = {r[0] for r in again.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"tensor_meta"} | {f"attr_{i}" for i in range(6)}
    again.close()


def test_one_select_per_multi_get(store):
    ids = torch.tensor([1, 5, 4])
    seen = _selects(store)
    store.multi_get_tensor([TensorAttr(None, n, ids) for n in ("x", "y", "mask", "h")])
    assert len(seen) == 1 and seen[0].count("JOIN") == 4 and "json_each" in seen[0]
    seen.clear()
    store.multi_get_tensor([TensorAttr(None, "x", ids), TensorAttr(None, "y", ids.clone()),  # equal ids: one group
                            TensorAttr("paper", "x", ids), TensorAttr(None, "mask", torch.tensor([2]))])
    assert len(seen) == 3                                         # one per distinct (group, ids)
    seen.clear()
    store.multi_get_tensor([TensorAttr(None, "x", torch.tensor([], dtype=torch.long))])
    assert seen == []


@pytest.mark.parametrize("call,arg,fragment", [
    (lambda s: s.get_tensor(None, "nope", torch.tensor([0])), "attr_name", "None/nope"),
    (lambda s: s.get_tensor("author", "x", torch.tensor([0])), "attr_name", "'author'/x"),
    (lambda s: s.get_tensor(None, "x", torch.tensor([50])), "index", "[0, 50)"),
    (lambda s: s.get_tensor(None, "x", torch.tensor([-1])), "index", "[0, 50)"),
    (lambda s: s.get_tensor(None, "x", torch.tensor([1.0])), "index", "integer"),
    (lambda s: s.get_tensor(None, "x", torch.ones(50, dtype=torch.bool)), "index", "integer"),
    (lambda s: s.get_tensor(None, "x", torch.zeros(2, 2, dtype=torch.long)), "index", "1-D"),
    (lambda s: s.multi_get_tensor([TensorAttr(None, "y", torch.tensor([0])), TensorAttr(None, "q", None)]),
     "attr_name", "None/q"),
    (lambda s: s.get_tensor_size(None, "nope"), "attr_name", "None/nope"),
    (lambda s: s.put_tensor(torch.zeros(1, 3, 4, dtype=torch.float64), None, "x", torch.tensor([0])), "tensor",
     "torch.float32"),
    (lambda s: s.put_tensor(torch.zeros(1, 4), None, "x", torch.tensor([0])), "tensor", "(3, 4)"),
    (lambda s: s.put_tensor(torch.zeros(2, 3, 4), None, "x", torch.tensor([0])), "index", "one id per row"),
    (lambda s: s.put_tensor(torch.zeros(3, dtype=torch.complex64), None, "c", None), "tensor", "dtype in"),
    (lambda s: s.put_tensor(torch.tensor(1.0), None, "c", None), "tensor", ">= 1 dims"),
    (lambda s: s.put_tensor(torch.zeros(2), None, "new", torch.tensor([0, 1])), "attr_name", "None/new"),
    (lambda s: s.get_tensor(7, "x", torch.tensor([0])), "group_name", "edge type"),
    (lambda s: s.remove_tensor(None, "x", torch.tensor([0])), "index", "whole attribute"),
])
def test_bad_arguments_are_typed_errors_naming_them(store, call, arg, fragment):
    with pytest.raises(InvalidArgumentError) as info:
        call(store)
    assert info.value.name == arg and fragment in str(info.value), str(info.value)


def test_a_bad_file_is_a_data_file_error(tmp_path, store):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(DataFileError, match="junk.db"):
        SQLiteFeatureStore(junk)
    path = Path(store.path)
    with sqlite3.connect(path) as conn:                           # a row lost behind the store's back
        conn.execute("DELETE FROM attr_1 WHERE id = 3")
    with pytest.raises(DataFileError, match=r"attr_1 \('y'\) holds 49 rows"):
        SQLiteFeatureStore(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tensor_meta SET dtype = 'complex32' WHERE attr = 'y'")
    with pytest.raises(DataFileError, match="malformed"):
        SQLiteFeatureStore(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tensor_meta SET dtype = 'int64', tbl = 'attr_1; DROP TABLE attr_0' WHERE attr = 'y'")
    with pytest.raises(DataFileError, match="malformed"):
        SQLiteFeatureStore(path)


def test_memory_graph_store():
    gs = MemoryGraphStore()
    assert isinstance(gs, GraphStore)
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert gs.put_edge_index(ei, edge_type=None, layout="coo", size=(3, 3))
    row, col = gs.get_edge_index(edge_type=None, layout="coo")      # found whatever size / is_sorted it names
    assert torch.equal(row, ei[0]) and torch.equal(col, ei[1])
    assert [(a.edge_type, a.layout.value, a.size) for a in gs.get_all_edge_attrs()] == [(None, "coo", (3, 3))]
    with pytest.raises(InvalidArgumentError, match="'edge_index'"):
        gs.put_edge_index(torch.zeros(3, 3), edge_type=None, layout="coo")
    with pytest.raises(InvalidArgumentError, match="one length"):
        gs.put_edge_index((torch.arange(3), torch.arange(2)), edge_type=None, layout="coo")
    assert gs.remove_edge_index(edge_type=None, layout="coo") and not gs.get_all_edge_attrs()


def _sqlite_pair(data, path):
    """``data``'s ``x`` and ``y`` in an SQLite feature store at ``path``, its edges in a memory graph store."""
    fs, gs = SQLiteFeatureStore(path), MemoryGraphStore()
    for name in ("x", "y"):
        fs.put_tensor(data[name], group_name=None, attr_name=name, index=None)
    gs.put_edge_index(data.edge_index, edge_type=None, layout="coo", size=(data.num_nodes, data.num_nodes))
    return fs, gs


def test_loader_over_the_sqlite_pair_matches_the_data_path(tmp_path):
    """Same seed: the same batches as the ``Data`` path; one multi_get_tensor call and one SELECT per batch."""
    data = pyg_dist.synthetic_graph(300, 6, num_features=8, num_classes=4, seed=1)
    fs, gs = _sqlite_pair(data, tmp_path / "g.db")
    calls = []
    inner = fs.multi_get_tensor
    fs.multi_get_tensor = lambda attrs, **kw: calls.append(len(attrs)) or inner(attrs, **kw)
    seen = _selects(fs)
    seeds = torch.arange(0, 300, 3)
    kwargs = dict(num_neighbors=[5, 3], input_nodes=seeds, batch_size=16, shuffle=True, seed=4)
    pair = list(pyg_dist.NeighborLoader((fs, gs), **kwargs))
    plain = list(pyg_dist.NeighborLoader(pyg_dist.synthetic_graph(300, 6, num_features=8, num_classes=4, seed=1),
                                         **kwargs))
    assert len(pair) == len(plain) == 7
    assert calls == [2] * 7 and len(seen) == 7                     # x and y in one call, one SELECT, per batch
    for a, b in zip(pair, plain):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.batch_size == b.batch_size


def test_forked_loader_workers_open_their_own_connection(tmp_path):
    """An SQLite connection must not cross fork: each worker opens its own (spawn: the store pickles without it)."""
    data = pyg_dist.synthetic_graph(200, 6, num_features=8, num_classes=4, seed=2)
    fs, gs = _sqlite_pair(data, tmp_path / "w.db")
    kwargs = dict(num_neighbors=[4, 2], input_nodes=torch.arange(0, 200, 2), batch_size=16, shuffle=True, seed=3)
    here = list(pyg_dist.NeighborLoader((fs, gs), **kwargs))
    forked = list(pyg_dist.NeighborLoader((fs, gs), num_workers=2, multiprocessing_context="fork", **kwargs))
    assert len(here) == len(forked) == 7
    assert all(torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x) for a, b in zip(here, forked))


def _cora_raw() -> Path:
    return Path(shared_data_root()) / "planetoid" / "Cora" / "raw"


_ROW = re.compile(r"(data|sqlite|partition)\s+([0-9.]+)\s+(\d+)\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\S+)"
                  r"\s+([0-9.]+)")


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _cora_raw().is_dir(), reason=f"Cora raw files not found under {_cora_raw()} "
                    "(set $PYG_DIST_DATA)")
def test_example_on_cora_sqlite_and_partition_within_one_point_of_data(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--backend", "all", "--epochs", "10",
                           "--db", str(tmp_path / "cora.db")], capture_output=True, text=True, timeout=280, env=env)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    rows = {m.group(1): m.groups() for m in map(_ROW.fullmatch, proc.stdout.strip().splitlines()[-3:]) if m}
    assert sorted(rows) == ["data", "partition", "sqlite"], proc.stdout
    acc = {name: float(r[1]) for name, r in rows.items()}
    assert acc["data"] > 0.7, acc                                 # GraphSAGE on Cora: ~0.8; chance 1/7
    assert abs(acc["sqlite"] - acc["data"]) <= 0.01 and abs(acc["partition"] - acc["data"]) <= 0.01, acc
    batches, calls, sql = int(rows["sqlite"][2]), rows["sqlite"][3], rows["sqlite"][7]
    assert calls == str(batches) and float(sql) == 1.0, rows["sqlite"]   # one multi_get_tensor, one SELECT, per batch
    assert rows["partition"][3] == str(int(rows["partition"][2])), rows["partition"]
    assert (tmp_path / "cora.db").is_file()
