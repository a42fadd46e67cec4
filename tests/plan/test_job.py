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


def _trainer(out):
    """A fresh process, as the planner's trainer is: it forks a child that allocates 96 MiB, then measures it."""
    from pyg_dist.train.stages import rss_parts_mb
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_child, args=(96, ready, done))
    anon = rss_parts_mb()["anon"]
    child.start()
    try:
        out.put(worker_memory_mb(anon) if ready.wait(60) else None)
    finally:
        done.set()
        child.join(30)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM / RssFile come from Linux's /proc")
def test_a_childs_own_memory_is_what_it_allocated():
    # measured from a fresh process: the test process itself may have other children (warm parents of
    # spawn_world) and a long history of memory that a trainer does not have
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    trainer = ctx.Process(target=_trainer, args=(out,))
    trainer.start()
    try:
        measured = out.get(timeout=100)
    finally:
        trainer.join(30)
    assert measured is not None, "the child never said it was ready"
    own, file = measured
    assert 90 <= own <= 96 + 40          # its 96 MiB (and what Python touched in it), not the parent's copy
    assert file > 0                      # its libraries' pages, counted apart


def test_the_job_takes_a_worker_count():
    assert parser().parse_args(["--partition-dir", "p", "--num-workers", "2"]).num_workers == 2
