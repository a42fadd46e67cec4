"""Every stage of a distributed batch timed: the clocks reach the loader from this process and from workers, the
row counts equal the batches' own (owned / fetched by the partition book), and the epoch record gathers ranks."""
from __future__ import annotations

import asyncio
import json

import pytest
import torch

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.sampler.timing import STAGES, StageTimes, batch_clock, current, timed
from pyg_dist.testing import spawn_world


def test_stage_times_add_and_round_trip():
    a = StageTimes(sample_local=1.5, wait=0.25, batches=2, rows_owned=10)
    b = StageTimes(sample_local=0.5, step=2.0, batches=1, rows_fetched=4)
    s = a + b
    assert (s.sample_local, s.wait, s.step, s.batches, s.rows_owned, s.rows_fetched) == (2.0, 0.25, 2.0, 3, 10, 4)
    assert StageTimes.from_list(s.as_list()) == s
    assert (a.batches, b.batches) == (2, 1)  # + makes a new object


def test_batches_in_flight_keep_their_own_clock():
    """Two batches interleaved on one loop (as the in-process prefetch runs them): each clock gets its own time,
    including what a task it spawned adds; outside a batch, nothing is recorded."""
    async def one(delay: float):
        with batch_clock() as clock:
            with timed("sample_remote"):
                await asyncio.gather(asyncio.sleep(delay))
            async def child():
                with timed("rows_remote"):
                    await asyncio.sleep(delay)
            await asyncio.create_task(child())
            return clock

    async def both():
        return await asyncio.gather(one(0.05), one(0.2))

    fast, slow = asyncio.run(both())
    assert 0.04 < fast.sample_remote < 0.15 and 0.19 < slow.sample_remote < 0.4
    assert 0.04 < fast.rows_remote < 0.15 and 0.19 < slow.rows_remote < 0.4
    assert fast.batches == slow.batches == 1 and current() is None
    with timed("step"):  # no clock: a no-op
        pass


def _graph():
    return pyg_dist.synthetic_graph(800, 6, num_features=8, seed=3)


def _rank(rank, world_size, root, workers, log):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session
    from pyg_dist.train.stages import EpochClock

    with dist_session(TrainConfig(root, num_workers=workers, timeout=60)) as env:
        loader = DistNeighborLoader(env, [4, 3], input_nodes="train_mask", batch_size=16, num_workers=workers,
                                    shuffle=True, seed=5)
        book, part = env.graph_store.book, env.graph_store.partition
        clock = EpochClock(env, loader, log)
        try:
            clock.start()
            owned = fetched = count = 0
            for batch in loader:
                mine = int((book.owner("_N", batch.n_id) == part).sum())
                owned, fetched, count = owned + mine, fetched + batch.n_id.numel() - mine, count + 1
                sum(range(20000))  # a "step"
            record = clock.stop(0)
        finally:
            loader.shutdown()
        return count, owned, fetched, record.as_dict(), record.line()


@pytest.mark.parametrize("workers", [0, 1])
def test_loader_clock_counts_every_batch_and_row(tmp_path, workers):
    """The epoch record's counts are the batches' own: one clock per batch, rows owned here / fetched from the
    other partition as the partition book says (x is the only feature: one row per node), every rank alike;
    the seconds are positive where work was done, and rank 0 wrote the JSON line."""
    root = tmp_path / "g"
    Partitioner(_graph(), 2).save(root, progress=False)
    log = tmp_path / "stages.jsonl"
    results = spawn_world(2, _rank, str(root), workers, str(log), timeout=240)
    for r, (count, owned, fetched, rec, line) in enumerate(results):
        mine = rec["ranks"][r]
        assert (mine["batches"], mine["rows_owned"] + mine["rows_cached"], mine["rows_fetched"]) == \
            (count, owned, fetched)
        assert owned > 0 and fetched > 0
        assert mine["sample_local"] > 0 and mine["rows_local"] > 0 and mine["assemble"] > 0
        assert mine["wait"] > 0 and mine["step"] > 0 and mine["wall"] >= mine["wait"] + mine["step"]
        assert line.startswith(f"rank {r}: wait ")
    rec = results[0][3]
    assert rec["world_size"] == 2 and rec["sum"]["batches"] == sum(c for c, *_ in results)
    written = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(written) == 1 and written[0]["sum"]["batches"] == rec["sum"]["batches"]
    assert set(STAGES) <= set(written[0]["ranks"][0])


def test_epoch_clock_refuses_a_foreign_loader():
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.train.stages import EpochClock
    with pytest.raises(InvalidArgumentError, match="loader"):
        EpochClock(None, torch.utils.data.DataLoader(range(3)))


def test_the_rss_split_adds_up_and_sees_a_mapped_file(tmp_path):
    import sys

    import numpy as np

    from pyg_dist.train.stages import current_rss_mb, rss_parts_mb
    if not sys.platform.startswith("linux"):
        pytest.skip("RssAnon / RssFile come from Linux's /proc/self/status")
    path = tmp_path / "rows.bin"
    path.write_bytes(b"\1" * (64 << 20))
    before = rss_parts_mb()
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    assert int(mapped[::4096].sum()) == 16384                    # one byte of every page read: 64 MiB mapped in
    after = rss_parts_mb()
    assert after["file"] - before["file"] >= 60                  # the mapped file's pages, not the process's own
    assert after["anon"] - before["anon"] < 16
    assert after["anon"] + after["file"] == pytest.approx(current_rss_mb(), abs=8)
    assert after["peak"] >= after["anon"] + after["file"] - 1       # VmHWM: the peak so far, never below now
    import os
    assert rss_parts_mb(os.getpid())["file"] == pytest.approx(after["file"], abs=8)  # any process by its pid
