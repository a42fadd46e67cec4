"""The entry schema: what every writer saves is exactly the schema's fields, every reader reads through it, and a
malformed entry is a PartitionFormatError naming the file and the entry."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from pyg_dist._types import as_typed
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import EdgeEntry, GraphEntry, NodeEntry, TopologyCacheEntry, load_partition, read_meta
from pyg_dist.format import meta as M
from pyg_dist.partition import OutOfCorePartitioner, Partitioner
from pyg_dist.testing import write_pyg_hetero, write_pyg_homo

SRC = Path(__file__).resolve().parents[2] / "src" / "pyg_dist"
FILES = ((M.graph_path, GraphEntry), (M.node_feats_path, NodeEntry), (M.edge_feats_path, EdgeEntry))


def _fields(cls):
    return {f.name for f in dataclasses.fields(cls)}


def test_round_trip_keeps_only_set_fields():
    g = GraphEntry(row=torch.tensor([1]), col=torch.tensor([0]), edge_id=torch.tensor([0]), size=(2, 2))
    assert list(g.to_dict()) == ["row", "col", "edge_id", "size"]
    back = GraphEntry.from_dict(g.to_dict(), "graph.pt")
    assert back.colptr is None and torch.equal(back.row, g.row) and back.size == (2, 2)
    t = TopologyCacheEntry(torch.tensor([3]), torch.tensor([1]), torch.tensor([5]), torch.tensor([9]))
    assert TopologyCacheEntry.from_dict(t.to_dict(), "x").edge_id.tolist() == [9]


@pytest.mark.parametrize("raw,match", [(torch.zeros(3), r"entry 'paper': expected a dict of NodeEntry"),
                                       ({"feats": {}}, r"entry 'paper': missing key\(s\) \['global_id'\]")])
def test_malformed_entries_name_file_and_entry(raw, match):
    with pytest.raises(PartitionFormatError, match=match) as info:
        NodeEntry.from_dict(raw, "/data/p/part_0/node_feats.pt", "paper")
    assert "node_feats.pt" in str(info.value)


def _folders(tmp_path):
    homo = synthetic_graph(400, 6, num_features=4, node_time=True, edge_time=True, edge_weight=True, edge_dim=2,
                           seed=1)
    hetero = synthetic_graph(300, 5, num_features=3, hetero=True, node_time=True, edge_dim=2, seed=2)
    Partitioner(homo, 2, method="random").save(tmp_path / "homo", progress=False)
    Partitioner(homo, 2, method="hybrid", base_method="random").save(tmp_path / "hybrid", progress=False)
    Partitioner(hetero, 2, method="random").save(tmp_path / "hetero", progress=False)
    OutOfCorePartitioner(homo, 2, method="random").save(tmp_path / "ooc", progress=False)
    owner = torch.randint(0, 2, (400,), generator=torch.Generator().manual_seed(0))
    write_pyg_homo(homo, owner, tmp_path / "pyg", 2)
    owners = {t: torch.randint(0, 2, (hetero[t].num_nodes,)) for t in hetero.node_types}
    write_pyg_hetero(hetero, owners, tmp_path / "pyg_hetero", 2)
    return ["homo", "hybrid", "hetero", "ooc", "pyg", "pyg_hetero"]


def test_every_writer_saves_schema_entries_and_every_reader_reads_them(tmp_path):
    for name in _folders(tmp_path):
        root = tmp_path / name
        meta = read_meta(root)
        for path_of, cls in FILES:
            for p in range(meta.num_parts):
                path = path_of(root, p)
                if not path.is_file():
                    continue
                raw = torch.load(path, weights_only=True)
                entries = as_typed(raw, "_N" if cls is NodeEntry else ("_N", "_E", "_N"), meta.is_hetero)
                for key, entry in entries.items():
                    if not entry:
                        continue
                    assert set(entry) <= _fields(cls), (name, path.name, key, set(entry) - _fields(cls))
                    cls.from_dict(entry, path, key)
        load_partition(root, 0)


def test_a_graph_entry_without_colptr_is_refused_in_a_native_folder(tmp_path):
    Partitioner(synthetic_graph(200, 4, seed=3), 2, method="random").save(tmp_path / "p", progress=False)
    path = M.graph_path(tmp_path / "p", 1)
    raw = torch.load(path, weights_only=True)
    del raw["colptr"]
    torch.save(raw, path)
    with pytest.raises(PartitionFormatError, match="graph.pt.*colptr"):
        load_partition(tmp_path / "p", 1)


def test_no_module_outside_format_spells_an_entry_key():
    """The writers and readers fill and read the dataclasses; a literal entry key elsewhere is a second
    definition of the format (testing/folders.py writes PyG's own layout by hand, as PyG does: an oracle)."""
    keys = "colptr|dst_start|dst_end|edge_id|feats|global_id"  # the keys only entries have (time, row... are
    # also attribute names and other files' columns)
    pattern = re.compile(rf"""\[["']({keys})["']\]|["']({keys})["'] *:|\.get\(["']({keys})["']""")
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("format/") or rel == "testing/folders.py":
            continue
        found += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
    assert pattern.search('out = {"global_id": ids}')  # the scan sees a literal key
