"""Memory of one machine's partition per feature dtype: a METIS partitioning of the benchmark graph written with
``--feature-dtype`` float32 and bfloat16 (and float16 when asked), partition 0's stores opened in a fresh process.

Graph: ``--graph FILE`` = a ``{rowptr, col, N}`` file, else the generated reference graph at ``--scale``
(``pyg_dist.datasets.products_like.products_like_csr``, as ``bench_dist.py``);
random ``--dim``-dim float32 features ``x`` and labels ``y`` (47 classes), as in ``bench_dist.py``. Folders are
written once per dtype under ``--cache-dir`` and reused.

Prints ONE table, one row per dtype: the bytes of partition 0's features (floating attributes the dtype applies
to) and of all its attributes, ``part_0`` on disk, and the resident memory (VmRSS) of a fresh process after its
imports and after ``load_stores(folder, 0)`` (``mmap=False`` by default: every row read into memory, what a
trainer holds; ``--mmap`` maps the files instead and then reads every feature row once, so the rows are resident
as page cache charged to the process), its growth, its peak (VmHWM) and the growth relative to float32's.

    python scripts/bench_memory.py --scale 0.01                        # while developing
    python scripts/bench_memory.py --graph /tmp/products_like.pt --dtypes float32 bfloat16 float16
    python scripts/bench_memory.py --scale 0.01 --plot memory.png      # also the table as bar charts (matplotlib)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch


def _status_mb(key: str) -> float:
    """A ``/proc/self/status`` memory line (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def folder(args, dtype: str) -> str:
    """The partition folder of the graph with features stored as ``dtype`` (written on first use)."""
    import bench_dist  # the same graph, features and labels as the distributed benchmark (sys.path[0] = scripts/)
    tag = bench_dist.graph_tag(args)
    path = os.path.join(args.cache_dir, f"mem_{tag}_{args.method}{args.parts}_d{args.dim}_{dtype}")
    if os.path.exists(os.path.join(path, "META.json")):
        return path
    from pyg_dist.partition import Partitioner
    data = bench_dist.benchmark_data(args)
    t0 = time.time()
    Partitioner(data, args.parts, method=args.method, balance=False, feature_dtype=dtype).save(
        path, overwrite=True, progress=False)
    print(f"# partitioned {args.method}/{args.parts} ({dtype}) in {time.time() - t0:.0f}s -> {path}", file=sys.stderr)
    return path


def measure(path: str, mmap: bool) -> dict:
    """In this (fresh) process: memory before and after opening partition 0's stores, and its attribute bytes."""
    from pyg_dist.format.precision import is_feature
    from pyg_dist.store import load_stores
    before = _status_mb("VmRSS")
    graph_store, feature_store = load_stores(path, 0, mmap=mmap)
    cols = [(name, feature_store.get_tensor(group_name=None, attr_name=name))
            for name in feature_store.attr_names(None)]
    if mmap:  # make the mapped feature rows resident, as a trainer's gathers would over an epoch
        for name, col in cols:
            if is_feature(name, col.dtype):
                float(col.sum(dtype=torch.float32))  # no float32 copy of the column
    nbytes = lambda c: c.numel() * c.element_size()  # noqa: E731
    return {"before": before, "after": _status_mb("VmRSS"), "peak": _status_mb("VmHWM"),
            "feat_bytes": sum(nbytes(c) for n, c in cols if is_feature(n, c.dtype)),
            "all_bytes": sum(nbytes(c) for _, c in cols),
            "disk": sum(f.stat().st_size for f in Path(path, "part_0").rglob("*") if f.is_file()),
            "x_dtype": str(dict(cols)["x"].dtype).removeprefix("torch.")}


def plot(args, rows, src: str) -> None:
    """--plot: feature MB, part_0 on disk, RSS growth on open and peak RSS per stored dtype."""
    import bench_plot  # sibling (sys.path[0] = scripts/)
    named = [dict(r, feat_mb=r["feat_bytes"] / 1e6, disk_mb=r["disk"] / 1e6, grow=r["after"] - r["before"])
             for r in rows]
    bench_plot.bar_chart(named, x="x_dtype", ys={"feat_mb": "feature MB", "disk_mb": "part_0 on disk MB",
                                                 "grow": "RSS opened +MiB", "peak": "peak RSS MiB"},
                         path=args.plot, title=f"bench_memory.py: partition 0 of {args.method}/{args.parts}, {src}, "
                                               f"mmap={args.mmap}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="a {rowptr, col, N} file (default: the generated graph at --scale)")
    p.add_argument("--scale", type=float, default=1.0, help="size of the built-in graph (1 = products)")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--method", default="metis")
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="float32 | bfloat16 | float16")
    p.add_argument("--mmap", action="store_true", help="memory-map the partition (then read every feature row)")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the table's main columns into this PNG")
    p.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # internal: one fresh-process measurement
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.mmap)))
        return
    if args.plot:
        import bench_plot
        bench_plot.check_available()
    rows = []
    for dtype in args.dtypes:
        path = folder(args, dtype)
        cmd = [sys.executable, os.path.abspath(__file__), "--measure", path] + (["--mmap"] if args.mmap else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        rows.append(dict(json.loads(out), dtype=dtype))
    base = next((r["after"] - r["before"] for r in rows if r["dtype"] == "float32"), None)
    src = args.graph or f"built-in products shape, scale {args.scale:g}"
    print(f"Partition 0 of a {args.method} partitioning into {args.parts}, {src}; {args.dim}-dim features; stores "
          f"opened with load_stores(mmap={args.mmap}) in a fresh process; MB = 10^6 bytes for sizes, MiB for RSS")
    head = ("stored dtype", "feature MB", "all attributes MB", "part_0 on disk MB", "RSS after imports MiB",
            "RSS after open MiB", "opened +MiB", "peak MiB", "vs float32")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        grow = r["after"] - r["before"]
        ratio = f"{grow / base:.2f}x" if base else "-"
        print(f"| {r['x_dtype']} | {r['feat_bytes'] / 1e6:.1f} | {r['all_bytes'] / 1e6:.1f} | {r['disk'] / 1e6:.1f} | "
              f"{r['before']:.0f} | {r['after']:.0f} | {grow:.1f} | {r['peak']:.0f} | {ratio} |")
    if args.plot:
        plot(args, rows, src)


if __name__ == "__main__":
    main()
