"""Benchmark of feature lookups through ``LocalFeatureStore`` (global-id translation included).

Node features: random float32 ``[N, --dim]`` (default: ogbn-products' 2,449,029 nodes x 100), split
into 2 partitions (``method="random"``) in a folder that is reused when it matches. Batches of
10k-500k random global ids.

Rows of the table:
  * ``index_select``      plain ``x.index_select(0, rows)`` on partition 0's block in private memory
                          (the machine's gather bandwidth; the reference).
  * ``contiguous copy``   ``x[:B].clone()`` (memory bandwidth without the gather).
  * ``store local mmap``  ``lookup_features(ids)``, all ids owned by the store's partition, partition
                          memory-mapped (the default; pages resident); ``ratio`` = vs ``index_select``.
  * ``store local ram``   the same with ``mmap=False``.
  * ``store remote``      2 ranks over loopback RPC: every id owned by the other partition.
  * ``store mixed``       2 ranks: ids uniform over the whole graph (half local, half remote).
  * ``rpc raw transfer``  2 ranks: one RPC returning B contiguous rows (the transport's own cost).

Prints ONE table (median of timed runs after a warm-up: ``--reps`` at 500k ids, more for smaller batches;
plain and store runs interleaved, each one after a 64 MiB scratch write so that no mode finds the rows the
mode before it read still in the CPU caches: all modes gather the same ids), after two comment lines: the
configuration, and the private memory a second process (a sampler worker) adds when it opens the same
partition with and without ``mmap``.

    python scripts/bench_features.py --num-nodes 200000          # while developing
    python scripts/bench_features.py                             # products size (~1 GB folder, ~3 GB RAM)
    python scripts/bench_features.py --graph /tmp/products_like.pt   # N taken from the reference file
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch

FULL_N = 2_449_029


def build_folder(root: str, n: int, dim: int) -> None:
    """A 2-partition folder whose node feature ``x`` is ``[n, dim]`` float32 (edges: a few, unused)."""
    meta = os.path.join(root, "META.json")
    if os.path.exists(meta):
        with open(meta) as f:
            section = json.load(f).get("pyg_dist", {})
        if section.get("num_nodes", {}).get("_N") == n and section.get("graph_attrs", {}).get("bench_dim") == dim:
            return
    from torch_geometric.data import Data

    from pyg_dist.partition import Partitioner
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(n, dim, generator=gen), edge_index=torch.randint(0, n, (2, 1000), generator=gen),
                num_nodes=n)
    data.bench_dim = dim
    t0 = time.time()
    Partitioner(data, 2, method="random").save(root, overwrite=True, progress=False)
    print(f"# wrote {root} ({n:,} x {dim}) in {time.time() - t0:.0f}s")


def runs_for(batch: int, reps: int) -> int:
    """Timed runs per batch size: more for small batches (their timings are noisier)."""
    return max(reps, min(200, 2_000_000 // batch))


def timed(fn, reps: int):
    fn()  # warm-up
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def local_rows(root: str, batches, reps: int):
    """(mode, batch, seconds) of the one-process rows."""
    from pyg_dist.store import LocalFeatureStore
    mm = LocalFeatureStore.from_partition(root, 0, mmap=True)
    ram = LocalFeatureStore.from_partition(root, 0, mmap=False)
    x = ram.get_tensor(None, "x")
    float(mm.get_tensor(None, "x").sum())  # make the mapped pages resident
    owned = mm.get_global_id()
    gen = torch.Generator().manual_seed(1)
    rows = []
    for b in batches:
        local = torch.randint(0, owned.numel(), (b,), generator=gen)
        ids = owned[local]
        runs = {"index_select": [], "contiguous copy": [], "store local mmap": [], "store local ram": []}
        fns = {"index_select": lambda: x.index_select(0, local), "contiguous copy": lambda: x[:b].clone(),
               "store local mmap": lambda: mm.lookup_features(ids),
               "store local ram": lambda: ram.lookup_features(ids)}
        for fn in fns.values():  # warm-up
            fn()
        scratch = torch.empty(64 << 18)  # 64 MiB, larger than the caches
        for _ in range(runs_for(b, reps)):  # interleaved: load changes hit every mode alike
            for mode, fn in fns.items():
                scratch.fill_(1.0)  # every mode starts cold: no mode reads rows the previous one cached
                t0 = time.perf_counter()
                fn()
                runs[mode].append(time.perf_counter() - t0)
        rows += [(mode, b, statistics.median(t)) for mode, t in runs.items()]
    return rows


@dataclass
class RawRows:
    """Payload of the raw-transfer reference: send back ``n`` contiguous rows."""
    n: int


def remote_main(rank, world_size, root, batches, reps):
    """One rank of the 2-rank world: rank 0 measures, rank 1 serves."""
    from pyg_dist import rpc, serve_partition
    from pyg_dist.context import DistContext
    from pyg_dist.store import load_stores
    ctx = DistContext.from_env(num_partitions=2)
    _, fs = load_stores(root, ctx=ctx)
    x = fs.get_tensor(None, "x")
    float(x.sum())
    serve_partition(None, fs)
    rpc.register_callee("bench_features.raw", lambda msg: x[:msg.n].clone())
    out = []
    with rpc.rpc_session(ctx, timeout=300, call_timeout=300, shutdown_timeout=1800):
        if rank == 0:
            other = torch.arange(*fs.book.owned_range("_N", 1))
            n = fs.num_items()
            gen = torch.Generator().manual_seed(2)
            for b in batches:
                remote = other[torch.randint(0, other.numel(), (b,), generator=gen)]
                mixed = torch.randint(0, n, (b,), generator=gen)
                k = max(reps, runs_for(b, reps) // 4)
                out.append(("store remote", b, statistics.median(timed(lambda: fs.lookup_features(remote), k))))
                out.append(("store mixed", b, statistics.median(timed(lambda: fs.lookup_features(mixed), k))))
                raw = timed(lambda: rpc.call(1, "bench_features.raw", RawRows(b)), k)
                out.append(("rpc raw transfer", b, statistics.median(raw)))
    return out


_MEMORY_CHILD = """
import sys, torch
from pyg_dist.store import LocalFeatureStore
def private_kb():
    fields = dict(l.split(":", 1) for l in open("/proc/self/smaps_rollup").read().splitlines()[1:])
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty"))
for mmap in (True, False):
    before = private_kb()
    fs = LocalFeatureStore.from_partition(sys.argv[1], 0, mmap=mmap)
    x = fs.get_tensor(None, "x")
    float(x.sum())
    print(private_kb() - before)
    del fs, x
