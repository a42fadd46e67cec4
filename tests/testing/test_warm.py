"""Ranks forked from the warm parent (``pyg_dist.testing.warm``) are what a fresh interpreter would have been:
their own session, the requested environment, folder and argv, their log, their own random draws and string
hashes; a world whose environment changes a variable read at start-up, ``fresh=True`` or
``PYG_DIST_WORLD_WARM=0`` gets fresh interpreters; a dead warm parent is replaced."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pyg_dist.testing import warm
from pyg_dist.testing.world import RankFailedError, spawn_world


def _identity(rank, world_size):
    import numpy as np
    import torch
    return {"preloaded": "torch_geometric" in sys.modules, "pid": os.getpid(), "sid": os.getsid(0),
            "env": dict(os.environ), "cwd": os.getcwd(), "argv": list(sys.argv), "hash": hash("pyg_dist"),
            "draws": (float(torch.rand(1)), float(np.random.rand())), "threads": torch.get_num_threads()}


def _say_and_fail(rank, world_size):
    print(f"rank {rank} says hello on stdout")
    print(f"rank {rank} says hello on stderr", file=sys.stderr)
    if rank == 1:
        raise ValueError("the second rank fails")
    return rank


def _end_by(rank, world_size, how):
    if rank == 1:
        if how == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    return rank


def _child_then_sleep(rank, world_size, pid_file):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(f"{pid_file}.{rank}", "w") as fh:
        fh.write(str(child.pid))
    time.sleep(300)


@pytest.mark.timeout(120)
def test_a_forked_rank_is_what_a_fresh_interpreter_would_be(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = spawn_world(2, _identity, env={"PYG_DIST_TRACEBACK": "1"})
    second = spawn_world(2, _identity)
    fresh = spawn_world(2, _identity, fresh=True)
    assert [r["preloaded"] for r in first + second] == [True] * 4     # the warm path served them
    assert [r["preloaded"] for r in fresh] == [False, False]            # a fresh interpreter imports nothing first
    for r, rank in zip(first, (0, 1)):
        assert r["sid"] == r["pid"]                                     # its own session: killpg reaches its children
        assert r["cwd"] == str(tmp_path) and r["argv"][0] == "-c" and r["argv"][1].endswith(f"rank{rank}.job")
        assert r["env"]["RANK"] == str(rank) and r["env"]["PYG_DIST_TRACEBACK"] == "1"
        assert "PYTHONHASHSEED" not in r["env"]                          # the parent's own seed is not handed on
    assert "PYG_DIST_TRACEBACK" not in second[0]["env"]                   # one world's extras stay in that world
    assert warm.base_of(fresh[0]["env"]) == warm.base_of(second[0]["env"])  # the same environment otherwise
    assert first[0]["hash"] != first[1]["hash"]                         # neighbours hash strings differently
    draws = [r["draws"][0] for r in first + second] + [r["draws"][1] for r in first + second]
    assert len(set(draws)) == len(draws)                                # torch and numpy seeded anew in every rank
    assert first[0]["threads"] == fresh[0]["threads"]


@pytest.mark.timeout(120)
def test_a_startup_variable_or_the_switch_gives_fresh_interpreters(monkeypatch):
    changed = spawn_world(2, _identity, env={"OMP_NUM_THREADS": "2"})
    assert [r["preloaded"] for r in changed] == [False, False] and changed[0]["threads"] == 2
    monkeypatch.setenv("PYG_DIST_WORLD_WARM", "0")
    assert [r["preloaded"] for r in spawn_world(2, _identity)] == [False, False]
    assert [r["preloaded"] for r in spawn_world(2, _identity, fresh=False)] == [True, True]  # the argument wins
    assert warm.read_late("PYG_DIST_ANYTHING") and warm.read_late("MASTER_PORT")
    assert not warm.read_late("OMP_NUM_THREADS") and not warm.read_late("LD_PRELOAD")


@pytest.mark.timeout(120)
def test_a_forked_rank_s_output_failure_and_exit_reach_the_parent(tmp_path):
    with pytest.raises(RankFailedError) as info:
        spawn_world(2, _say_and_fail, log_dir=str(tmp_path / "logs"))
    assert info.value.rank == 1 and "the second rank fails" in str(info.value)
    assert "rank 1 says hello on stdout" in info.value.log_tail and "on stderr" in info.value.log_tail
    with pytest.raises(RankFailedError, match="killed by signal SIGKILL"):
        spawn_world(2, _end_by, "signal")
    with pytest.raises(RankFailedError, match="exited with status 3 without reporting a result"):
        spawn_world(2, _end_by, "exit")
    assert spawn_world(2, _end_by, "exit", may_die=[1]) == [0, None]


@pytest.mark.timeout(120)
def test_a_timed_out_forked_world_takes_its_ranks_children_with_it(tmp_path):
    pid_file = str(tmp_path / "child")
    with pytest.raises(Exception, match="did not finish"):
        spawn_world(2, _child_then_sleep, pid_file, timeout=15)
    for rank in (0, 1):
        pid = int(open(f"{pid_file}.{rank}").read())
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid)


def _running(pid):
    """Whether ``pid`` is a live process (a zombie waiting for a reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_a_dead_warm_parent_is_replaced():
    assert [r["preloaded"] for r in spawn_world(2, _identity)] == [True, True]
    for parent in warm._PARENTS.values():
        parent.proc.kill()
        parent.proc.wait()
    assert [r["preloaded"] for r in spawn_world(2, _identity)] == [True, True]
