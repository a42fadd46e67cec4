"""Benchmark of DistNeighborSampler: sampling + feature fetch, 1 rank holding the whole graph vs 2 ranks
on loopback (one core and one thread each), per partitioning method.

Graph: the ogbn-products shape (2.4 M nodes, ~62 M directed edges at ``--scale 1``; communities of 1,200
nodes, 85 % of edges inside), generated with ``pyg_dist.datasets.synthetic.dcsbm_edges`` and cached
under ``--cache-dir`` (the same cache file as ``bench_sampler.py``), or ``--graph FILE`` = the output of
``shared/bench/products_like.py``. Random 100-dim float32 features and labels; batches of 1024
seeds (each rank draws from the nodes its partition owns, as a co-located trainer would), fanouts
[15, 10, 5]. Partition folders are cached under ``--cache-dir`` too.

Prints ONE table: total batches/s over the ranks (batches of all ranks / wall time from the first rank's start
to the last rank's end), speed-up over the 1-rank run (the row "whole graph each, no RPC" runs two independent
whole-graph samplers at once: what 2 ranks could reach on this machine with no communication at all, as they
share its memory bandwidth and caches), fraction of sampled nodes and feature rows that were local (unique
nodes of each batch owned by its rank), fraction of frontier nodes whose one-hop sampling ran on the rank
itself ("expanded here"; seeds and inner hops only), remote requests (one-hop + feature) and remote rounds per
batch, and payload MB per batch (sent + received). The configurations run ``--repeats`` times in interleaved
rounds (this VM's speed drifts by up to ~30 % over minutes); each row is its median round. On loopback a
remote row costs about what a local one does; ``--link-gbps G`` makes every rank's replies wait for their
bytes to cross an emulated G Gb/s NIC (:mod:`pyg_dist.testing.link`), to see what the bytes cost on a network.
``--feature-dtypes float32 bfloat16`` adds, per 2-rank configuration, a row over a folder that stores ``x`` in
that dtype (``Partitioner(feature_dtype=...)``: half the bytes of every remote and cached row).
``--remote-rows exact int8`` adds, per 2-rank configuration, a row whose remote feature rows travel as int8
(``DistNeighborSampler(remote_rows="int8")``, :mod:`pyg_dist.store.quant`): MB/batch counts the wire bytes.

    python scripts/bench_dist.py --scale 0.05                 # while developing
    python scripts/bench_dist.py --graph /tmp/products_like.pt
    python scripts/bench_dist.py --graph /tmp/products_like.pt --methods metis --cache-ratios 0 0.25 --link-gbps 10
    python scripts/bench_dist.py --graph /tmp/products_like.pt --methods metis --remote-rows exact int8 --link-gbps 1
    python scripts/bench_dist.py --scale 0.05 --plot dist.png   # also the table's main columns as bar charts
    python scripts/bench_dist.py --graph /tmp/products_like.pt --methods metis --transports tensorpipe sockets

``--transports tensorpipe sockets`` runs every 2-rank configuration once per RPC transport
(:mod:`pyg_dist.rpc.transport`), labelled ``metis [tensorpipe]`` / ``metis [sockets]``; by default the rows use
the default transport and carry no label.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import torch


def load_graph(args) -> dict:
    """{rowptr, col, N} of a symmetric graph (so CSR == CSC)."""
    from pyg_dist.datasets.synthetic import products_like_csr
    return products_like_csr(args.scale, args.cache_dir, args.graph)


def benchmark_data(args):
    """The benchmark graph as a ``Data``: its edges, random ``args.dim``-dim float32 features ``x`` and 47-class
    labels ``y`` (seed 0), as every distributed benchmark partitions it."""
    from torch_geometric.data import Data
    g = load_graph(args)
    n = g["N"]
    dst = torch.repeat_interleave(torch.arange(n), g["rowptr"][1:] - g["rowptr"][:-1])
    gen = torch.Generator().manual_seed(0)
    return Data(edge_index=torch.stack([g["col"], dst]), num_nodes=n,
                x=torch.rand(n, args.dim, generator=gen), y=torch.randint(0, 47, (n,), generator=gen))


def folder(args, method: str, parts: int, cache_ratio: float = 0.0, written: bool = False,
           feature_dtype: str = "float32") -> str:
    """The cached partition folder of the benchmark graph (written on first use); ``written``: a folder
    whose partitioner also wrote the feature and topology caches of ``cache_ratio``; ``feature_dtype``: the
    dtype the folder stores ``x`` in."""
    tag = os.path.basename(args.graph).rsplit(".", 1)[0] if args.graph else f"scale{args.scale:g}"
    path = os.path.join(args.cache_dir, f"dist_{tag}_{method}{parts}" + (f"_topo{cache_ratio:g}" if written else "")
                        + ("" if feature_dtype == "float32" else f"_{feature_dtype}"))
    if os.path.exists(os.path.join(path, "META.json")):
        return path
    from pyg_dist.partition import Partitioner
    data = benchmark_data(args)
    t0 = time.time()
    extra = {"cache_ratio": cache_ratio, "cache_topology": True} if written else {}
    if feature_dtype != "float32":
        extra["feature_dtype"] = feature_dtype
    Partitioner(data, parts, method=method, balance=False, **extra).save(path, overwrite=True, progress=False)
    print(f"# partitioned {method}/{parts} in {time.time() - t0:.0f}s -> {path}", file=sys.stderr)
    return path


def bench_rank(rank: int, world_size: int, root: str, opts: dict) -> dict:
    """One rank: warm up, then ``opts['batches']`` batches; returns its timing and counters."""
    os.environ["PYG_DIST_RPC_TRANSPORTS"] = opts["transport"]  # TensorPipe's own transports (tensorpipe only)
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(1)
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist import rpc
    from pyg_dist._alloc import tune_allocator
    from pyg_dist.context import DistContext
    from pyg_dist.ops import warmup
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.sampler.stats import SamplerStats
    from pyg_dist.store import load_stores

    warmup()
    tune_allocator()  # what dist_session does
    ctx = DistContext.from_env(num_partitions=opts["num_partitions"])
    gs, fs = load_stores(root, ctx=ctx, mmap=opts["mmap"])  # default: in memory, as DistDGL loads partitions
    serve_partition(gs, fs)
    if opts.get("link_gbps"):  # replies wait for an emulated NIC of that rate (see pyg_dist.testing.link)
        from pyg_dist.sampler.messages import ONE_HOP_OP
        from pyg_dist.store.lookup import LOOKUP_OP
        from pyg_dist.testing.link import EmulatedLink, throttle_callees
        throttle_callees(EmulatedLink(opts["link_gbps"]), [ONE_HOP_OP, LOOKUP_OP])
    stats = SamplerStats()
    sampler = DistNeighborSampler(gs, fs, opts["fanouts"], stats=stats, concurrency=opts["concurrency"],
                                  remote_rows=opts.get("remote_rows", "exact"))
    own = fs.get_global_id()
    gen = torch.Generator().manual_seed(rank)
    inputs = [NodeSamplerInput(None, own[torch.randint(0, own.numel(), (opts["batch_size"],), generator=gen)].unique())
              for _ in range(opts["batches"] + opts["warmup"])]

    async def one(batch_input):  # a trainer consumes each batch and drops it (a held batch pins its buffers)
        out = await sampler.sample_from_nodes_async(batch_input)
        return out.node.numel()

    async def run(batch_inputs):
        return await asyncio.gather(*(one(i) for i in batch_inputs))

    with rpc.rpc_session(ctx, timeout=300, call_timeout=120):
        fill = _fill_cache(gs, fs, opts)
        rpc.run_coroutine(run(inputs[:opts["warmup"]]), timeout=600)
        stats.reset()
        t0, c0 = time.time(), time.process_time()
        rpc.run_coroutine(run(inputs[opts["warmup"]:]), timeout=1200)
        t1, c1 = time.time(), time.process_time()
    return {"t0": t0, "t1": t1, "cpu": c1 - c0, "stats": stats.summary(), "fill": fill}


def _fill_cache(gs, fs, opts) -> dict:
    """Fills this rank's remote-feature cache (``--cache-ratios``); returns its seconds and MB."""
    if not opts["cache_ratio"] or opts["folder_caches"]:  # none, or written by the partitioner: no fill
        return {"seconds": 0.0, "mb": 0.0 if fs.cache is None else fs.cache.nbytes / 2 ** 20}
    from pyg_dist.sampler.cache_policy import build_cache
    t0 = time.perf_counter()
    cache = build_cache(gs, fs, opts["cache_policy"], cache_ratio=opts["cache_ratio"], num_neighbors=opts["fanouts"],
                        batch_size=opts["batch_size"], seed=99)
    fs.set_cache(cache)
    return {"seconds": time.perf_counter() - t0, "mb": cache.nbytes / 2 ** 20}


