"""Time-based model aggregation in spawned worlds: exact averaging, no waiting for slow trainers,
stop / abort / death without a hang, the evaluator's best round, and no RPC at all."""
from __future__ import annotations

import time

import pytest
import torch

from pyg_dist.testing import spawn_world


def _init():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    return dist


def _average_rank(rank, world):
    from pyg_dist.tma import average_parameters
    _init()
    torch.manual_seed(rank)
    model = torch.nn.Linear(7, 3)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    sent = average_parameters(model)
    return before, torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), sent


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 4])
def test_average_is_the_mean_on_every_trainer(world):
    res = spawn_world(world, _average_rank, timeout=100)
    mean = torch.stack([r[0] for r in res]).sum(0) / world
    for _, after, sent in res:
        assert torch.equal(after, res[0][1])                         # the same bits everywhere
        if world == 2:
            assert torch.equal(after, mean)                          # (a + b) / 2 exactly
        else:
            assert torch.allclose(after, mean, atol=1e-7)
        assert sent == int(mean.numel() * 4 * 2 * (world - 1) / world)


def _moments_rank(rank, world):
    from pyg_dist.tma.trainer import average_optimizer_state
    _init()
    torch.manual_seed(rank)
    model = torch.nn.Linear(7, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(rank + 1):                                        # different step counts per trainer
        model(torch.randn(4, 7)).sum().backward()
        opt.step()
    def moments():
        return {k: torch.cat([opt.state[p][k].reshape(-1) for p in model.parameters()]).clone()
                for k in ("exp_avg", "exp_avg_sq", "step")}
    before = moments()
    average_optimizer_state(opt)
    return before, moments()


@pytest.mark.timeout(120)
def test_average_optimizer_moments_is_the_mean_and_keeps_step_counts():
    res = spawn_world(2, _moments_rank, timeout=100)
    for k in ("exp_avg", "exp_avg_sq"):
        mean = (res[0][0][k] + res[1][0][k]) / 2
        assert all(torch.equal(after[k], mean) for _, after in res), k
    assert [after["step"].tolist() for _, after in res] == [before["step"].tolist() for before, _ in res]


class _Batches:
    """A local loader of fixed random batches; an optional delay per batch (a slow trainer)."""

    def __init__(self, rank, n=8, delay=0.0):
        g = torch.Generator().manual_seed(100 + rank)
        self.data = [(torch.randn(16, 5, generator=g), torch.randn(16, 1, generator=g)) for _ in range(n)]
        self.delay = delay

    def __iter__(self):
        for b in self.data:
            if self.delay:
                time.sleep(self.delay)
            yield b


def _step(model, batch):
    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])


def _run_rank(rank, world, config_kwargs, delay_rank=None, fail_rank=None, fail_how=None):
    import os

    from pyg_dist import rpc
    from pyg_dist.tma import TMAConfig, run_tma
    _init()
    torch.manual_seed(rank)                                          # different inits: broadcast fixes that
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = _Batches(rank, delay=0.05 if rank == delay_rank else 0.0)
    seen = {}

    def step(m, b):
        if rank == fail_rank and len(seen) == 5:
            if fail_how == "die":
                os._exit(3)
            raise ValueError("trainer broke on purpose")
        seen[len(seen)] = True
        return _step(m, b)

    def evaluate(m):                                                 # best at round 3, by construction
        vec = torch.nn.utils.parameters_to_vector(m.parameters()).detach().clone()
        evaluate.snapshots.append(vec)
        return -abs(len(evaluate.snapshots) - 3)
    evaluate.snapshots = []
    start = time.perf_counter()
    try:
        res = run_tma(model, opt, loader, step, TMAConfig(**config_kwargs), evaluate=evaluate)
    except Exception as exc:  # noqa: BLE001 -- the test checks the type and how fast it came
        return type(exc).__name__, str(exc)[:300], time.perf_counter() - start
    final = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    best = None
    if res.best_state is not None:
        best = torch.cat([res.best_state["weight"].view(-1), res.best_state["bias"].view(-1)])
    return dict(steps=res.steps, rounds=res.rounds, final=final, best_round=res.best_round, best=best,
                snapshots=evaluate.snapshots, history=res.history, rpc=rpc.is_initialized(), bytes=res.bytes_sent)


@pytest.mark.timeout(120)
def test_step_based_rounds_are_exact_and_the_best_round_is_reported():
    res = spawn_world(2, _run_rank, dict(interval=None, total_time=None, interval_steps=4, max_steps=20), timeout=100)
    a, b = res
    assert a["steps"] == b["steps"] == 20 and a["rounds"] == b["rounds"] == 5
    assert torch.equal(a["final"], b["final"])                       # identical after the last round
    assert [r for r, _ in a["history"]] == [1, 2, 3, 4, 5] and a["best_round"] == 3
    assert torch.equal(a["best"], a["snapshots"][2])                 # the weights of round 3
    assert not a["rpc"] and not b["rpc"]                             # nothing remote: no RPC world at all
    assert a["bytes"] == 5 * 6 * 4                                   # 5 rounds x 6 floats x 2 (W-1)/W


@pytest.mark.timeout(120)
def test_time_based_slow_trainer_never_blocks_the_fast_one():
    res = spawn_world(2, _run_rank, dict(interval=0.4, total_time=3.0), 1, timeout=100)
    fast, slow = res
    assert fast["rounds"] == slow["rounds"] >= 5                     # same rounds, whatever the pace
    assert fast["steps"] > 4 * slow["steps"]                         # the fast one kept stepping
    assert torch.equal(fast["final"], slow["final"])


@pytest.mark.timeout(120)
def test_a_failing_trainer_stops_everyone_with_a_typed_error():
    res = spawn_world(2, _run_rank, dict(interval=0.3, total_time=60.0), None, 1, "raise", timeout=100)
    assert res[1][0] == "ValueError"
    assert res[0][0] == "TMAAbortedError" and "rank 1" in res[0][1] and res[0][2] < 20


@pytest.mark.timeout(150)
def test_a_dead_trainer_ends_the_job_with_a_typed_error():
    res = spawn_world(2, _run_rank, dict(interval=0.3, total_time=60.0, timeout=20.0), None, 1, "die",
                      may_die={1}, timeout=130)
    assert res[1] is None
    assert res[0][0] in ("AggregationError", "TMAAbortedError") and res[0][2] < 60, res[0]
