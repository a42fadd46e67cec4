"""The first batch's gate (:func:`pyg_dist.timeouts.first_step_gate`): ranks that reach their first batch further
apart than the failure bound still train (DDP's first all-reduce waits for the slowest rank's first batch under
the start-up bound), while a rank late for any later step still ends its peers within the failure bound (issue 55:
64 ranks on 2 cores reached their first batch tens of seconds apart and the job exited 1)."""
from __future__ import annotations

import time

import pytest

import pyg_dist
from pyg_dist import timeouts
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

BOUND = 2.0  # the failure bound of these worlds (s)
LATE = 3 * BOUND  # how late rank 1 is (s)


def _late_rank(rank, world_size, root, late_before):
    """Trains DDP steps; rank 1 asks for batch number ``late_before`` ``LATE`` s late. Returns the steps done,
    and, when a step failed, the error's type and the seconds this rank waited in it (a failed world's teardown
    then fails too: that is not under test)."""
    from pyg_dist.train.session import TrainConfig, dist_session
    out = None
    try:
        with dist_session(TrainConfig(root, timeout=60, failure_timeout=BOUND)) as env:
            out = _steps(rank, env, late_before)
    except pyg_dist.errors.PyGDistError:
        if out is None or out[1] is None:
            raise
    return out


def _steps(rank, env, late_before):
    import torch

    from pyg_dist import DistNeighborLoader, wrap_ddp
    loader = DistNeighborLoader(env, [3], batch_size=40, input_nodes="train_mask", seed=0)
    model = wrap_ddp(torch.nn.Linear(env.num_features(None), 2), env)
    steps, it = 0, iter(loader)
    while True:
        if rank == 1 and steps == late_before:
            time.sleep(LATE)
        started = time.monotonic()
        try:
            batch = next(it, None)
            if batch is None:
                return steps, None, 0.0
            model(batch.x.float()).sum().backward()  # DDP's all-reduce: a collective every step
        except Exception as exc:  # noqa: BLE001 -- the answer under test
            return steps, type(exc).__name__, time.monotonic() - started
        steps += 1


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("gate") / "p2"
    Partitioner(pyg_dist.synthetic_graph(400, 4, num_features=16, seed=0), 2, method="random").save(
        out, progress=False)
    return str(out)


@pytest.mark.timeout(120)
def test_a_rank_whose_first_batch_comes_later_than_the_bound_is_waited_for(folder):
    """Rank 1 asks for its first batch 3x the failure bound after rank 0 has its own: every step still runs."""
    (steps0, err0, _), (steps1, err1, _) = spawn_world(2, _late_rank, folder, 0, timeout=100)
    assert err0 is None and err1 is None
    assert steps0 == steps1 > 2


@pytest.mark.timeout(120)
def test_a_rank_late_for_a_later_step_ends_its_peer_within_the_bound(folder):
    """After the gate the failure bound holds again: rank 1, 3x the bound late for its third batch, ends rank 0's
    step within about the bound (not the 60 s start-up bound)."""
    (steps0, err0, waited0), _ = spawn_world(2, _late_rank, folder, 2, timeout=100)
    assert steps0 == 2 and err0 is not None
    assert BOUND * 0.9 <= waited0 < LATE


def _uneven_evaluation_first(rank, world_size, root):
    """Evaluation first, over seeds only partition 0 owns (``seed_split="partition"``: rank 1 has no batch), then
    training: the gate waits at the first batch of the training loader, not of the evaluation one. (The failure
    bound is 20 s here: rank 1 waits in the training loader's seed agreement while rank 0 evaluates.)"""
    import torch

    from pyg_dist import DistNeighborLoader, wrap_ddp
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(root, timeout=60, failure_timeout=20.0)) as env:
        mine = env.graph_store.book.owned_ids("_N", 0)  # the same global ids on every rank
        evaluation = DistNeighborLoader(env, [3], batch_size=40, input_nodes=mine, seed=0, seed_split="partition")
        started = time.monotonic()
        seen = sum(int(b.batch_size) for b in evaluation)
        evaluated = time.monotonic() - started
        train = DistNeighborLoader(env, [3], batch_size=40, input_nodes="train_mask", seed=0)
        model = wrap_ddp(torch.nn.Linear(env.num_features(None), 2), env)
        steps = 0
        for batch in train:
            model(batch.x.float()).sum().backward()
            steps += 1
    return seen, int(mine.numel()), evaluated, steps


@pytest.mark.timeout(120)
def test_a_loader_with_no_batch_on_some_rank_does_not_hold_the_gate(folder):
    (seen0, n, took0, steps0), (seen1, _, _, steps1) = spawn_world(2, _uneven_evaluation_first, folder, timeout=100)
    assert seen0 == n > 0 and seen1 == 0  # every seed of partition 0 on rank 0, none on rank 1
    assert took0 < 40  # not held at the gate until the 60 s start-up bound
    assert steps0 == steps1 > 2


def test_the_gate_acts_once_and_only_after_dist_session_held_it(monkeypatch):
    """A drop-in loader under a user's own process group (no ``hold_first_step``) passes straight through; after
    ``hold_first_step`` the gate acts once per process (here a world of one: nothing to wait for)."""
    monkeypatch.setattr(timeouts, "_GATE", {})
    assert timeouts.first_step_gate() is False
    timeouts.hold_first_step(5.0)
    assert timeouts._GATE  # held until the first batch
    assert timeouts.first_step_gate() is False and not timeouts._GATE  # no process group: popped, nothing waited
    with pytest.raises(pyg_dist.errors.InvalidArgumentError, match="bound"):
        timeouts.hold_first_step(-1.0)
