"""Opening a partition is bounded by the start-up timeout: a file system that stops answering is a typed
error naming the folder and the bound, not a hang (issue 44, item 5)."""
from __future__ import annotations

import threading
import time

import pytest

import pyg_dist
import pyg_dist.store
from pyg_dist.context import DistContext
from pyg_dist.errors import PartitionFormatError
from pyg_dist.partition import Partitioner
from pyg_dist.train import opening, session

pytestmark = pytest.mark.timeout(60)


def test_an_open_that_does_not_answer_fails_typed_within_the_start_up_bound(tmp_path, monkeypatch):
    folder = tmp_path / "p1"
    Partitioner(pyg_dist.synthetic_graph(60, 4, num_features=4, seed=0), 1, method="random").save(folder,
                                                                                                  progress=False)
    release = threading.Event()

    def hung(*args, **kwargs):  # a read on a file system that does not answer
        release.wait(30)
        raise AssertionError("released")

    monkeypatch.setattr(pyg_dist.store, "load_stores", hung)
    config = session.TrainConfig(partition_dir=str(folder), timeout=1.5)
    start = time.monotonic()
    try:
        with pytest.raises(PartitionFormatError, match=r"opening partition 0 did not finish within 1.5 s") as info:
            opening.open_everywhere(config, DistContext(rank=0, world_size=1, num_partitions=1))
    finally:
        release.set()
    assert time.monotonic() - start < 5
    assert str(folder) in str(info.value)


def test_an_open_that_answers_in_time_is_unchanged(tmp_path):
    folder = tmp_path / "p1"
    data = pyg_dist.synthetic_graph(60, 4, num_features=4, seed=0)
    Partitioner(data, 1, method="random").save(folder, progress=False)
    gs, fs = opening.open_everywhere(session.TrainConfig(partition_dir=str(folder), timeout=30),
                                      DistContext(rank=0, world_size=1, num_partitions=1))
    assert fs.get_tensor(None, "x").shape == data.x.shape
