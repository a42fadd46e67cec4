"""Benchmark of the loaders' prefetching: GraphSAGE training steps per second with one batch at a time
(``concurrency=1``), batches in flight on the background loop (``concurrency=2``), and a sampler
worker process (``num_workers=1``), for 1 rank holding the whole graph and 2 ranks on loopback.

Graph, partitions, features and cache: as ``bench_dist.py`` (``--graph`` = a ``{rowptr, col, N}``
file, else the generated reference graph at ``--scale``). Each rank trains a
``--layers``-layer GraphSAGE (hidden ``--hidden``, 47 classes, Adam, DDP over gloo, one torch thread)
on batches of ``--batch-size`` seeds its partition owns, fanouts ``--fanouts``. Ranks are not pinned
to cores: with ``concurrency > 1`` the next batches are sampled while the step trains, on whatever core
is free.

Prints ONE table: steps/s over all ranks (steps of all ranks / wall time of the slowest rank), speed-up
over ``concurrency=1`` of the same deployment, and per step the milliseconds the training loop waited
for its batch and spent in forward + backward + optimizer. Configurations run ``--repeats`` times in
interleaved rounds; each row is its median round.

    python scripts/bench_train.py --scale 0.05 --steps 10        # while developing
    python scripts/bench_train.py --graph /tmp/products_like.pt
    python scripts/bench_train.py --graph /tmp/products_like.pt --link-gbps 1    # remote rounds over a slow link

``--link-gbps G``: every rank's replies to its peers wait for an emulated NIC of ``G`` Gb/s
(:mod:`pyg_dist.testing.link`, as in ``bench_dist.py``); only the 2-rank rows without sampler workers run
(the link throttles the trainers' own serving; a worker process serves without it), so the table shows how
much of the link's time ``concurrency=2`` hides behind the training step.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dist  # noqa: E402  (the graph, its cached partitions, median rows)


def train_rank(rank: int, world_size: int, root: str, opts: dict) -> dict:
    """One rank: ``opts['warmup']`` untimed steps, then ``opts['steps']`` timed ones."""
    torch.set_num_threads(1)
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.ops import warmup
    from pyg_dist.train.session import TrainConfig, dist_session, wrap_ddp

    warmup()
    cfg = TrainConfig(root, num_workers=opts["num_workers"], timeout=300)
    with dist_session(cfg) as env:
        if opts.get("link_gbps"):  # replies wait for an emulated NIC of that rate (see pyg_dist.testing.link)
            from pyg_dist.sampler.messages import ONE_HOP_OP
            from pyg_dist.store.lookup import LOOKUP_OP
            from pyg_dist.testing.link import EmulatedLink, throttle_callees
            throttle_callees(EmulatedLink(opts["link_gbps"]), [ONE_HOP_OP, LOOKUP_OP])
        loader = DistNeighborLoader(env, opts["fanouts"], batch_size=opts["batch_size"], shuffle=True,
                                    num_workers=opts["num_workers"], concurrency=opts["concurrency"])
        model = wrap_ddp(GraphSAGE(opts["dim"], opts["hidden"], opts["layers"], 47), env)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        wait = step = 0.0
        it = iter(loader)
        try:
            for i in range(opts["warmup"] + opts["steps"]):
                if i == opts["warmup"]:
                    wait = step = 0.0
                    t0 = time.time()
                a = time.perf_counter()
                batch = next(it)
                b = time.perf_counter()
                optimizer.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                optimizer.step()
                del batch, out
                wait, step = wait + b - a, step + time.perf_counter() - b
            t1 = time.time()
        finally:
            del it
            loader.shutdown()
    return {"t0": t0, "t1": t1, "wait": wait, "step": step}


def run_config(args, method: str, parts: int, concurrency: int, workers: int) -> dict:
    from pyg_dist.testing import spawn_world
    root = bench_dist.folder(args, method, parts)
    opts = {"fanouts": args.fanouts, "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
            "concurrency": concurrency, "num_workers": workers, "dim": args.dim, "hidden": args.hidden,
            "layers": len(args.fanouts), "link_gbps": args.link_gbps}
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    import bench_train  # spawned ranks import the function by module name (sys.path[0] = scripts/)
    res = spawn_world(parts, bench_train.train_rank, root, opts, timeout=3600, env=env)
    wall = max(r["t1"] - r["t0"] for r in res)
    steps = args.steps * parts
    how = f"num_workers={workers}" if workers else f"concurrency={concurrency}"
    return {"method": "whole graph" if parts == 1 else method, "ranks": parts, "how": how,
            "bps": steps / wall, "wait_ms": 1000 * sum(r["wait"] for r in res) / steps,
            "step_ms": 1000 * sum(r["step"] for r in res) / steps}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="a {rowptr, col, N} file (default: the generated graph at --scale)")
    p.add_argument("--scale", type=float, default=1.0, help="size of the built-in graph (1 = products)")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--method", default="metis", help="partitioning of the 2-rank rows")
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--steps", type=int, default=30, help="timed steps per rank")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per rank first")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds; each row is its median")
    p.add_argument("--link-gbps", type=float, default=None,
                   help="replies cross an emulated link of this many Gb/s per rank (2-rank rows, no workers)")
    args = p.parse_args(argv)
    configs = [(m, n, c, w) for m, n in (("random", 1), (args.method, 2)) for c, w in ((1, 0), (2, 0), (1, 1))]
    if args.link_gbps:
        configs = [(args.method, 2, c, 0) for c in (1, 2, 3)]
    rounds = [[run_config(args, *c) for c in configs] for _ in range(max(1, args.repeats))]
    rows = [bench_dist.median_row([r[i] for r in rounds]) for i in range(len(configs))]
    src = args.graph or f"built-in products shape, scale {args.scale:g}"
    print(f"Training with DistNeighborLoader, {src}; GraphSAGE {len(args.fanouts)}x{args.hidden}, fanouts "
          f"{args.fanouts}, batch {args.batch_size}, 1 torch thread per rank, {args.warmup} warm-up + {args.steps} "
          f"timed steps per rank; median of {max(1, args.repeats)} interleaved rounds (all rounds in brackets)"
          + (f"; replies over an emulated {args.link_gbps:g} Gb/s link per rank" if args.link_gbps else ""))
    head = ("partitioning", "ranks", "batches", "steps/s total", "vs concurrency=1", "wait ms/step", "train ms/step")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for i, r in enumerate(rows):
        base = rows[i - i % 3]["bps"]  # the group's concurrency=1 row
        every = "/".join(f"{b:.2f}" for b in r["all_bps"])
        print(f"| {r['method']} | {r['ranks']} | {r['how']} | {r['bps']:.2f} [{every}] | {r['bps'] / base:.2f}x | "
              f"{r['wait_ms']:.0f} | {r['step_ms']:.0f} |")


if __name__ == "__main__":
    main()
