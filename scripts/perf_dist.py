"""Where a distributed batch's CPU goes: ``perf record`` over the timed loop of ``bench_dist.py`` rows, one table.

Runs the no-RPC ceiling (2 ranks, each sampling the whole graph) and one 2-rank partitioned row, each with
``perf record -F 499 -a`` over its timed batches only, and splits each row's CPU per batch (``cpu ms/batch`` of
``bench_dist``) by what ran: the sampling kernels, row gathers, relabelling, the routing kernels, the kernel
(TensorPipe's cross-memory copies, scheduling, page faults), Python, and the rest of libtorch / numpy / libc.
The difference of the two rows is the RPC path's own CPU. Numba's compiled functions are named through
``/tmp/perf-<pid>.map`` files that every rank writes (perf's JIT symbol convention).

Needs Linux ``perf`` (Debian: ``apt-get install linux-perf``) with permission to sample the whole system
(``kernel.perf_event_paranoid <= 0`` or root); exits with a message when it is missing.

Example:
    python scripts/perf_dist.py --graph products_like.pt --method metis --cache-ratio 0.25
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dist  # noqa: E402 -- the rows, folders and rank loop of the benchmark this profiles

#: (category, pattern over the symbol), first match wins; unmatched symbols go by library.
CATEGORIES = [("sampling kernels", r"sample_kernel|count_kernel"),
              ("row gathers", r"copy_rows|take_rows|memmove|index_select"),
              ("relabel", r"relabel|reset_dense"),
              ("routing kernels", r"split_by|count_by|place_segments|scatter_segments|rows_in_range"),
              ("int8 codec", r"quantise")]
_TIMED = 1200  # the timeout bench_dist passes to the timed loop's run_coroutine (how the rank wrapper finds it)


def _write_perf_map() -> None:
    """``/tmp/perf-<pid>.map``: the entry of every compiled overload of pyg_dist's numba kernels."""
    entries = []
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if not name.startswith("pyg_dist.ops._numba"):
            continue
        for attr, obj in list(vars(mod).items()):
            for cres in list(getattr(obj, "overloads", {}).values()) if isinstance(getattr(obj, "overloads", None),
                                                                                    dict) else []:
                try:
                    addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
                except Exception:  # noqa: BLE001 -- a kernel without native code is simply not named
                    continue
                if addr:
                    entries.append((addr, f"numba:{name.rsplit('.', 1)[-1]}.{attr}"))
    entries.sort()
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for i, (addr, label) in enumerate(entries):
            end = entries[i + 1][0] if i + 1 < len(entries) else addr + (1 << 16)
            f.write(f"{addr:x} {max(16, min(end - addr, 1 << 20)):x} {label}\n")


def profiled_rank(rank: int, world_size: int, root: str, opts: dict) -> dict:
    """``bench_dist.bench_rank`` with rank 0 running ``perf record`` over the timed loop."""
    from pyg_dist import rpc
    real = rpc.run_coroutine

    def run(coro, timeout=None):
        if timeout != _TIMED:
            return real(coro, timeout=timeout)
        _write_perf_map()  # every kernel is compiled by now (the warm-up batches ran)
        proc = None
        if rank == 0:
            proc = subprocess.Popen(["perf", "record", "-F", "499", "-a", "-q", "-o", opts["perf_out"]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        try:
            return real(coro, timeout=timeout)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGINT)
                proc.wait()

    rpc.run_coroutine = run
    return bench_dist.bench_rank(rank, world_size, root, opts)


def _spawn(real, perf_out: str):
    """``spawn_world`` running :func:`profiled_rank` (recording into ``perf_out``) instead of the bench rank."""
    def spawn(n, fn, root, opts, **kw):
        import perf_dist
        return real(n, perf_dist.profiled_rank, root, dict(opts, perf_out=perf_out), **kw)
    return spawn


def breakdown(path: str) -> dict:
    """Share of each category in the samples of ``perf record`` file ``path`` (:func:`shares`)."""
    return shares(subprocess.run(["perf", "report", "-i", path, "--sort", "comm,dso,sym", "--stdio", "--percent-limit",
                                  "0", "-F", "overhead,comm,dso,sym"], capture_output=True, text=True,
                                 check=True).stdout)


def shares(report: str) -> dict:
    """Share of each category in a ``perf report -F overhead,comm,dso,sym`` text, over the ranks' threads (idle,
    perf itself and kernel workers left out)."""
    cats: collections.Counter = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(.+?)\s+\[(.)\]\s+(.*)$", line)
        if not m or m.group(2) in ("swapper", "perf") or m.group(2).startswith(("kworker", "ksoftirq")):
            continue
        cats[_category(m.group(3).strip(), m.group(5).strip())] += float(m.group(1))
    total = sum(cats.values()) or 1.0
    return {k: v / total for k, v in cats.items()}


def _category(dso: str, sym: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, sym):
            return name
    if "kernel.kallsyms" in dso:
        return "kernel (copies, scheduling, faults)"
    if "libpython" in dso:
        return "Python (messages, asyncio)"
    return "other JIT" if "JIT" in dso else "libtorch / numpy / libc rest"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="a {rowptr, col, N} file; default: the generated graph at --scale")
    p.add_argument("--scale", type=float, default=0.1, help="size of the built-in graph without --graph")
    p.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "pyg_dist_bench"))
    p.add_argument("--method", default="metis")
    p.add_argument("--cache-ratio", type=float, default=0.25)
    p.add_argument("--remote-rows", default="exact", choices=["exact", "int8"])
    p.add_argument("--batches", type=int, default=150)
    args = p.parse_args(argv)
    if shutil.which("perf") is None:
        sys.exit("perf_dist: Linux perf is not installed (Debian: apt-get install linux-perf)")
    ns = argparse.Namespace(graph=args.graph, scale=args.scale, cache_dir=args.cache_dir, fanouts=[15, 10, 5],
                            batch_size=1024, batches=args.batches, warmup=10, dim=100, concurrency=2, transport="uv",
                            mmap=False, link_gbps=None, cache_policy="degree")
    from pyg_dist import testing
    real_spawn, rows = testing.spawn_world, []
    for label, config in [("no-RPC ceiling", ("random", 1, 2, 0.0)),
                          (f"{args.method} + cache {args.cache_ratio:g}" + (" + int8 rows" if args.remote_rows ==
                                                                             "int8" else ""),
                           (args.method, 2, 2, args.cache_ratio))]:
        with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
            path = f.name
        testing.spawn_world = _spawn(real_spawn, path)
        res = bench_dist.run_config(ns, *config, remote_rows=args.remote_rows)
        rows.append((label, res, breakdown(path)))
        os.unlink(path)
    _print(rows)


def _print(rows) -> None:
    cats = sorted({k for _, _, b in rows for k in b}, key=lambda k: -rows[-1][2].get(k, 0.0))
    head = ["CPU ms per batch (both ranks)"] + [label for label, _, _ in rows] + ["difference"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    print("| batches/s | " + " | ".join(f"{r['bps']:.2f}" for _, r, _ in rows) + " | |")
    ms = [[r["cpu_ms"] * b.get(k, 0.0) for _, r, b in rows] for k in cats]
    print("| total | " + " | ".join(f"{r['cpu_ms']:.1f}" for _, r, _ in rows)
          + f" | {rows[-1][1]['cpu_ms'] - rows[0][1]['cpu_ms']:+.1f} |")
    for k, v in zip(cats, ms):
        print(f"| {k} | " + " | ".join(f"{x:.1f}" for x in v) + f" | {v[-1] - v[0]:+.1f} |")


if __name__ == "__main__":
    main()
