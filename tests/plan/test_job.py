"""The planner's job measures what its sampler workers hold: a child process's own memory (its peak less the pages
it shares: mapped files, and the parent's memory at the fork) and its mapped pages, read from /proc."""
import multiprocessing as mp
import sys

import pytest

from pyg_dist.plan.job import parser, worker_memory_mb


def _child(size_mb, ready, done):
    block = bytearray(size_mb << 20)
    block[::4096] = b"\1" * len(block[::4096])  # every page written: resident and the child's own
    ready.set()
    done.wait(60)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM / RssFile come from Linux's /proc")
def test_a_childs_own_memory_is_what_it_allocated():
    from pyg_dist.train.stages import rss_parts_mb
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_child, args=(96, ready, done))
    anon = rss_parts_mb()["anon"]
    child.start()
    try:
        assert ready.wait(60)
        own, file = worker_memory_mb(anon)
        assert 90 <= own <= 96 + 40          # its 96 MiB (and what Python touched in it), not the parent's copy
        assert file > 0                      # its libraries' pages, counted apart
    finally:
        done.set()
        child.join(30)


def test_the_job_takes_a_worker_count():
    assert parser().parse_args(["--partition-dir", "p", "--num-workers", "2"]).num_workers == 2
