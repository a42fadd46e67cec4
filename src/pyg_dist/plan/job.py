r"""The planner's training job: GraphSAGE node classification over a partition folder, timed by the epoch clock.

It is the job the planner calibrates on (a few steps) and checks against (whole epochs): the product's own
loader (:class:`~pyg_dist.DistNeighborLoader`, ``seed_split="balanced"``), PyG's ``GraphSAGE`` under DDP (each
layer trimmed to the hops it still needs), Adam, cross-entropy on the seeds;
:class:`~pyg_dist.train.stages.EpochClock` appends one JSON line per epoch (every rank's stage seconds and peak
RSS) to ``--record``. Launch it as any pyg_dist job::

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m pyg_dist.plan.job \
        --partition-dir /tmp/parts-2 --record /tmp/stages.jsonl --warmup-steps 5 --max-steps 20

``--link-gbps G`` makes every rank's one-hop and feature replies wait for their bytes to cross an emulated
G Gb/s link (:mod:`pyg_dist.testing.link`): a network's cost on one machine (with ``--num-workers``, the workers
serve the partition, each on its own link). ``--cache-ratio`` and
``--remote-rows`` are ``TrainConfig``'s (a degree feature cache filled at start-up; int8 remote rows).
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from pyg_dist.errors import InvalidArgumentError


def fanouts(text: str) -> List[int]:
    """``"15,10,5"`` -> ``[15, 10, 5]`` (argparse type)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"fanouts must be comma-separated integers, got {text!r}") from None
    if not values or any(v == 0 or v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"fanouts must be positive integers (or -1), got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    """The job's command line."""
    p = argparse.ArgumentParser(prog="python -m pyg_dist.plan.job", description=__doc__.split("\n\n")[0])
    p.add_argument("--partition-dir", required=True)
    p.add_argument("--record", default=None, help="rank 0 appends one JSON line per epoch here")
    p.add_argument("--num-neighbors", type=fanouts, default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="batches per epoch (0: the whole epoch)")
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="first an epoch of this many batches (recorded first: the start-up's cost)")
    p.add_argument("--link-gbps", type=float, default=None, help="emulate a link of this rate (replies wait)")
    p.add_argument("--cache-ratio", type=float, default=None, help="TrainConfig.cache_ratio (degree policy)")
    p.add_argument("--remote-rows", choices=["exact", "int8"], default="exact", help="TrainConfig.remote_rows")
    p.add_argument("--num-workers", type=int, default=0,
                   help="sampler workers per rank (TrainConfig.num_workers; they sample, fetch and serve)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="TrainConfig.device: cuda puts the model and the batches on the rank's GPU (cuda:LOCAL_RANK)")
    p.add_argument("--seed", type=int, default=0)
    return p


def _emulate_link_in_worker(gbps: float, worker_id: int) -> None:
    """A sampler worker's ``worker_init_fn``: its replies wait for their bytes on its own emulated link (it serves
    the partition; the trainer beside it does not)."""
    _emulate_link(gbps)


def _emulate_link(gbps: float) -> None:
    from pyg_dist.sampler.messages import ONE_HOP_OP
    from pyg_dist.store.lookup import LOOKUP_OP
    from pyg_dist.testing.link import EmulatedLink, throttle_callees
    throttle_callees(EmulatedLink(gbps), [ONE_HOP_OP, LOOKUP_OP])


ECHO_OP = "plan_echo"


def call_latency(env, calls: int = 100) -> float:
    """Seconds of one empty call from rank 0 to partition 1, median of ``calls`` (0.0 with one partition);
    every rank calls this (the others wait in a barrier)."""
    import torch.distributed as dist

    from pyg_dist.rpc import call
    spent = []
    if env.rank == 0 and env.graph_store.partition_meta.num_parts > 1:
        for _ in range(calls):
            t = time.perf_counter()
            call(1, ECHO_OP, None)
            spent.append(time.perf_counter() - t)
    if env.world_size > 1:
        dist.barrier()
    return sorted(spent)[len(spent) // 2] if spent else 0.0


def _children() -> List[str]:
    """The pids of this process's child processes (its sampler workers), from ``/proc`` (none where it is not)."""
    import os
    me, out = str(os.getpid()), []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    out.append(pid)
        except (OSError, IndexError):
            continue
    return out


def worker_memory_mb(parent_anon_mb: float) -> Tuple[float, float]:
    """What this process's child processes (its sampler workers) hold, MiB: ``(own, file)``. ``own``: the sum over
    them of their peak RSS less their pages of mapped files and shared memory and less ``parent_anon_mb`` (the
    trainer's own memory when they forked: copied page tables, pages shared until written); ``file``: the most
    pages of mapped files and shared memory one of them holds (the partition rows it read: the same pages as the
    trainer's or its siblings', counted once). ``(0.0, 0.0)`` where ``/proc`` does not say."""
    from pyg_dist.train.stages import rss_parts_mb
    own, file = 0.0, 0.0
    for pid in _children():
        parts = rss_parts_mb(pid)
        own += max(parts["peak"] - parts["file"] - parent_anon_mb, 0.0)
        file = max(file, parts["file"])
    return own, file


def workers_cpu_s() -> float:
    """The CPU seconds this process's child processes (its sampler workers) have spent so far, every thread."""
    import os
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in _children():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total


#: The job's facts kept per rank (lists by rank in ``<record>.job.json``; :func:`_write_facts`).
PER_RANK = ("open_rss_mb", "open_anon_mb", "end_file_mb", "cache_rows", "workers_mb", "workers_file_mb",
            "workers_cpu_s", "gpu")


def _write_facts(env, args, loader, model, latency: float, opened: Dict[str, float]) -> None:
    """Rank 0 writes ``<record>.job.json``: what the planner reads besides the stage lines (collective). Per rank
    (lists by rank, :data:`PER_RANK`): the RSS at the first batch (``open_rss_mb``, its own part
    ``open_anon_mb``), the mapped files' pages after training (``end_file_mb``), the feature cache's rows
    (``cache_rows``), what its sampler workers hold (``workers_mb``, ``workers_file_mb``:
    :func:`worker_memory_mb`), their CPU seconds in the last epoch (``workers_cpu_s``) and whether it trained on a
    GPU (``gpu``: 1.0 or 0.0)."""
    from pyg_dist._alloc import huge_pages_in_effect
    from pyg_dist.train.session import all_sum
    from pyg_dist.train.stages import rss_parts_mb
    mask = env.feature_store.get_tensor(group_name=None, attr_name="train_mask")
    w, r = env.world_size, env.rank
    cache = env.feature_store.cache
    own, file = worker_memory_mb(opened["anon"]) if args.num_workers else (0.0, 0.0)
    values = {"open_rss_mb": opened["rss"], "open_anon_mb": opened["anon"], "end_file_mb": rss_parts_mb()["file"],
              "cache_rows": float(sum(e.ids.numel() for e in cache.entries.values())) if cache is not None else 0.0,
              "workers_mb": own, "workers_file_mb": file, "workers_cpu_s": opened.get("workers_cpu_s", 0.0),
              "gpu": float(env.device.type == "cuda")}
    mine = [0.0] * (2 + len(PER_RANK) * w)
    mine[0], mine[1] = float(mask.sum()), float(huge_pages_in_effect())
    for i, key in enumerate(PER_RANK):
        mine[2 + i * w + r] = values[key]
    summed = all_sum(mine, env).tolist()
    if env.rank != 0 or args.record is None:
        return
    x = env.feature_store.get_tensor(group_name=None, attr_name="x")
    dim = int(x.shape[-1])
    facts = {"wire_row_bytes": dim * x.element_size() if args.remote_rows == "exact" else dim + 8,
             "world_size": env.world_size, "batches_per_epoch": len(loader), "batch_size": args.batch_size,
             "params": sum(p.numel() for p in model.parameters()), "feature_dim": dim,
             "row_bytes": dim * x.element_size(), "call_latency_s": latency, "train_seeds": int(summed[0]),
             "num_workers": args.num_workers, "huge_pages_ranks": int(summed[1]),
             **{key: summed[2 + i * w:2 + (i + 1) * w] for i, key in enumerate(PER_RANK)}}
    with open(f"{args.record}.job.json", "w") as f:
        json.dump(facts, f)


def _train(model, loader, optimizer, steps: int) -> None:
    """``steps`` batches of GraphSAGE training; trimmed per layer (PyG's ``num_sampled_*_per_hop``)."""
    for batch in itertools.islice(loader, steps):
        optimizer.zero_grad()
        x = batch.x if batch.x.dtype == torch.float32 else batch.x.float()  # bf16 / int8-stored folders
        out = model(x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()


def _check_args(args) -> None:
    values = (args.batch_size, args.epochs, args.hidden)
    if min(values) < 1 or min(args.max_steps, args.warmup_steps, args.num_workers) < 0:
        raise InvalidArgumentError("pyg_dist.plan.job",
                                   "--batch-size/--epochs/--hidden/--max-steps/--warmup-steps/--num-workers",
                                   (*values, args.max_steps, args.warmup_steps, args.num_workers),
                                   "positive integers (--max-steps, --warmup-steps, --num-workers >= 0)")


def main(argv: Optional[Sequence[str]] = None) -> float:
    """Trains ``--epochs`` epochs (after a ``--warmup-steps`` one); returns the last epoch's slowest-rank wall."""
    from torch_geometric.nn import GraphSAGE

    from pyg_dist import DistNeighborLoader, TrainConfig, dist_session, wrap_ddp
    from pyg_dist.ops import warmup
    from pyg_dist.rpc import register_callee
    from pyg_dist.train.stages import EpochClock, current_rss_mb, rss_parts_mb

    args = parser().parse_args(argv)
    _check_args(args)
    warmup()
    torch.manual_seed(args.seed)
    register_callee(ECHO_OP, lambda msg: msg, replace=True)  # before the session: peers may call at once
    config = TrainConfig(args.partition_dir, cache_ratio=args.cache_ratio, remote_rows=args.remote_rows,
                         num_workers=args.num_workers, device=args.device)
    with dist_session(config) as env:
        workers = {"num_workers": args.num_workers}
        if args.link_gbps and args.num_workers:  # the workers serve: each waits on its own link
            workers["worker_init_fn"] = functools.partial(_emulate_link_in_worker, args.link_gbps)
        elif args.link_gbps:
            _emulate_link(args.link_gbps)
        loader = DistNeighborLoader(env, args.num_neighbors, input_nodes="train_mask", batch_size=args.batch_size,
                                    shuffle=True, seed_split="balanced", shuffle_seed=args.seed, seed=args.seed,
                                    **workers)
        model = wrap_ddp(GraphSAGE(env.num_features(None), args.hidden, len(args.num_neighbors),
                                   env.num_classes(None)), env)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        opened = dict(rss_parts_mb(), rss=current_rss_mb())  # the partition, loader and model before a batch
        clock = EpochClock(env, loader, args.record)
        steps = min(len(loader), args.max_steps) if args.max_steps else len(loader)
        epochs = ([min(args.warmup_steps, len(loader))] if args.warmup_steps else []) + [steps] * args.epochs
        wall = 0.0
        try:
            for epoch, n in enumerate(epochs):
                before = workers_cpu_s() if args.num_workers else 0.0
                clock.start()
                _train(model, loader, optimizer, n)
                wall = max(clock.stop(epoch).walls)
                opened["workers_cpu_s"] = workers_cpu_s() - before if args.num_workers else 0.0
            latency = call_latency(env) if not args.num_workers else 0.0  # trainers with workers are not in RPC
            _write_facts(env, args, loader, model, latency, opened)
        finally:
            loader.shutdown()
    return wall


if __name__ == "__main__":
    from pyg_dist.train.entry import run_main
    run_main(main, sys.argv[1:])