def run_config(args, method: str, parts: int, ranks: int = 0, cache_ratio: float = 0.0, written: bool = False,
               remote_rows: str = "exact", feature_dtype: str = "float32", transport: str = "") -> dict:
    """One row: ``ranks`` (default: ``parts``) processes over a ``parts``-way folder. ``parts=1`` with 2
    ranks = two independent whole-graph samplers at once (no RPC): this machine's ceiling for 2 ranks.
    ``remote_rows``: the wire format of remote feature rows (``"exact"`` or ``"int8"``); ``feature_dtype``: the
    folder's stored feature dtype; ``transport``: the RPC transport (``""``: the default, unlabelled)."""
    from pyg_dist.testing import spawn_world
    root = folder(args, method, parts, cache_ratio, written, feature_dtype)
    ranks = ranks or parts
    opts = {"fanouts": args.fanouts, "batch_size": args.batch_size, "batches": args.batches,
            "warmup": args.warmup, "concurrency": args.concurrency, "mmap": args.mmap,
            "transport": args.transport, "num_partitions": parts, "cache_ratio": cache_ratio,
            "cache_policy": args.cache_policy, "folder_caches": written, "link_gbps": args.link_gbps,
            "remote_rows": remote_rows}
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if transport:
        env["PYG_DIST_TRANSPORT"] = transport
    import bench_dist  # spawned ranks import the function by module name (sys.path[0] = scripts/)
    res = spawn_world(ranks, bench_dist.bench_rank, root, opts, timeout=1800, env=env)
    wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    total = {k: sum(r["stats"][k] for r in res) for k in res[0]["stats"]}
    b = max(total["batches"], 1)
    name = method if parts > 1 else ("whole graph" if ranks == 1 else "whole graph each, no RPC")
    if written:
        name += " + topology cache"
    if remote_rows != "exact":
        name += f" + {remote_rows} rows"
    if feature_dtype != "float32":
        name += f" + {feature_dtype} folder"
    if transport and parts > 1:
        name += f" [{transport}]"
    return {"method": name, "ranks": ranks, "bps": total["batches"] / wall,
            "local_nodes": total["nodes_local"] / max(total["nodes_local"] + total["nodes_remote"], 1),
            "local_feats": total["feature_rows_local"]
            / max(total["feature_rows_local"] + total["feature_rows_cached"] + total["feature_rows_remote"], 1),
            "cached_feats": (total["feature_rows_local"] + total["feature_rows_cached"])
            / max(total["feature_rows_local"] + total["feature_rows_cached"] + total["feature_rows_remote"], 1),
            "cache": cache_ratio, "fill_s": max(r["fill"]["seconds"] for r in res),
            "cache_mb": max(r["fill"]["mb"] for r in res),
            "local_expand": total["hop_seeds_local"]
            / max(total["hop_seeds_local"] + total["hop_seeds_remote"], 1),
            "req": (total["sampling_requests"] + total["feature_requests"]) / b,
            "rounds": total["remote_sampling_rounds"] / b,
            "mb": (total["bytes_sent"] + total["bytes_received"]) / b / 2 ** 20,
            "cpu_ms": 1000 * sum(r["cpu"] for r in res) / b}


