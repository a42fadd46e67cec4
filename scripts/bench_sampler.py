"""Benchmark of pyg_dist's multi-hop NeighborSampler (relabel and SamplerOutput included).

Graph: an ogbn-products-shaped power-law graph with communities (2.4 M nodes, ~62 M directed edges at
``--scale 1``), generated with ``pyg_dist.datasets.synthetic.dcsbm_edges`` and cached under
``--cache-dir``; or ``--graph FILE`` = the output of ``shared/bench/products_like.py`` (a dict
{rowptr, col, N} of a symmetric graph). Batches of 1024 random seeds, fanouts [15, 10, 5].

Prints ONE table: ms/batch (wall), cpu ms/batch (process CPU time, all threads: on a shared machine
the 1-thread figure is the steadier one) and sampled edges/s (edges in the output over all hops) per
backend and thread count, and the first-batch latency of a fresh process (numba cache hit, and with an
empty cache = compile). Each timed row follows ``--warmup`` untimed batches at the same thread count.

    python scripts/bench_sampler.py --scale 0.1          # while developing
    python scripts/bench_sampler.py                      # full size (~3 GB RAM)
    python scripts/bench_sampler.py --graph /tmp/products_like.pt
    python scripts/bench_sampler.py --scale 0.1 --plot sampler.png   # also the table as bar charts (matplotlib)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def load_graph(args) -> dict:
    """{rowptr, col, N} of a symmetric graph (so CSR == CSC)."""
    from pyg_dist.datasets.synthetic import products_like_csr
    return products_like_csr(args.scale, args.cache_dir, args.graph)


def make_sampler(g: dict, backend: str, fanouts):
    from torch_geometric.data import Data

    from pyg_dist import NeighborSampler
    from pyg_dist._alloc import tune_allocator
    tune_allocator()  # glibc keeps the batch's 1-30 MB arrays for reuse (what a distributed session does)
    n, rowptr, col = g["N"], g["rowptr"], g["col"]
    dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    data = Data(edge_index=torch.stack([col, dst]), num_nodes=n)
    del dst
    return NeighborSampler(data, fanouts, backend=backend, is_sorted=True)


def run_batches(sampler, n: int, batches: int, seeds: int, seed: int = 0):
    from torch_geometric.sampler import NodeSamplerInput
    gen = torch.Generator().manual_seed(seed)
    inputs = [torch.randperm(n, generator=gen)[:seeds] for _ in range(batches)]
    edges, t0, c0 = 0, time.perf_counter(), time.process_time()
    for s in inputs:
        out = sampler.sample_from_nodes(NodeSamplerInput(None, s))
        edges += out.row.numel()
    return time.perf_counter() - t0, edges, time.process_time() - c0


def cold_child(args) -> None:
    """Fresh process: time the first batch (numba cache load or compile included)."""
    g = load_graph(args)
    sampler = make_sampler(g, args.cold_child, args.fanouts)
    sec, edges, _ = run_batches(sampler, g["N"], 1, args.seeds, seed=1)
    print(json.dumps({"ms": 1000 * sec, "edges": edges}))


def cold_latency(args, backend: str, empty_cache: bool) -> str:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if empty_cache:
            env["NUMBA_CACHE_DIR"] = tmp
        cmd = [sys.executable, __file__, "--cold-child", backend, "--scale", str(args.scale),
               "--cache-dir", args.cache_dir, "--seeds", str(args.seeds),
               "--fanouts", ",".join(map(str, args.fanouts))] + (["--graph", args.graph] if args.graph else [])
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if res.returncode != 0:
        return f"failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}"
    return f"{json.loads(res.stdout.strip().splitlines()[-1])['ms']:.0f}"


def plot(args, g: dict, rows) -> None:
    """--plot: ms/batch, cpu ms/batch and M edges/s per backend, one bar per thread count."""
    import bench_plot  # sibling (sys.path[0] = scripts/)
    keys = ("backend", "threads", "ms", "cpu", "meps", "epb")
    bench_plot.bar_chart([dict(zip(keys, r)) for r in rows], x="backend",
                         ys={"ms": "ms/batch (wall)", "cpu": "cpu ms/batch", "meps": "M sampled edges/s"},
                         path=args.plot, group="threads", group_label="{} thread(s)",
                         title=f"bench_sampler.py: N={g['N']:,} E={g['col'].numel():,}, {args.seeds} seeds, "
                               f"fanouts {args.fanouts}, threads {args.threads}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--graph", default=None)
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--seeds", type=int, default=1024)
    p.add_argument("--fanouts", type=lambda s: [int(v) for v in s.split(",")], default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10, help="untimed batches before each timed row")
    p.add_argument("--torch-batches", type=int, default=3)
    p.add_argument("--threads", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2])
    p.add_argument("--backends", default=None, help="comma list; default: every available backend")
    p.add_argument("--no-cold", action="store_true", help="skip the fresh-process first-batch rows")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the table's main columns into this PNG")
    p.add_argument("--cold-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cold_child:
        return cold_child(args)
    if args.plot:
        import bench_plot
        bench_plot.check_available()
    from pyg_dist.ops import available_backends
    backends = args.backends.split(",") if args.backends else available_backends()
    g = load_graph(args)
    print(f"graph: N={g['N']:,} E={g['col'].numel():,}; {args.seeds} seeds, fanouts {args.fanouts}")
    rows = []
    for backend in backends:
        sampler = make_sampler(g, backend, args.fanouts)
        batches = args.torch_batches if backend == "torch" else args.batches
        for t in args.threads:
            torch.set_num_threads(t)
            # steady state: the first batches after start-up or a thread change run up to 1.5x slower
            # (page faults in the relabel maps and output buffers, thread-pool start)
            run_batches(sampler, g["N"], 1 if backend == "torch" else args.warmup, args.seeds, seed=99)
            sec, edges, cpu = run_batches(sampler, g["N"], batches, args.seeds)
            rows.append((backend, t, 1000 * sec / batches, 1000 * cpu / batches, edges / sec / 1e6, edges / batches))
        del sampler
    cold = {}
    if not args.no_cold:
        for backend in backends:
            cold[backend] = (cold_latency(args, backend, False),
                             cold_latency(args, backend, True) if backend == "numba" else "-")
    print(f"{'backend':<8} {'threads':>7} {'ms/batch':>9} {'cpu ms/batch':>12} {'M edges/s':>10} {'edges/batch':>12} "
          f"{'1st batch ms (cached)':>22} {'1st batch ms (compile)':>23}")
    for backend, t, ms, cpu, meps, epb in rows:
        c = cold.get(backend, ("-", "-"))
        print(f"{backend:<8} {t:>7} {ms:>9.1f} {cpu:>12.1f} {meps:>10.2f} {epb:>12,.0f} {c[0]:>22} {c[1]:>23}")
    if args.plot:
        plot(args, g, rows)


if __name__ == "__main__":
    main()
