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


def test_the_open_bound_grows_with_the_largest_partition(tmp_path):
    """timeout + the largest partition's own bytes (its listed files on disk under part_<p>) at OPEN_BYTES_PER_S."""
    from pyg_dist.format import read_meta
    folder = tmp_path / "p2"
    Partitioner(pyg_dist.synthetic_graph(400, 4, num_features=16, seed=0), 2, method="random").save(
        folder, progress=False)
    largest = max(sum(f.stat().st_size for f in (folder / f"part_{p}").rglob("*") if f.is_file()
                      and not f.name.startswith(".") and f.name != "pyg_dist.json")  # the stamp is not listed
                  for p in range(2))
    from pyg_dist.format.digests import largest_part_bytes
    assert largest_part_bytes(read_meta(folder)) == largest
    assert opening.open_bound(7.0, largest) == pytest.approx(7.0 + largest / opening.OPEN_BYTES_PER_S)


def _slow_open_rank(rank, world_size, root, delay):
    import pyg_dist.store as store_mod
    from pyg_dist.train import opening as op
    from pyg_dist.train.session import TrainConfig, dist_session
    op.OPEN_BYTES_PER_S = 1e3  # this folder's largest partition then adds tens of seconds to the bound
    if rank == 1:  # a partition that takes twice the start-up timeout to open
        real = store_mod.load_stores

        def slow(*args, **kwargs):
            time.sleep(delay)
            return real(*args, **kwargs)
        store_mod.load_stores = slow
    start = time.monotonic()
    with dist_session(TrainConfig(root, timeout=delay / 2)) as env:
        opened = time.monotonic() - start
        x = env.feature_store.get_tensor(None, "x")
    return opened, int(x.size(0))


@pytest.mark.timeout(120)
def test_a_rank_that_opens_slower_than_the_timeout_is_waited_for(tmp_path):
    """Rank 1 opens its partition in twice TrainConfig.timeout; rank 0 (fast) waits for it in the collective
    after the open instead of timing out, because both allow the bound of the largest partition."""
    from pyg_dist.testing import spawn_world
    folder = tmp_path / "p2"
    Partitioner(pyg_dist.synthetic_graph(400, 4, num_features=16, seed=0), 2, method="random").save(
        folder, progress=False)
    (fast, n0), (slow, n1) = spawn_world(2, _slow_open_rank, str(folder), 8.0, timeout=100)
    assert fast >= 8.0 and slow >= 8.0 and n0 > 0 and n1 > 0