def median_row(runs):
    """The run with the median batches/s (lower median for an even count), with every run's batches/s."""
    ranked = sorted(runs, key=lambda r: r["bps"])
    return dict(ranked[(len(ranked) - 1) // 2], all_bps=[r["bps"] for r in runs])


def plot(args, rows, src: str) -> None:
    """--plot: batches/s, cpu ms/batch, MB/batch and local-or-cached feature rows per configuration."""
    import bench_plot  # sibling (sys.path[0] = scripts/)
    named = [dict(r, config=f"{r['method']}, {r['ranks']} rank{'s' if r['ranks'] > 1 else ''}"
                  + (f", cache {r['cache']:g}" if r["cache"] else ""), cached_pct=100 * r["cached_feats"])
             for r in rows]
    bench_plot.bar_chart(named, x="config", ys={"bps": "batches/s total (all ranks)", "cpu_ms": "cpu ms/batch",
                                                "mb": "MB/batch (sent + received)",
                                                "cached_pct": "local or cached feature rows %"},
                         path=args.plot, title=f"bench_dist.py: {src}; fanouts {args.fanouts}, batch {args.batch_size}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="products_like.py output ({rowptr, col, N})")
    p.add_argument("--scale", type=float, default=1.0, help="size of the built-in graph (1 = products)")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--methods", nargs="+", default=["metis", "random", "hybrid"])
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=100, help="timed batches per rank")
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed batches per rank first (the buffer pool and allocator reach steady state)")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=2, help="batches in flight per rank")
    p.add_argument("--transport", choices=["default", "uv"], default="uv",
                   help="TensorPipe's own transport (rows on tensorpipe): uv (TCP, pyg_dist's choice) or torch's "
                        "default (shm, busy-polls)")
    p.add_argument("--transports", nargs="+", choices=["sockets", "tensorpipe"], default=None,
                   help="RPC transports: every 2-rank configuration runs once on each, labelled [name] (default: "
                        "the default transport, unlabelled)")
    p.add_argument("--mmap", action="store_true", help="memory-map the partitions instead of loading them")
    p.add_argument("--link-gbps", type=float, default=None,
                   help="emulate a NIC: every rank's replies wait for their bytes to cross a link of this many "
                        "Gb/s (sleeps, no CPU; requests and latency not modelled); default: plain loopback")
    p.add_argument("--cache-ratios", type=float, nargs="+", default=[0.0],
                   help="remote-feature cache budgets (fraction of the partition's own feature bytes), one row each")
    p.add_argument("--cache-policy", choices=["degree", "presample"], default="degree")
    p.add_argument("--folder-caches", type=float, nargs="*", default=None, metavar="RATIO",
                   help="also rows with caches written by the partitioner (feature + topology, degree policy; 0 s "
                        "fill): for the given ratios, or for every non-zero --cache-ratios value when none is given")
    p.add_argument("--remote-rows", nargs="+", choices=["exact", "int8"], default=["exact"],
                   help="wire formats of remote feature rows, one row each per 2-rank configuration (int8: "
                        "quantised rows, DistNeighborSampler(remote_rows='int8'))")
    p.add_argument("--feature-dtypes", nargs="+", choices=["float32", "bfloat16", "float16"], default=["float32"],
                   help="stored feature dtypes of the folders (Partitioner(feature_dtype=...)), one row each per "
                        "2-rank configuration with exact rows")
    p.add_argument("--repeats", type=int, default=2,
                   help="rounds over all configurations (interleaved, so machine drift hits every row); "
                        "each row reports its median round")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the table's main columns into this PNG")
    args = p.parse_args(argv)
    if args.plot:
        import bench_plot
        bench_plot.check_available()
    configs = [("random", 1, 1, 0.0, False), ("random", 1, 2, 0.0, False)]
    for m in args.methods:
        written = [] if args.folder_caches is None or m == "hybrid" else args.folder_caches or args.cache_ratios
        for t in args.transports or [""]:
            for wire in args.remote_rows:
                configs += [(m, 2, 2, r, False, wire, "float32", t) for r in args.cache_ratios]
                configs += [(m, 2, 2, r, True, wire, "float32", t) for r in written if r]
            for dtype in args.feature_dtypes:
                if dtype != "float32":
                    configs += [(m, 2, 2, r, False, "exact", dtype, t) for r in args.cache_ratios]
    rounds = [[run_config(args, *c) for c in configs] for _ in range(max(1, args.repeats))]
    rows = [median_row([r[i] for r in rounds]) for i in range(len(configs))]
    for i, row in enumerate(rows):  # each round's ratio to that round's ceiling: drift between rounds cancels
        ratios = sorted(r[i]["bps"] / r[1]["bps"] for r in rounds)
        row["round_ratio"] = ratios[(len(ratios) - 1) // 2]
    base, ceiling = rows[0]["bps"], rows[1]["bps"]
    src = args.graph or f"built-in products shape, scale {args.scale:g}"
    link = f", replies over an emulated {args.link_gbps:g} Gb/s link per rank" if args.link_gbps else ""
    print(f"DistNeighborSampler, {src}; fanouts {args.fanouts}, batch {args.batch_size}, {args.dim}-dim float32, "
          f"1 core + 1 thread per rank, concurrency {args.concurrency}, {args.warmup} warm-up + {args.batches} timed "
          f"batches per rank, partitions {'memory-mapped' if args.mmap else 'in memory'}, RPC transport "
          f"{'/'.join(args.transports or ['default'])} (TensorPipe's: {args.transport}){link}; "
          f"cache policy {args.cache_policy}; median of {max(1, args.repeats)} interleaved "
          "rounds "
          "(all rounds' batches/s in brackets; \"same round's ceiling\": median over rounds of the row's batches/s "
          "divided by the ceiling row's in the same round)")
    head = ("partitioning", "ranks", "cache ratio", "batches/s total", "vs 1 rank", "vs no-RPC ceiling",
            "same round's ceiling", "local nodes", "local feat rows", "local or cached feat rows", "expanded here",
            "remote req/batch", "remote sampling rounds/batch", "MB/batch", "cpu ms/batch", "cache MB/rank",
            "cache fill s")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        every = "/".join(f"{b:.2f}" for b in r["all_bps"])
        print(f"| {r['method']} | {r['ranks']} | {r['cache']:g} | {r['bps']:.2f} [{every}] | {r['bps'] / base:.2f}x | "
              f"{r['bps'] / ceiling:.2f}x | {r['round_ratio']:.2f}x | {100 * r['local_nodes']:.1f}% | "
              f"{100 * r['local_feats']:.1f}% | "
              f"{100 * r['cached_feats']:.1f}% | {100 * r['local_expand']:.1f}% | {r['req']:.2f} | {r['rounds']:.2f} | "
              f"{r['mb']:.2f} | {r['cpu_ms']:.0f} | {r['cache_mb']:.0f} | {r['fill_s']:.1f} |")
    if args.plot:
        plot(args, rows, src)


if __name__ == "__main__":
    main()
