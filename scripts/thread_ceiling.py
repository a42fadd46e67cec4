#!/usr/bin/env python
"""How far can any kernel scale from 1 to N threads on this machine? A ceiling for the sampler's thread target.

Four numba ``prange`` loops, each timed at every thread count in the same process, interleaved:

- ``compute``: a splitmix64 chain per element (no memory traffic): the machine's pure CPU scaling;
- ``gather``: ``out[i] = row[idx[i]]`` with random ``idx`` over an array the size of the reference graph's
  ``row`` (``--edges`` int64 values): the random-access memory traffic the sampler is made of;
- ``sample``: per seed, ``k`` random picks inside its CSC slice (a power-law degree graph with ``--edges``
  edges), the sampler's access pattern without its bookkeeping;
- ``claim``: the least a parallel first-seen relabel must do: ``--gathers`` random node ids, each thread
  scanning them all and claiming (read, and write when unseen) the entries of an int32 map of ``--nodes``
  entries in the cache lines it owns. Its ratio bounds any relabel that splits the map between threads
  (a ratio above 1: the serial relabel is the faster one here).

    python scripts/thread_ceiling.py                        # 62 M edges, threads 1,2
    python scripts/thread_ceiling.py --edges 10000000 --threads 1,2,4

Prints one table: median ms per loop at each thread count and the ratio to 1 thread. A ratio near 0.5 at 2
threads means the cores scale; a ``gather`` ratio well above it bounds what any sampler can reach here.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np
from numba import njit, prange


@njit(parallel=True, nogil=True)
def _compute(n, rounds):  # pragma: no cover - compiled
    out = np.empty(n, np.uint64)
    for i in prange(n):
        z = np.uint64(i)
        for _ in range(rounds):
            z = z + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = z ^ (z >> np.uint64(31))
    return out


@njit(parallel=True, nogil=True)
def _gather(row, idx):  # pragma: no cover - compiled
    out = np.empty(idx.shape[0], row.dtype)
    for i in prange(idx.shape[0]):
        out[i] = row[idx[i]]
    return out


@njit(parallel=True, nogil=True)
def _sample(colptr, row, seeds, k):  # pragma: no cover - compiled
    out = np.empty(seeds.shape[0] * k, row.dtype)
    for i in prange(seeds.shape[0]):
        s = seeds[i]
        c0, deg = colptr[s], colptr[s + 1] - colptr[s]
        z = np.uint64(s) * np.uint64(0x9E3779B97F4A7C15)
        for j in range(k):
            z = (z ^ (z >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
            out[i * k + j] = row[c0 + np.int64(z % np.uint64(deg))] if deg > 0 else -1
    return out


@njit(parallel=True, nogil=True)
def _claim(mapping, ids, skew):  # pragma: no cover - compiled
    parts = 1
    while 2 * parts <= numba.get_num_threads():  # a power of two: owners are the line index's low bits
        parts *= 2
    new = np.zeros(parts, np.int64)
    for t in prange(parts):
        for j in range(ids.shape[0]):
            g = ids[j]
            if ((g + skew) >> 4) & (parts - 1) == t and mapping[g] < 0:  # 16 int32 a line
                mapping[g] = j
                new[t] += 1
    return new.sum()


def _graph(num_nodes: int, num_edges: int, rng: np.random.Generator):
    deg = rng.pareto(1.5, num_nodes) + 1.0
    deg = np.maximum(1, (deg / deg.sum() * num_edges).astype(np.int64))
    colptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(deg, out=colptr[1:])
    row = rng.integers(0, num_nodes, int(colptr[-1]), dtype=np.int64)
    return colptr, row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--edges", type=int, default=62_000_000, help="size of row (int64 values)")
    p.add_argument("--nodes", type=int, default=2_449_029)
    p.add_argument("--gathers", type=int, default=1_000_000, help="random reads per gather loop")
    p.add_argument("--seeds", type=int, default=20_000, help="seeds per sample loop (k = 15 picks each)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    colptr, row = _graph(args.nodes, args.edges, rng)
    idx = rng.integers(0, row.shape[0], args.gathers, dtype=np.int64)
    seeds = rng.integers(0, args.nodes, args.seeds, dtype=np.int64)
    loops = {"compute": lambda: _compute(args.gathers // 4, 8), "gather": lambda: _gather(row, idx),
             "sample": lambda: _sample(colptr, row, seeds, 15), "claim": lambda: _claim(mapping, ids, skew)}
    mapping = np.full(args.nodes, -1, np.int32)
    ids = rng.integers(0, args.nodes, args.gathers, dtype=np.int64)
    skew = (mapping.ctypes.data % 64) // 4
    threads = [int(t) for t in args.threads.split(",")]
    times = {(name, t): [] for name in loops for t in threads}
    for fn in loops.values():
        fn()  # compile
    for _ in range(args.repeats):  # interleaved: every loop at every thread count per repeat
        for t in threads:
            numba.set_num_threads(t)
            for name, fn in loops.items():
                mapping.fill(-1)
                t0 = time.perf_counter()
                fn()
                times[(name, t)].append(1000 * (time.perf_counter() - t0))
    print(f"row: {row.shape[0]:,} int64 ({row.nbytes / 2**20:,.0f} MiB); {args.repeats} repeats, median ms")
    print(f"{'loop':<8} " + " ".join(f"{f'{t} thr ms':>10} {'ratio':>6}" for t in threads))
    for name in loops:
        base = statistics.median(times[(name, threads[0])])
        cells = [f"{statistics.median(times[(name, t)]):>10.2f} {statistics.median(times[(name, t)]) / base:>6.2f}"
                 for t in threads]
        print(f"{name:<8} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
