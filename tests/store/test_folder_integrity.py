"""A folder mixed from two partitionings, or a file whose counts disagree with META, fails on open
(naming the file), and a bad partition on one rank stops every rank before RPC starts."""
from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

import pyg_dist
from pyg_dist.errors import PartitionFormatError
from pyg_dist.partition import Partitioner
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.testing import spawn_world


def _two_random(tmp_path):
    data = pyg_dist.synthetic_graph(300, 5, seed=3)
    for seed in (0, 1):
        Partitioner(data, 2, method="random", seed=seed).save(tmp_path / f"s{seed}", progress=False)
    return tmp_path / "s0", tmp_path / "s1"


def test_a_part_from_another_partitioning_is_named(tmp_path):
    a, b = _two_random(tmp_path)
    shutil.rmtree(a / "part_1")
    shutil.copytree(b / "part_1", a / "part_1")                        # same node bounds, other partitioning
    for part in (0, 1):                                                # every rank sees it, not only rank 1
        with pytest.raises(PartitionFormatError, match=r"part_1.*another partitioning"):
            LocalGraphStore.from_partition(a, part)


def test_a_graph_file_with_other_counts_is_named(tmp_path):
    a, b = _two_random(tmp_path)
    old = torch.load(a / "part_1" / "graph.pt", weights_only=True)
    new = torch.load(b / "part_1" / "graph.pt", weights_only=True)
    assert old["row"].numel() != new["row"].numel()                    # the seeds give different counts
    shutil.copy(b / "part_1" / "graph.pt", a / "part_1" / "graph.pt")  # the stamp still says part of a
    for part in (0, 1):                          # META.json lists every file's size: every rank fails at once
        with pytest.raises(PartitionFormatError, match=r"part_1/graph.pt.*holds \d+ bytes but META.json lists"):
            LocalGraphStore.from_partition(a, part)
    meta = json.loads((a / "META.json").read_text())
    del meta["pyg_dist"]["files"]                # as folders written before sizes were listed: the counts tell
    (a / "META.json").write_text(json.dumps(meta))
    LocalFeatureStore.from_partition(a, 0)                             # the other partition is fine
    with pytest.raises(PartitionFormatError, match=r"graph.pt.*edges"):
        LocalGraphStore.from_partition(a, 1)


def _open_rank(rank, world, root):
    from pyg_dist.train.session import TrainConfig, dist_session
    start = time.perf_counter()
    try:
        with dist_session(TrainConfig(root, timeout=120)):
            return "opened", time.perf_counter() - start
    except PartitionFormatError as exc:
        return str(exc), time.perf_counter() - start


@pytest.mark.timeout(120)
def test_a_corrupt_file_on_one_rank_stops_every_rank_at_once(tmp_path):
    a, _ = _two_random(tmp_path)
    bad = a / "part_1" / "node_feats.pt"
    bad.write_bytes(b"not a torch file".ljust(bad.stat().st_size, b"!"))  # META's size
    meta = json.loads((a / "META.json").read_text())
    for entry in meta["pyg_dist"]["files"].values():  # no sampled digests either: only rank 1 can tell
        del entry["sample"]
    (a / "META.json").write_text(json.dumps(meta))
    res = spawn_world(2, _open_rank, str(a), timeout=100)
    assert "node_feats.pt" in res[1][0]
    assert "rank 1 could not open its partition" in res[0][0] and "node_feats.pt" in res[0][0]
    assert max(seconds for _, seconds in res) < 30                      # not the 120 s rendezvous timeout
