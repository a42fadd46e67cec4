"""Values in a partition's files are checked at open: a bad id or pointer is a PartitionFormatError naming the
file, the entry and the value, before any kernel indexes with it (the audit's case: 50 source ids set to 10**7
in graph.pt ended the first batch with SIGSEGV)."""
from __future__ import annotations

import pytest
import torch

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.partition import Partitioner
from pyg_dist.store import load_stores


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("v") / "p2"
    Partitioner(synthetic_graph(500, 6, num_features=4, node_time=True, seed=5), 2,
                method="random").save(root, progress=False)
    return root


def _corrupt(folder, tmp_path, path_of, edit):
    """A copy of ``folder`` with one file edited, whose META.json lists no file sizes and digests (as folders
    written before they were recorded): the value checks are then the only line (else the size check fires
    first; tests/format/test_digests.py covers that)."""
    import json
    import shutil
    root = tmp_path / "c"
    shutil.copytree(folder, root)
    meta = json.loads(M.meta_path(root).read_text())
    del meta["pyg_dist"]["files"]
    M.meta_path(root).write_text(json.dumps(meta))
    path = path_of(root)
    raw = torch.load(path, weights_only=True)
    edit(raw)
    torch.save(raw, path)
    return root


def _set_rows(key, value, count=50):
    def edit(raw):
        raw[key][:count] = value
    return edit


def _swap_colptr(raw):
    raw["colptr"][3], raw["colptr"][4] = raw["colptr"][4].item() + 1, raw["colptr"][3].item()


CASES = {
    "row 10**7": (lambda r: M.graph_path(r, 1), _set_rows("row", 10**7), r"graph.pt.*row \(source ids\).*10000000"),
    "row -1": (lambda r: M.graph_path(r, 1), _set_rows("row", -1, 1), r"graph.pt.*row.*\[-1\]"),
    "edge_id": (lambda r: M.graph_path(r, 0), _set_rows("edge_id", 10**9, 2), r"graph.pt.*edge_id.*1000000000"),
    "colptr": (lambda r: M.graph_path(r, 0), _swap_colptr, r"graph.pt.*colptr decreases at position 3"),
    "dst range": (lambda r: M.graph_path(r, 0), lambda raw: raw.update(dst_start=raw["dst_start"] + 10**6,
                                                                        dst_end=raw["dst_end"] + 10**6),
                  r"graph.pt.*destination range \[1000000, 1000250\) is not inside \[0, 500\]"),
    "global_id": (lambda r: M.node_feats_path(r, 1), _set_rows("global_id", 10**8, 1), r"node_feats.pt.*global_id"),
    "node time": (lambda r: M.full_node_time_path(r, "_N"), None, r"time.*expected one per node"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_values_are_refused_at_open(folder, tmp_path, case):
    path_of, edit, match = CASES[case]
    if edit is None:  # a whole file replaced by a shorter one
        root = _corrupt(folder, tmp_path, path_of, lambda raw: None)
        torch.save(torch.zeros(3, dtype=torch.long), path_of(root))
    else:
        root = _corrupt(folder, tmp_path, path_of, edit)
    part = 1 if "_1" in str(path_of(root).parent) else 0
    with pytest.raises(PartitionFormatError, match=match):
        load_stores(root, part)


def test_an_intact_folder_opens(folder):
    for p in (0, 1):
        graph, feats = load_stores(folder, p)
        assert graph.partition == p and feats.get_global_id().numel() > 0
