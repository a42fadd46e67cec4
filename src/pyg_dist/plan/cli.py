"""``pyg-dist-plan``: how many machines, how long an epoch, how much memory a rank (see :mod:`pyg_dist.plan`).

Example::

    pyg-dist-plan --graph /tmp/products_like.pt --x-dim 100 --num-classes 47 --train-frac 0.1 --machines 1 2 4 8
    pyg-dist-plan ... --check          # also runs the job for the rows this machine can run: predicted/measured
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.plan.job import fanouts


def build_parser() -> argparse.ArgumentParser:
    """The command line (its groups: the graph, the job, the machines, the run)."""
    p = argparse.ArgumentParser(prog="pyg-dist-plan", description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("graph").add_mutually_exclusive_group(required=True)
    g.add_argument("--graph", default=None, help="a {rowptr, col, N} file (python -m pyg_dist.datasets.products_like)")
    g.add_argument("--dataset", default=None, help="any dataset name pyg-dist-partition reads")
    p.add_argument("--root", default=None, help="where the dataset lies")
    for flag, kind in (("--x-dim", int), ("--num-classes", int), ("--train-frac", float)):
        p.add_argument(flag, type=kind, default=None, help="generated graphs: passed to pyg-dist-partition")
    p.add_argument("--method", choices=["metis", "random"], default="metis", help="how the graph is partitioned")
    job = p.add_argument_group("the job")
    job.add_argument("--num-neighbors", type=fanouts, default=[15, 10, 5], help="fanout per hop, e.g. 15,10,5")
    job.add_argument("--batch-size", type=int, default=1024, help="seeds per batch")
    job.add_argument("--hidden", type=int, default=256, help="GraphSAGE width (depth = number of fanouts)")
    job.add_argument("--cache-ratio", type=float, default=None,
                     help="the feature cache (TrainConfig.cache_ratio, degree policy): a fraction of a partition's "
                          "own rows held as copies of remote ones (default: no cache)")
    job.add_argument("--feature-dtype", choices=["float32", "bfloat16", "float16"], default=None,
                     help="how the partitions store the features (pyg-dist-partition --feature-dtype; default: as "
                          "the dataset gives them); measured in the calibration, so plan it from costs calibrated "
                          "with it")
    job.add_argument("--remote-rows", choices=["exact", "int8"], default="exact",
                     help="how fetched rows travel (TrainConfig.remote_rows); measured in the calibration, so "
                          "plan int8 from costs calibrated with it")
    job.add_argument("--num-workers", type=int, default=0,
                     help="sampler workers per rank (TrainConfig.num_workers; default 0: the trainer samples); "
                          "the calibration then adds runs with one worker a rank")
    m = p.add_argument_group("the machines")
    m.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32], help="machine counts to plan for")
    m.add_argument("--ranks-per-machine", type=int, default=1, help="training processes on each machine")
    m.add_argument("--cores", type=int, default=None, help="cores per machine (default: this machine's)")
    m.add_argument("--link-gbps", type=float, default=10.0, help="the network between machines")
    m.add_argument("--gpu", action="store_true",
                   help="the machines train on a GPU a rank: the calibration and the checks run the job on this "
                        "machine's GPU (cuda:LOCAL_RANK), so plan GPU machines from a calibration on one (default: "
                        "CPU machines; the job never sees a GPU)")
    m.add_argument("--memory-gb", type=float, default=None,
                   help="memory per machine, GiB: each row says whether its ranks fit, and the fewest that do")
    r = p.add_argument_group("the run")
    r.add_argument("--work", default="pyg_dist_plan", help="folder for partitions, records and costs.json")
    r.add_argument("--steps", type=int, default=60,
                   help="calibration batches per run (after --warmup batches); fewer: a shorter, noisier calibration")
    r.add_argument("--warmup", type=int, default=5, help="calibration batches run first, not timed")
    r.add_argument("--repeats", type=int, default=2, help="calibration rounds (interleaved; their batches merged)")
    r.add_argument("--replay-batches", type=int, default=16, help="batches replayed per part count")
    r.add_argument("--costs", default=None, help="reuse this costs.json instead of calibrating")
    r.add_argument("--json", default=None, help="also write the plan (and check) as JSON here ('-': stdout)")
    r.add_argument("--chart", default=None, help="draw the plan into this PNG (needs matplotlib)")
    r.add_argument("--check", action="store_true", help="run the job for 1, 2, 4 ranks here and compare")
    r.add_argument("--check-ranks", type=int, default=4, help="--check: the most ranks to run here")
    r.add_argument("--check-rows", nargs="+", default=None, metavar="RANKS[@GBPS]",
                   help="--check: these rows instead (e.g. 2 2@1: 2 ranks on loopback, 2 ranks at an emulated 1 Gb/s)")
    r.add_argument("--check-steps", type=int, default=0, help="--check: batches per epoch (0: whole epochs)")
    r.add_argument("--check-warmup", type=int, default=0,
                   help="--check: batches run first and not compared (0: the first epoch is compared, start-up "
                        "included)")
    return p


def _validate(args) -> None:
    if min(args.check_steps, args.check_warmup) < 0:
        raise InvalidArgumentError("pyg-dist-plan", "--check-steps/--check-warmup",
                                   (args.check_steps, args.check_warmup), ">= 0")
    for name in ("batch_size", "hidden", "ranks_per_machine", "steps", "replay_batches", "check_ranks", "repeats"):
        if getattr(args, name) < 1:
            raise InvalidArgumentError("pyg-dist-plan", f"--{name.replace('_', '-')}", getattr(args, name), ">= 1")
    for name in ("warmup", "num_workers"):
        if getattr(args, name) < 0:
            raise InvalidArgumentError("pyg-dist-plan", f"--{name.replace('_', '-')}", getattr(args, name), ">= 0")
    if any(n < 1 for n in args.machines):
        raise InvalidArgumentError("pyg-dist-plan", "--machines", args.machines, "machine counts >= 1")
    if args.cache_ratio is not None and not 0 < args.cache_ratio <= 1:
        raise InvalidArgumentError("pyg-dist-plan", "--cache-ratio", args.cache_ratio, "a fraction in (0, 1]")
    if args.memory_gb is not None and not args.memory_gb > 0:
        raise InvalidArgumentError("pyg-dist-plan", "--memory-gb", args.memory_gb, "> 0 (GiB a machine)")
    if not args.link_gbps > 0:
        raise InvalidArgumentError("pyg-dist-plan", "--link-gbps", args.link_gbps, "> 0")
    if args.gpu and (args.check or not args.costs):
        import torch
        if not torch.cuda.is_available():
            raise InvalidArgumentError("pyg-dist-plan", "--gpu", True, "a machine with a GPU to run the job on (torch "
                                       "sees no CUDA device here), or --costs from a calibration with --gpu and no "
                                       "--check")


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (2 on a user error or a failed run, message on stderr)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    from pyg_dist.plan.report import run
    try:
        _validate(args)
        if args.chart:  # fail before the runs, not after them
            from pyg_dist.partition.plot import load_matplotlib
            load_matplotlib("pyg-dist-plan --chart")
        return run(args, sys.stderr)
    except PyGDistError as e:
        print(f"pyg-dist-plan: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["main", "build_parser"]
