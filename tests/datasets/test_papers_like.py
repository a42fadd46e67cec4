"""The papers100M-shaped generator: papers100M's counts scaled, the same bytes twice, disjoint split masks, labels
from communities, feature rows computed from the recipe alike in any order, and partitions that hold exactly
those rows (bfloat16) for exactly their nodes."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from pyg_dist.datasets.papers_like import PAPERS, GeneratedRows, shape_at, write_papers_like
from pyg_dist.errors import InvalidArgumentError

SCALE = 0.0005  # 55,530 nodes, ~808 k directed edges


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_counts_are_papers100m_times_the_scale():
    full = shape_at(1.0)
    assert full["num_nodes"] == 111_059_956 and full["num_pairs"] == PAPERS["num_edges"] // 2
    assert (full["train"], full["val"], full["test"], full["x_dim"], full["num_classes"]) == \
        (1_207_179, 125_265, 214_338, 128, 172)
    assert shape_at(0.5)["num_nodes"] == 55_529_978
    for bad in (0, -0.1, 1.5, True, "1"):
        with pytest.raises(InvalidArgumentError, match="scale"):
            shape_at(bad)


def test_same_seed_same_bytes_and_a_sound_graph(tmp_path):
    a = write_papers_like(tmp_path / "a", SCALE, chunk_pairs=1 << 18, progress=False)
    write_papers_like(tmp_path / "b", SCALE, chunk_pairs=1 << 18, progress=False)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    s = shape_at(SCALE)
    edges = np.concatenate([np.load(f) for f in sorted((tmp_path / "a" / "edges").glob("*.npy"))], axis=1)
    assert edges.shape[1] == a["num_edges"] and 0.99 * 2 * s["num_pairs"] < a["num_edges"] <= 2 * s["num_pairs"]
    assert edges.min() >= 0 and edges.max() < s["num_nodes"] and not (edges[0] == edges[1]).any()
    fwd = edges[0].astype(np.int64) * s["num_nodes"] + edges[1]
    rev = edges[1].astype(np.int64) * s["num_nodes"] + edges[0]
    assert np.array_equal(np.sort(fwd), np.sort(rev))  # stored symmetric
    masks = {k: np.load(tmp_path / "a" / f"{k}_mask.npy") for k in ("train", "val", "test")}
    assert [int(m.sum()) for m in masks.values()] == [s["train"], s["val"], s["test"]]
    assert int(sum(m.astype(int) for m in masks.values()).max()) == 1  # disjoint
    y = np.load(tmp_path / "a" / "y.npy")
    assert y.min() >= 0 and y.max() < 172
    same = (y[edges[0]] == y[edges[1]]).mean()
    assert same > 0.8  # mostly inside the community: neighbours carry the label
    with pytest.raises(InvalidArgumentError, match="folder"):
        write_papers_like(tmp_path / "a", SCALE, progress=False)


def test_generated_rows_are_the_same_whoever_asks(tmp_path):
    write_papers_like(tmp_path / "g", SCALE, chunk_pairs=1 << 18, progress=False)
    import json
    recipe = json.loads((tmp_path / "g" / "x.rows.json").read_text())
    (tmp_path / "g" / "small.rows.json").write_text(json.dumps({**recipe, "block": 1000}))  # many noise blocks
    for rows in (GeneratedRows(tmp_path / "g" / "x.rows.json"), GeneratedRows(tmp_path / "g" / "small.rows.json")):
        ids = np.array([5, 40_000, 3, 5, rows.n - 1, 1000, 999, 12_345])
        one = rows.take_rows(ids)
        assert one.shape == (8, 128) and torch.equal(one[0], one[3]) and not torch.equal(one[5], one[6])
        each = torch.cat([rows.take_rows(np.array([i])) for i in ids])
        assert torch.equal(one, each) and torch.equal(torch.from_numpy(rows[ids]), one)
        assert torch.equal(rows.take_rows(ids, torch.bfloat16), one.to(torch.bfloat16))
    # the class signal: the mean row of a class is near its centroid, far from the others'
    y = np.load(tmp_path / "g" / "y.npy")
    cls = np.flatnonzero(y == 7)[:2000]
    mean = rows.take_rows(cls).mean(0)
    dist = ((rows.centroids - mean) ** 2).sum(1)
    assert int(dist.argmin()) == 7
    with pytest.raises(InvalidArgumentError, match="idx"):
        rows.take_rows(np.array([rows.n]))
    for i, bad in enumerate(({"kind": "other"}, {**recipe, "block": 0}, {**recipe, "labels": "../y.npy"},
                             {**recipe, "labels": "train_mask.npy"}, {**recipe, "signal": "nan"}, [1, 2])):
        (tmp_path / "g" / f"bad{i}.rows.json").write_text(json.dumps(bad))
        with pytest.raises(InvalidArgumentError, match="path"):
            GeneratedRows(tmp_path / "g" / f"bad{i}.rows.json")
    (tmp_path / "g" / "few.rows.json").write_text(json.dumps({**recipe, "num_classes": 3}))
    with pytest.raises(InvalidArgumentError, match="labels"):  # a label file the recipe does not cover
        GeneratedRows(tmp_path / "g" / "few.rows.json").take_rows(np.arange(5000))


def test_partitioned_out_of_core_with_exact_bfloat16_rows(tmp_path):
    from pyg_dist.format import load_original_ids, load_partition, read_meta
    from pyg_dist.partition.ooc import OutOfCorePartitioner
    from pyg_dist.partition.ooc.chunked import open_chunked
    write_papers_like(tmp_path / "g", SCALE, chunk_pairs=1 << 18, progress=False)
    graph = open_chunked(tmp_path / "g")
    OutOfCorePartitioner(graph, 2, method="random", feature_dtype="bfloat16").save(tmp_path / "p", progress=False)
    meta, orig = read_meta(tmp_path / "p"), load_original_ids(tmp_path / "p")["_N"]
    rows = GeneratedRows(tmp_path / "g" / "x.rows.json")
    y = torch.from_numpy(np.load(tmp_path / "g" / "y.npy"))
    seen = 0
    for p in range(2):
        part = load_partition(tmp_path / "p", p)
        feats = part.node_feats["_N"].feats
        lo, hi = int(meta.node_bounds["_N"][p]), int(meta.node_bounds["_N"][p + 1])
        ids = orig[lo:hi]
        assert feats["x"].dtype == torch.bfloat16
        assert torch.equal(feats["x"], rows.take_rows(ids.numpy(), torch.bfloat16))
        assert torch.equal(feats["y"], y[ids])
        seen += hi - lo
    assert seen == rows.n
