"""dist_session's start-up as six explicit steps (pyg_dist.train.startup): each step's settings are the
TrainConfig's own values, split in one place, and every step is timed in the order it ran (issue 54)."""
from __future__ import annotations

import time

import pytest

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.testing.world import spawn_world
from pyg_dist.train import startup
from pyg_dist.train.session import TrainConfig

STEPS = ["world", "local", "group", "open", "rpc", "caches"]


def test_each_step_gets_the_config_values_it_reads():
    config = TrainConfig("/tmp/some-folder", num_workers=2, rpc_port=29777, backend="gloo", transport="tensorpipe",
                         wire_protection="encrypt", timeout=44.0, call_timeout=7.0, failure_timeout=9.0, mmap=False,
                         verify=True, cache_ratio=0.3, cache_policy="degree", device="cpu")
    s = startup.StartupSettings.of(config)
    assert s.world == startup.WorldSettings("/tmp/some-folder", 2, 29777, "cpu", "gloo",
                                            frozenset({"PYG_DIST_TRANSPORT", "PYG_DIST_WIRE_PROTECTION",
                                                       "PYG_DIST_FAILURE_TIMEOUT", "PYG_DIST_RPC_PORT"}))
    assert s.bounds == startup.BoundSettings(44.0, 9.0)
    assert s.open == startup.OpenSettings("/tmp/some-folder", False, True, 44.0)
    assert s.rpc == startup.RpcSettings(True, 44.0, 7.0, "tensorpipe", "encrypt")
    assert s.cache == startup.CacheSettings(0.3, "degree", None, None, 7.0)  # fills: call_timeout per read
    plain = startup.StartupSettings.of(TrainConfig("/tmp/f"))
    assert plain.world.env_overrides == frozenset() and plain.cache.timeout == 120.0  # no call_timeout: timeout
    assert plain.rpc.call_timeout is None and plain.bounds.failure_timeout is None


def test_the_clock_keeps_the_order_and_times_a_step_that_raises():
    clock = startup.StartupClock()
    with clock("a"):
        time.sleep(0.05)
    with pytest.raises(ValueError), clock("b"):
        time.sleep(0.02)
        raise ValueError("x")
    assert list(clock.seconds) == ["a", "b"]
    assert 0.05 <= clock.seconds["a"] < 1 and 0.02 <= clock.seconds["b"] < 1
    assert clock.line().startswith(f"start-up {clock.seconds['a'] + clock.seconds['b']:.2f} s: a 0.05 s")


def _start(rank, world_size, root):
    t0 = time.perf_counter()
    with pyg_dist.dist_session(TrainConfig(root, timeout=60, cache_ratio=0.5)) as env:
        wall = time.perf_counter() - t0
        cache = env.feature_store.cache
        return list(env.startup_seconds.items()), wall, int(sum(e.ids.numel() for e in cache.entries.values()))


@pytest.mark.timeout(180)
def test_a_real_start_up_records_every_step_in_order(tmp_path):
    folder = tmp_path / "p2"
    Partitioner(pyg_dist.synthetic_graph(400, 6, num_features=8, seed=1), 2, method="random").save(
        folder, progress=False)
    for steps, wall, cached in spawn_world(2, _start, str(folder), timeout=150):
        assert [k for k, _ in steps] == STEPS
        seconds = [v for _, v in steps]
        assert all(v >= 0 for v in seconds) and sum(seconds) <= wall + 1e-3   # the steps are inside the session
        assert seconds[STEPS.index("group")] > 0 and seconds[STEPS.index("rpc")] > 0
        assert cached > 0                                                      # the caches step did fill one


def test_the_start_up_steps_are_the_ones_the_module_names():
    doc = startup.__doc__ or ""
    table = [line.split()[0] for line in doc.splitlines() if line.startswith("    ") and len(line.split()) > 1
             and line.split()[1].endswith("Settings")]
    assert table == STEPS