"""


def worker_memory(root: str) -> str:
    """Private memory a second process (a sampler worker) adds when it opens partition 0 while this
    process holds it memory-mapped: with ``mmap=True`` (shared pages) and ``mmap=False`` (a copy)."""
    import subprocess
    import sys

    from pyg_dist.store import LocalFeatureStore
    if not os.path.exists("/proc/self/smaps_rollup"):
        return "# worker memory: needs Linux /proc/<pid>/smaps_rollup"
    x = LocalFeatureStore.from_partition(root, 0, mmap=True).get_tensor(None, "x")
    float(x.sum())
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, root], capture_output=True, text=True,
                         check=True, timeout=600).stdout.split()
    mb = x.numel() * x.element_size() / 2**20
    return (f"# partition 0 x = {mb:.0f} MiB; a second process opening it adds {int(out[0]) / 1024:.1f} MiB "
            f"private memory with mmap=True, {int(out[1]) / 1024:.0f} MiB with mmap=False")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-nodes", type=int, default=FULL_N)
    p.add_argument("--graph", help="products_like.pt: take N from it (topology is not needed here)")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--batches", default="10000,50000,100000,500000")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--folder", help="partition folder to create or reuse (default: a temporary one)")
    p.add_argument("--no-remote", action="store_true", help="skip the 2-rank rows")
    p.add_argument("--threads", type=int, help="torch threads of the one-process rows (default: torch's)")
    p.add_argument("--rank-threads", type=int, help="threads per rank of the 2-rank rows (default: cpus // 2, "
                   "like torchrun's one-thread-per-core split; oversubscribed OpenMP threads spin)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rank_threads = args.rank_threads or max(1, (os.cpu_count() or 2) // 2)
    n = args.num_nodes
    if args.graph:
        n = int(torch.load(args.graph, weights_only=True, mmap=True)["N"])
    batches = [int(b) for b in args.batches.split(",")]
    folder = args.folder or tempfile.mkdtemp(prefix="bench_features_")
    try:
        build_folder(folder, n, args.dim)
        memory = worker_memory(folder)
        rows = local_rows(folder, batches, args.reps)
        if not args.no_remote:
            from bench_features import remote_main as by_name  # importable in the spawned ranks
            from pyg_dist.testing import spawn_world
            env = {"OMP_NUM_THREADS": str(rank_threads)}
            rows += spawn_world(2, by_name, folder, batches, args.reps, timeout=1800, env=env)[0]
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    print_table(rows, n, args.dim, memory, rank_threads)


def print_table(rows, n: int, dim: int, memory: str, rank_threads: int) -> None:
    ref = {b: t for mode, b, t in rows if mode == "index_select"}
    print(memory)
    print(f"# features [{n:,} x {dim}] float32, 2 partitions; {os.cpu_count()} cpus; one-process rows: "
          f"{torch.get_num_threads()} torch threads; 2-rank rows: {rank_threads} per rank; median per batch")
    print(f"{'mode':<18} {'batch':>8} {'ms':>9} {'Mrows/s':>9} {'GB/s':>7} {'ratio':>6}")
    order = ["index_select", "contiguous copy", "store local mmap", "store local ram", "store remote", "store mixed",
             "rpc raw transfer"]
    for mode, b, t in sorted(rows, key=lambda r: (order.index(r[0]), r[1])):
        gbs = b * dim * 4 / t / 1e9
        ratio = f"{ref[b] / t:6.2f}" if mode.startswith("store local") else ""
        print(f"{mode:<18} {b:>8,} {t * 1e3:>9.1f} {b / t / 1e6:>9.2f} {gbs:>7.2f} {ratio:>6}")


if __name__ == "__main__":
    main()
