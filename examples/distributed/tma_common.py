"""What the two TMA examples share: their flags, the TMA run, the synchronous DDP baseline, the result lines.

A task supplies ``make_model(in_dim, out_dim) -> model``, ``loss(model, batch) -> loss``, ``local_loader(data,
rank) -> loader`` (one-machine loader over the trainer's own subgraph), ``dist_loader(env) -> loader``
(distributed loader for the DDP baseline) and ``metric(model, full, split) -> float`` on the whole graph.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.tma import TMAConfig, local_subgraph, run_tma, whole_graph


@dataclass
class Task:
    name: str
    make_model: Callable[[int, int], torch.nn.Module]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    local_loader: Callable[[Any, int], Any]
    dist_loader: Callable[[Any], Any]
    metric: Callable[[torch.nn.Module, Any, str], float]
    classes: bool  # output size = number of classes (max y + 1 over every rank), else --hidden


def add_tma_flags(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The TMA examples' own flags, added to ``common.parser(doc, max_steps=True)``."""
    p.add_argument("--mode", choices=("tma", "ddp"), default="tma")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between aggregations")
    p.add_argument("--total-time", type=float, default=20.0, help="seconds of training")
    p.add_argument("--interval-steps", type=int, default=0, help="aggregate every N steps instead (with --max-steps)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="Adam's weight decay (every mode)")
    p.add_argument("--average-optimizer", action="store_true", help="also average Adam's moments at every round")
    return p


def _model(task: Task, args, in_dim: int, out_dim: int):
    torch.manual_seed(args.seed)
    model = task.make_model(in_dim, out_dim)
    return model, torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)


def _max(value: int) -> int:
    top = torch.tensor([value])
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    return int(top)


def run_tma_mode(task: Task, args, meta) -> Optional[dict]:
    """Every trainer: its own subgraph, its own pace; rank 0 evaluates every aggregated model. The job starts
    through ``dist_session`` without the sampling RPC world (process group, failure bound, teardown in
    ``finally``); ``run_tma`` keys its store per torchrun attempt."""
    from pyg_dist import TrainConfig, dist_session
    with dist_session(TrainConfig(args.partition_dir, rpc=False)) as env:
        return _tma_body(task, args, meta, env.rank, env.world_size)


def _tma_body(task: Task, args, meta, rank: int, world: int) -> Optional[dict]:
    if world != meta.num_parts:
        raise InvalidArgumentError(task.name, "--nproc-per-node", world,
                                   f"one trainer per partition ({meta.num_parts})")
    data = local_subgraph(args.partition_dir, rank)
    out_dim = _max(int(data.y.max()) + 1 if data.y.numel() else 0) if task.classes else args.hidden
    model, optimizer = _model(task, args, data.x.size(1), out_dim)
    full = whole_graph(args.partition_dir) if rank == 0 else None
    avg = args.average_optimizer
    config = (TMAConfig(interval=None, total_time=None, interval_steps=args.interval_steps, max_steps=args.max_steps,
                        average_optimizer=avg)
              if args.interval_steps else TMAConfig(interval=args.interval, total_time=args.total_time,
                                                    average_optimizer=avg))
    result = run_tma(model, optimizer, task.local_loader(data, rank), task.loss, config,
                     evaluate=(lambda m: task.metric(m, full, "val")) if rank == 0 else None)
    steps = [None] * world
    dist.all_gather_object(steps, result.steps)
    if rank != 0:
        return None
    model.load_state_dict(result.best_state)
    return dict(mode="tma", method=meta.method, world=world, steps=steps, syncs=result.rounds,
                bytes_per_trainer=result.bytes_sent, seconds=round(result.seconds, 2),
                best_round=result.best_round, best_val=result.best_metric, test=task.metric(model, full, "test"))


def _ddp_epoch(task: Task, model, loader, optimizer, start: float, budget: float):
    """One epoch, or less when the time budget ends (every rank stops at the same step)."""
    steps = 0
    for batch in loader:
        optimizer.zero_grad()
        task.loss(model, batch).backward()
        optimizer.step()
        steps += 1
        flag = torch.tensor([float(time.perf_counter() - start >= budget)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            return steps, True
    return steps, False


def run_ddp_mode(task: Task, args, meta) -> Optional[dict]:
    """The synchronous baseline: distributed sampling, gradients averaged every step, same time budget;
    validation every ``--interval`` seconds (at an epoch's end), the best model tested."""
    from pyg_dist import TrainConfig, dist_session, wrap_ddp
    with dist_session(TrainConfig(args.partition_dir)) as env:
        loader = task.dist_loader(env)
        out_dim = env.num_classes() if task.classes else args.hidden
        model, optimizer = _model(task, args, env.num_features(), out_dim)
        model = wrap_ddp(model, env)
        full = whole_graph(args.partition_dir) if env.rank == 0 else None
        steps, best, start, done = 0, (-1.0, None), time.perf_counter(), False
        last_eval = start
        while not done:
            n, done = _ddp_epoch(task, model, loader, optimizer, start, args.total_time)
            steps += n
            due = torch.tensor([float(done or time.perf_counter() - last_eval >= args.interval)])
            dist.all_reduce(due, op=dist.ReduceOp.MAX)  # every rank agrees when to validate
            if not due.item():
                continue
            last_eval = time.perf_counter()
            if env.rank == 0:
                val = task.metric(model.module, full, "val")
                print(f"ddp steps={steps} val_metric={val:.4f}", flush=True)
                if val > best[0]:
                    best = (val, {k: v.clone() for k, v in model.module.state_dict().items()})
            dist.barrier()
        seconds = time.perf_counter() - start
        per_rank = [None] * env.world_size
        dist.all_gather_object(per_rank, steps)
        if env.rank != 0:
            return None
        numel = sum(p.numel() for p in model.parameters())
        model.module.load_state_dict(best[1])
        return dict(mode="ddp", method=meta.method, world=env.world_size, steps=per_rank, syncs=steps,
                    bytes_per_trainer=int(steps * numel * 4 * 2 * (env.world_size - 1) / env.world_size),
                    seconds=round(seconds, 2), best_val=best[0], test=task.metric(model.module, full, "test"))


def report(out: Optional[dict], metric_name: str) -> None:
    """Rank 0's last two lines: ``stats={json}`` and ``test_<metric>=<float>``."""
    if out is not None:
        print(f"stats={json.dumps(out)}", flush=True)
        print(f"test_{metric_name}={out['test']:.4f}", flush=True)
