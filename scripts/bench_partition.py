#!/usr/bin/env python
"""Partitioner benchmark: wall time and peak RSS per method and part count, one table.

Each configuration runs in a fresh subprocess (peak RSS from ``os.wait4`` of that child). The graph is
``--graph`` (a ``{rowptr, col, N}`` file) or, without it, ``products_like_graph(--num-nodes, --num-pairs)``
(``pyg_dist.datasets.products_like``; the defaults give the reference benchmark graph) saved once to a temp file.
Every node gets random 100-dim float32 features, a label and an 8 % train mask, all written out.

    python scripts/bench_partition.py --graph /tmp/products_like.pt                  # full size
    python scripts/bench_partition.py --num-nodes 200000 --num-pairs 2600000         # quick
    python scripts/bench_partition.py --graph /tmp/products_like.pt --input-dir /tmp/pl_in \
        --methods metis,ooc-coarsen,ooc-fennel,ooc-random --parts 4 --memory-budget 1GB   # out-of-core

Out-of-core rows (issue 18): ``--input-dir`` is written once from the graph (``edges.npy``, ``x.npy``,
``y.npy``, ``train_mask.npy``; node ids shuffled by a seeded permutation unless ``--keep-ids``, so no method
profits from the generator's community-ordered ids), then every method reads that folder: in-memory
methods load it whole (``load_edgelist``), ``ooc-<method>`` runs :class:`OutOfCorePartitioner` on it with
``--memory-budget``. Target: 4 parts out-of-core in <= 2.5 GB peak, <= 1.5x the in-memory METIS wall,
edge cut <= 1.3x METIS'. A graph larger than memory is generated straight to disk, chunk by chunk
(:func:`pyg_dist.datasets.chunked_synthetic.write_dcsbm_chunks`, ids shuffled, x/y/train_mask)::

    python scripts/bench_partition.py --generate 64000000,512000000 --input-dir /tmp/big_in \
        --methods ooc-fennel --parts 8 --memory-budget 6GB          # 1.02 B directed edges

``--plot PATH`` also draws edge cut, halo ratio, wall time and peak RSS per method and part count into the PNG
PATH (needs matplotlib: ``pip install matplotlib``; see ``scripts/bench_plot.py``).

Target (issue 3): 4 parts with METIS in <= 60 s wall and <= 8 GB peak RSS on the full graph.
Columns: wall / cpu (user + sys) of the whole child, load = reading the graph and making features,
part+write = Partitioner.save, assign = the assignment alone (METIS), peak = the child's max RSS,
max bal = worst balance (max / mean over parts) over all balance constraints.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(args) -> None:
    from pyg_dist.datasets.edgelist import load_edgelist
    from pyg_dist.datasets.registry import load_csr_file
    from pyg_dist.partition import Partitioner
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    t0 = time.perf_counter()
    if args.method.startswith("ooc-"):
        part = OutOfCorePartitioner(args.input_dir, args.parts, args.method[4:], memory_budget=args.memory_budget)
        t1 = time.perf_counter()
        stats = part.save(args.out, overwrite=True, progress=False)
        stats["seconds"]["assign"] = stats["seconds"]["weights"] + stats["seconds"]["assign"]
    else:
        if args.input_dir:
            data = load_edgelist(args.input_dir)
        else:
            data = load_csr_file(args.graph, x_dim=args.x_dim, num_classes=47, train_frac=0.08, seed=0)
        t1 = time.perf_counter()
        kw = {"num_clusters": args.num_clusters} if args.method == "supernode" else {}
        stats = Partitioner(data, args.parts, args.method, base_method="metis", **kw).save(
            args.out, overwrite=True, progress=False)
    t2 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "partition_s": t2 - t1, "assign_s": stats["seconds"]["assign"],
                      "stages": stats["seconds"],
                      "edge_cut": stats["edge_cut"], "halo_ratio": stats["halo_ratio"],
                      "max_balance": max(stats["constraint_balance"].values()),
                      "gb_on_disk": sum(stats["bytes_per_part"]) / 1e9}))


def _run(args, method: str, parts: int, graph: Path, out: Path):
    cmd = [sys.executable, __file__, "--child", "--graph", str(graph), "--method", method, "--parts",
           str(parts), "--out", str(out), "--x-dim", str(args.x_dim), "--num-clusters",
           str(args.num_clusters), "--memory-budget", args.memory_budget]
    if args.input_dir:
        cmd += ["--input-dir", args.input_dir]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out_text, err_text = proc.stdout.read(), proc.stderr.read()
    shutil.rmtree(out, ignore_errors=True)
    if os.waitstatus_to_exitcode(status) != 0:
        return {"error": err_text.strip().splitlines()[-1] if err_text.strip() else f"status {status}"}
    res = json.loads(out_text.strip().splitlines()[-1])
    # ru_maxrss is in KiB on Linux; CPU seconds tell contention apart from work on a shared machine
    res.update(wall_s=wall, peak_gib=usage.ru_maxrss / 2 ** 20, cpu_s=usage.ru_utime + usage.ru_stime)
    return res


def _make_graph(args, tmp: Path) -> Path:
    from pyg_dist.datasets.products_like import write_graph
    path = tmp / "graph.pt"
    write_graph(path, num_nodes=args.num_nodes, num_pairs=args.num_pairs)
    return path


def _make_input(args, graph: Path) -> None:
    """Writes the graph as an out-of-core input folder (ids shuffled unless --keep-ids)."""
    import numpy as np
    import torch
    folder = Path(args.input_dir)
    if (folder / "edges.npy").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    raw = torch.load(graph, weights_only=True, mmap=True)
    n = int(raw["N"])
    gen = torch.Generator().manual_seed(0)
    # not seed 0's first permutation: that one is exactly random_assign(seed=0)'s
    perm = torch.arange(n) if args.keep_ids else torch.randperm(n, generator=torch.Generator().manual_seed(0x5EED))
    edges = np.lib.format.open_memmap(folder / "edges.npy.tmp", mode="w+", dtype=np.int64,
                                      shape=(2, raw["col"].numel()))
    edges[0] = perm[torch.repeat_interleave(torch.arange(n), torch.diff(raw["rowptr"]))].numpy()
    edges[1] = perm[raw["col"]].numpy()
    edges.flush()
    del edges
    os.replace(folder / "edges.npy.tmp", folder / "edges.npy")
    np.save(folder / "x.npy", torch.randn(n, args.x_dim, generator=gen).numpy())
    np.save(folder / "y.npy", torch.randint(0, 47, (n,), generator=gen).numpy())
    np.save(folder / "train_mask.npy", (torch.rand(n, generator=gen) < 0.08).numpy())


def _generate(args) -> None:
    """--generate N,PAIRS: the generator's graph written chunk-wise into --input-dir (once)."""
    from pyg_dist.datasets.chunked_synthetic import write_dcsbm_chunks
    if not args.input_dir:
        sys.exit("--generate needs --input-dir")
    if (Path(args.input_dir) / "y.npy").is_file():
        return
    n, pairs = (int(v) for v in args.generate.split(","))
    t0 = time.perf_counter()
    edges = write_dcsbm_chunks(args.input_dir, n, pairs, x_dim=args.x_dim, num_classes=47, train_frac=0.08)
    print(f"# generated {n} nodes, {edges} directed edges in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def _plot(args, rows) -> None:
    """--plot: the table's edge cut, halo ratio, wall and peak RSS per method (bars per part count)."""
    import bench_plot  # sibling (sys.path[0] = scripts/)
    src = args.graph or args.input_dir or f"products_like_graph({args.num_nodes}, {args.num_pairs})"
    bench_plot.bar_chart([dict(r, method=m, parts=k) for m, k, r in rows], x="method",
                         ys={"edge_cut": "edge cut (fraction of edges)", "halo_ratio": "halo / owned nodes",
                             "wall_s": "wall s (whole child)", "peak_gib": "peak RSS GiB"},
                         path=args.plot, title=f"bench_partition.py: {src}, {args.parts} parts", group="parts",
                         group_label="{} parts")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--graph", default=None, help="{rowptr, col, N} file (default: generated, see --num-nodes)")
    p.add_argument("--num-nodes", type=int, default=2_449_029)
    p.add_argument("--num-pairs", type=int, default=32_400_000)
    p.add_argument("--methods", default="metis,random,supernode")
    p.add_argument("--parts", default="2,4,8")
    p.add_argument("--x-dim", type=int, default=100)
    p.add_argument("--num-clusters", type=int, default=256)
    p.add_argument("--workdir", default=None, help="where partitions are written (default: a temp dir)")
    p.add_argument("--input-dir", default=None, help="out-of-core input folder (written once from the graph)")
    p.add_argument("--keep-ids", action="store_true", help="do not shuffle node ids in --input-dir")
    p.add_argument("--generate", default=None, metavar="NODES,PAIRS",
                   help="write a generated graph of NODES nodes and 2*PAIRS directed edges into --input-dir")
    p.add_argument("--memory-budget", default="1GB", help="ooc-* methods: OutOfCorePartitioner memory_budget")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the table's main columns into this PNG")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args, _ = p.parse_known_args()
    if args.child:
        args.parts = int(args.parts)
        return _child(args)
    if args.plot:
        import bench_plot
        bench_plot.check_available()
    tmp = Path(tempfile.mkdtemp(prefix="bench_partition_", dir=args.workdir))
    try:
        if args.generate:
            _generate(args)
            graph = Path(args.input_dir)
        else:
            graph = Path(args.graph) if args.graph else _make_graph(args, tmp)
        if args.input_dir and not args.generate:
            _make_input(args, graph)
        rows = []
        for method in args.methods.split(","):
            for parts in map(int, args.parts.split(",")):
                res = _run(args, method, parts, graph, tmp / "out")
                rows.append((method, parts, res))
                print(f"# done {method} x{parts}: {res.get('stages', res)}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'method':<12}{'parts':>6}{'wall s':>9}{'cpu s':>8}{'load s':>8}{'part+write s':>13}{'assign s':>9}"
          f"{'peak GiB':>9}{'edge cut':>9}{'halo':>7}{'max bal':>8}{'disk GB':>8}")
    for method, parts, r in rows:
        if "error" in r:
            print(f"{method:<12}{parts:>6}  FAILED: {r['error']}")
            continue
        print(f"{method:<12}{parts:>6}{r['wall_s']:>9.1f}{r['cpu_s']:>8.1f}{r['load_s']:>8.1f}"
              f"{r['partition_s']:>13.1f}{r['assign_s']:>9.1f}{r['peak_gib']:>9.2f}{r['edge_cut']:>9.3f}{r['halo_ratio']:>7.2f}"
              f"{r['max_balance']:>8.3f}{r['gb_on_disk']:>8.2f}")
    if args.plot:
        _plot(args, rows)


if __name__ == "__main__":
    main()
