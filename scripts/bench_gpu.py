"""Benchmark of the GPU path: GraphSAGE steps/s with the model on the CPU vs on the GPU, the device stage off vs
on, the GPU feature cache off vs on, and how much of the host-to-device copy the stage hides. One rank holding
the whole graph (a 1-part folder, ``DistNeighborLoader`` under ``dist_session``).

Graph, features and folder: as ``bench_dist.py`` (``--graph`` = a ``{rowptr, col, N}`` file, else the
generated reference graph at ``--scale``; 100-dim float32 ``x``, 47 classes). Batches of ``--batch-size`` random
seeds, fanouts ``--fanouts``, ``--concurrency`` batches sampled ahead on the background loop. The model is a
``len(fanouts)``-layer GraphSAGE (hidden ``--hidden``), Adam; no ``loss.item()`` per step (the GPU runs ahead
until the loader makes it wait).

Rows (one table):

* ``sampler alone``: the loader's batches per second with no model (the ceiling of any GPU row when sampling is
  the bound);
* ``model on cpu``: the whole step on the CPU (all cores);
* ``gpu, stage off``: host batches, ``batch.to("cuda")`` in the loop (PyG's usual loop);
* ``gpu, stage on``: ``device="cuda"``: pinned batches copied on a side stream one batch ahead;
* ``gpu, stage + cache``: also ``TrainConfig(gpu_cache_bytes=...)``: node rows gathered on the GPU.

Then the copy/compute overlap, measured on ``--overlap-batches`` batches sampled beforehand and held in pinned
host memory (so sampling is out of the picture): ms per step with the batches already on the GPU (``resident``),
copied in the loop (``to()``), and through the stage; ``hidden = 1 - (stage - resident) / (to() - resident)``.

    python scripts/bench_gpu.py --scale 0.05 --steps 10                    # while developing (CPU rows only)
    python scripts/bench_gpu.py --graph /tmp/products_like.pt              # on a GPU machine
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dist  # noqa: E402  (the graph and its cached partition folders)


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _train(loader, model, dev, steps: int, warmup: int, move: bool, bs: int) -> dict:
    """Steps/s of ``steps`` training steps after ``warmup``; ms per step waiting for the loader."""
    import torch.nn.functional as F
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    it, wait, t0 = iter(loader), 0.0, time.perf_counter()
    try:
        for i in range(warmup + steps):
            if i == warmup:
                _sync(dev)
                wait, t0 = 0.0, time.perf_counter()
            a = time.perf_counter()
            batch = next(it)
            wait += time.perf_counter() - a
            if move:
                batch = batch.to(dev)
            opt.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index)[:bs], batch.y[:bs]).backward()
            opt.step()
        _sync(dev)
        t = time.perf_counter() - t0
    finally:
        getattr(it, "close", lambda: None)()
    return {"sps": steps / t, "wait_ms": 1000 * wait / steps}


def _sampler_rate(loader, steps: int, warmup: int) -> dict:
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    nodes = 0
    for _ in range(steps):
        nodes += next(it).num_nodes
    t = time.perf_counter() - t0
    getattr(it, "close", lambda: None)()
    return {"sps": steps / t, "wait_ms": 1000 * t / steps, "nodes": nodes / steps}


def _model(args, dev):
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    return GraphSAGE(args["dim"], args["hidden"], len(args["fanouts"]), 47).to(dev)


def _steps_over(batches, model, dev, bs: int, move: bool) -> float:
    """ms per training step over ``batches`` (an iterable), synchronised at the end; ``move``: each batch
    copied to ``dev`` in the loop (a shallow copy first: PyG's ``to()`` works in place)."""
    import torch.nn.functional as F
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _sync(dev)
    t0, n = time.perf_counter(), 0
    for batch in batches:
        if move:
            batch = copy.copy(batch).to(dev)
        opt.zero_grad()
        F.cross_entropy(model(batch.x, batch.edge_index)[:bs], batch.y[:bs]).backward()
        opt.step()
        n += 1
    _sync(dev)
    return 1000 * (time.perf_counter() - t0) / n


def _overlap(make_loader, args, dev) -> dict:
    """Copy/compute overlap on pre-sampled pinned batches (see the module docstring)."""
    from pyg_dist.loader.device import DeviceStage
    it = iter(make_loader(None, None))
    host = [next(it).pin_memory() for _ in range(args["overlap_batches"])]
    getattr(it, "close", lambda: None)()
    resident = [copy.copy(b).to(dev) for b in host]  # shallow copies: the host batches stay on the host
    mb = sum(sum(v.numel() * v.element_size() for v in b.to_dict().values() if torch.is_tensor(v))
             for b in host) / len(host) / 2 ** 20
    model, bs = _model(args, dev), args["batch_size"]
    _steps_over(resident, model, dev, bs, False)                               # warm-up
    rounds: dict = {"resident": [], "to": [], "stage": [], "copy_only": []}
    for _ in range(args["overlap_rounds"]):                                   # interleaved
        rounds["resident"].append(_steps_over(resident, model, dev, bs, False))
        rounds["to"].append(_steps_over(host, model, dev, bs, True))
        rounds["stage"].append(_steps_over(DeviceStage(iter(host), dev), model, dev, bs, False))
        rounds["copy_only"].append(_copy_ms(host, dev))
    med = {k: sorted(v)[len(v) // 2] for k, v in rounds.items()}
    exposed = med["to"] - med["resident"]
    return dict(med, mb=mb, exposed=exposed, hidden=1 - (med["stage"] - med["resident"]) / med["copy_only"],
                hidden_vs_loop=1 - (med["stage"] - med["resident"]) / exposed if exposed > 0 else float("nan"))


def _copy_ms(host, dev) -> float:
    """ms per batch of copying the pinned host batches to ``dev`` alone (nothing else on the GPU)."""
    _sync(dev)
    t0 = time.perf_counter()
    for b in host:
        copy.copy(b).to(dev, non_blocking=True)
    _sync(dev)
    return 1000 * (time.perf_counter() - t0) / len(host)


def rank_main(rank: int, world_size: int, root: str, args: dict) -> dict:
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.ops import warmup
    from pyg_dist.train.session import TrainConfig, dist_session

    warmup()
    cuda = torch.cuda.is_available()
    cfg = TrainConfig(root, timeout=600, device="cuda" if cuda else "cpu",
                      gpu_cache_bytes=args["gpu_cache_bytes"] if cuda else None)
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu only", "threads": torch.get_num_threads()}
    t0 = time.perf_counter()
    with dist_session(cfg) as env:
        out["open_s"] = time.perf_counter() - t0
        own = env.feature_store.get_global_id()
        gen = torch.Generator().manual_seed(0)
        seeds = own[torch.randperm(own.numel(), generator=gen)[:args["batch_size"] * 400]]

        def make_loader(device, gpu_cache):
            return DistNeighborLoader(env, args["fanouts"], input_nodes=seeds, batch_size=args["batch_size"],
                                      shuffle=True, seed=0, concurrency=args["concurrency"], device=device,
                                      gpu_cache=gpu_cache, seed_split="partition")

        steps, warm, bs = args["steps"], args["warmup"], args["batch_size"]
        out["sampler"] = _sampler_rate(make_loader(None, None), steps, warm)
        if cuda:  # the sampler's rate when the GPU holds the rows (no host gather of x; rows built there)
            out["sampler_cache"] = _sampler_rate(make_loader(env.device, env.gpu_cache), steps, warm)
        cpu = torch.device("cpu")
        out["cpu"] = _train(make_loader(None, None), _model(args, cpu), cpu, args["cpu_steps"], 1, False, bs)
        if cuda:
            dev = env.device
            out["cache"] = repr(env.gpu_cache)
            out["gpu_off"] = _train(make_loader(None, None), _model(args, dev), dev, steps, warm, True, bs)
            out["gpu_stage"] = _train(make_loader(dev, None), _model(args, dev), dev, steps, warm, False, bs)
            out["gpu_cache"] = _train(make_loader(dev, env.gpu_cache), _model(args, dev), dev, steps, warm, False, bs)
            out["overlap"] = _overlap(make_loader, args, dev)
    return out


def print_table(res: dict, args) -> None:
    src = args.graph or f"built-in products shape, scale {args.scale:g}"
    print(f"GraphSAGE {len(args.fanouts)}x{args.hidden} on {src}: 1 rank (1-part folder), DistNeighborLoader, batch "
          f"{args.batch_size}, fanouts {args.fanouts}, concurrency {args.concurrency}; {res['device']}, "
          f"{res['threads']} torch threads; {args.warmup} warm-up + {args.steps} timed steps "
          f"({args.cpu_steps} for the CPU model); ~{res['sampler']['nodes']:.0f} nodes per batch")
    print("| configuration | steps/s | vs model on cpu | vs sampler alone | wait for batch ms/step |")
    print("|---|---|---|---|---|")
    base, ceil = res["cpu"]["sps"], res["sampler"]["sps"]
    names = [("sampler", "sampler alone (no model)"),
             ("sampler_cache", "sampler alone, rows from the gpu cache (no model)"), ("cpu", "model on cpu"),
             ("gpu_off", "gpu, stage off (to())"),
             ("gpu_stage", "gpu, stage on"), ("gpu_cache", "gpu, stage on + gpu cache")]
    for key, name in names:
        if key in res:
            r = res[key]
            print(f"| {name} | {r['sps']:.2f} | {r['sps'] / base:.1f}x | {r['sps'] / ceil:.2f} | {r['wait_ms']:.1f} |")
    if "overlap" in res:
        o = res["overlap"]
        print(f"\nCopy/compute overlap ({args.overlap_batches} pre-sampled pinned batches, ~{o['mb']:.0f} MB each, "
              f"median of {args.overlap_rounds} interleaved rounds), ms per step: batches resident on the GPU "
              f"{o['resident']:.1f}, copied in the loop {o['to']:.1f}, through the stage {o['stage']:.1f}; the copy "
              f"alone {o['copy_only']:.1f} ms/batch ({o['mb'] / o['copy_only']:.1f} GB/s). Hidden by the stage: "
              f"{100 * o['hidden']:.0f} % of the copy alone ({100 * o['hidden_vs_loop']:.0f} % of what the copy "
              f"in the loop added)")
        print(f"GPU cache: {res['cache']}; opening the folder (and filling the cache) took {res['open_s']:.1f} s")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="a {rowptr, col, N} file (default: the generated graph at --scale)")
    p.add_argument("--scale", type=float, default=1.0, help="size of the built-in graph (1 = products)")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4, help="batches sampled ahead on the background loop")
    p.add_argument("--steps", type=int, default=30, help="timed steps per GPU row and for the sampler")
    p.add_argument("--cpu-steps", type=int, default=4, help="timed steps with the model on the CPU")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gpu-cache-mb", type=int, default=4096, help="GPU cache budget (TrainConfig.gpu_cache_bytes)")
    p.add_argument("--overlap-batches", type=int, default=8)
    p.add_argument("--overlap-rounds", type=int, default=3)
    args = p.parse_args(argv)
    root = bench_dist.folder(args, "random", 1)
    opts = {"fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden, "dim": args.dim,
            "concurrency": args.concurrency, "steps": args.steps, "cpu_steps": args.cpu_steps, "warmup": args.warmup,
            "gpu_cache_bytes": args.gpu_cache_mb << 20, "overlap_batches": args.overlap_batches,
            "overlap_rounds": args.overlap_rounds}
    import bench_gpu  # the spawned rank imports the function by module name (sys.path[0] = scripts/)
    from pyg_dist.testing import spawn_world
    threads = str(os.cpu_count() or 1)  # the CPU model's step uses every core (spawn_world defaults to one)
    (res,) = spawn_world(1, bench_gpu.rank_main, root, opts, timeout=3600, env={"OMP_NUM_THREADS": threads})
    print_table(res, args)


if __name__ == "__main__":
    main()
