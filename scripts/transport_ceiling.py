#!/usr/bin/env python
"""The RPC path's floor for feature bytes: what moving a batch's remote rows between two processes costs alone.

Two ranks on loopback, one core and one thread each, over each RPC transport of ``--transports`` (``sockets``,
pyg_dist's own; ``tensorpipe`` with ``uv``, as ``bench_dist.py`` runs it). Each rank
owns ``--owned`` feature rows of ``--dim`` float32. A batch is ``--rows`` rows at random positions, a fraction
``--remote`` of them owned by the other rank (the defaults are ``bench_dist``'s METIS + cache 0.25 batch on the
reference graph: ~540 k rows, 14 % of them fetched). Three ways, interleaved over ``--rounds``:

- ``local``: every row gathered here into the batch buffer (one ``take_rows``): what the no-RPC ceiling pays;
- ``split``: the same rows in two parts, as a partitioned batch handles them, but without leaving the process:
  the local rows copied to their positions, the "remote" ones gathered into a reply-like tensor and copied to
  their positions from it;
- ``remote``: as ``split``, but the remote rows are asked of the peer in one call (it gathers them into its
  reply, as a feature lookup does): the least a partitioned batch pays for its rows.

- ``remote, busy Python thread``: ``remote`` while a pure-Python thread spins in the same process (a trainer's
  data-loading or logging thread holding the GIL): its CPU counts too, so read its wall-clock column.

Both ranks run their batches at the same time. Prints one table: CPU ms per batch (``process_time`` of both
ranks over the batches of both, as ``bench_dist``'s cpu ms/batch) of each way; ``split - local`` is the cost of
placing fetched rows, ``remote - split`` the cost of moving them between processes, and ``remote - local`` what
the RPC path adds for the feature bytes alone (no sampling, routing, validation or Python beyond one call per
batch). With both cores busy, a run whose no-RPC ceiling costs ``--ceiling-cpu`` ms per batch (``bench_dist``'s
cpu ms/batch of the row "whole graph each, no RPC") reaches at most ceiling / (ceiling + that difference).

    python scripts/transport_ceiling.py
    python scripts/transport_ceiling.py --remote 0.035 --dim 25     # int8-sized rows: a quarter of the bytes

``--check`` first compares one batch of each way with the rows it must hold (every rank rebuilds its peer's
features for that: twice the memory) and fails if any differs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch
from torch import Tensor

OP = "transport_ceiling.rows"


@dataclass
class RowAsk:
    """The ids of the rows a rank asks its peer for."""
    ids: Tensor


def _batches(opts: dict, gen: torch.Generator):
    """Per batch: (rows, local positions, local rows, remote positions, remote rows)."""
    n, owned = opts["rows"], opts["owned"]
    out = []
    for _ in range(opts["batches"]):
        rows = torch.randint(0, owned, (n,), generator=gen)
        remote = torch.rand(n, generator=gen) < opts["remote"]
        pos_r, pos_l = remote.nonzero().view(-1), (~remote).nonzero().view(-1)
        out.append((rows, pos_l, rows[pos_l], pos_r, rows[pos_r]))
    return out


def _features(opts: dict, rank: int) -> Tensor:
    return torch.rand(opts["owned"], opts["dim"], generator=torch.Generator().manual_seed(rank))


def _check(opts: dict, rank: int, ways, batch) -> None:
    """Raises when a way's batch differs from the rows it must hold: this rank's rows, and for ``remote`` the
    peer's rows at the fetched positions (``split`` stands in for the peer with this rank's own)."""
    mine, theirs = _features(opts, rank), _features(opts, 1 - rank)
    rows, _, _, pos_r, rows_r = batch
    for name, way in ways:
        want = mine.index_select(0, rows)
        if name == "remote":
            want[pos_r] = theirs.index_select(0, rows_r)
        if not torch.equal(way(batch), want):
            raise RuntimeError(f"transport_ceiling: rank {rank}'s '{name}' batch holds other rows than it must")


class _BusyPython:
    """A pure-Python thread spinning (it holds the GIL whenever the interpreter lets it) until ``stop()``."""

    def __init__(self) -> None:
        import threading
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        x = 0
        while not self.done.is_set():
            for _ in range(1000):
                x += 1

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def rank_main(rank: int, world_size: int, opts: dict) -> dict:
    """One rank: serves its rows; runs each way's batches per round; returns CPU and wall seconds per way and
    round."""
    os.environ["PYG_DIST_TENSORPIPE_TRANSPORTS"] = "uv"
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(1)
    from pyg_dist import rpc
    from pyg_dist._alloc import tune_allocator
    from pyg_dist.context import DistContext
    from pyg_dist.ops import warmup
    from pyg_dist.ops.rows import copy_rows
    from pyg_dist.store.buffers import empty_rows, gather_rows

    warmup()
    tune_allocator()
    feats = _features(opts, rank)
    rpc.register_callee(OP, lambda ask: gather_rows(feats, ask.ids))
    gen = torch.Generator().manual_seed(100 + rank)
    peer = 1 - rank

    def local(b):
        return gather_rows(feats, b[0])

    def split(b):
        _, pos_l, rows_l, pos_r, rows_r = b
        reply = gather_rows(feats, rows_r)
        out = empty_rows(b[0].numel(), feats)
        copy_rows(out, pos_l, feats, rows_l)
        copy_rows(out, pos_r, reply)
        return out

    def remote(b):
        _, pos_l, rows_l, pos_r, rows_r = b
        fut = rpc.call_async(peer, OP, RowAsk(rows_r))
        out = empty_rows(b[0].numel(), feats)
        copy_rows(out, pos_l, feats, rows_l)
        copy_rows(out, pos_r, fut.wait())
        return out

    ways = (("local", local), ("split", split), ("remote", remote), ("remote, busy Python thread", remote))
    cpu: dict = {name: [] for name, _ in ways}
    wall: dict = {name: [] for name, _ in ways}
    with rpc.rpc_session(DistContext.from_env(num_partitions=world_size), timeout=300):
        for _, way in ways:  # warm-up
            for b in _batches(dict(opts, batches=2), gen):
                way(b)
        if opts["check"]:
            _check(opts, rank, ways[:3], _batches(dict(opts, batches=1), gen)[0])
        for _ in range(opts["rounds"]):
            for name, way in ways:
                work = _batches(opts, gen)
                busy = _BusyPython() if "busy" in name else None
                c0, w0 = time.process_time(), time.perf_counter()
                for b in work:
                    way(b)
                cpu[name].append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - w0)
                if busy is not None:
                    busy.stop()
    return {"cpu": cpu, "wall": wall}


def _cell(vals) -> str:
    return f"{statistics.median(vals):.1f} [{' / '.join(f'{v:.1f}' for v in vals)}]"


def _measure(args, opts: dict, transport: str) -> dict:
    """Both ranks over ``transport``: per way, CPU ms per batch and wall ms per batch, per round."""
    from pyg_dist.testing import spawn_world
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYG_DIST_TRANSPORT": transport}
    import transport_ceiling  # spawned ranks import the function by module name (sys.path[0] = scripts/)
    res = spawn_world(2, transport_ceiling.rank_main, opts, timeout=1800, env=env)
    n, rounds = args.batches, args.rounds
    cpu = {w: [1000 * sum(r["cpu"][w][i] for r in res) / (2 * n) for i in range(rounds)] for w in res[0]["cpu"]}
    wall = {w: [1000 * sum(r["wall"][w][i] for r in res) / (2 * n) for i in range(rounds)] for w in res[0]["wall"]}
    for per in (cpu, wall):
        per["split - local: placing the fetched rows"] = [b - a for a, b in zip(per["local"], per["split"])]
        per["remote - split: moving them"] = [b - a for a, b in zip(per["split"], per["remote"])]
        per["remote - local: the floor"] = [b - a for a, b in zip(per["local"], per["remote"])]
    return {"cpu": cpu, "wall": wall}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=540_000, help="feature rows per batch")
    p.add_argument("--remote", type=float, default=0.14, help="fraction of them owned by the other rank")
    p.add_argument("--owned", type=int, default=1_225_000, help="feature rows each rank owns")
    p.add_argument("--dim", type=int, default=100, help="float32 values per row")
    p.add_argument("--batches", type=int, default=20, help="batches per rank, way and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--transports", nargs="+", choices=["sockets", "tensorpipe"], default=["tensorpipe", "sockets"])
    p.add_argument("--check", action="store_true", help="first compare one batch of each way with its rows")
    p.add_argument("--ceiling-cpu", type=float, default=141.0,
                   help="cpu ms/batch of bench_dist's no-RPC ceiling row (both ranks) to bound the ratio with")
    args = p.parse_args(argv)
    if not 0 < args.remote < 1:
        p.error(f"--remote must be in (0, 1), got {args.remote}")
    if min(args.rows, args.owned, args.dim, args.batches, args.rounds) < 1:
        p.error("--rows, --owned, --dim, --batches and --rounds must be >= 1")
    opts = {k: getattr(args, k) for k in ("rows", "remote", "owned", "dim", "batches", "rounds", "check")}
    results = {t: _measure(args, opts, t) for t in args.transports}
    mb = args.rows * args.remote * args.dim * 4 / 2 ** 20
    print(f"{args.rows:,} rows of {args.dim} float32 per batch, {100 * args.remote:.1f} % remote ({mb:.1f} MB per "
          f"batch cross), 2 ranks x 1 core on loopback; {args.rounds} rounds of {args.batches} batches per rank and "
          "way; CPU ms per batch (both ranks' CPU / both ranks' batches) and wall ms per batch (mean of the ranks), "
          "medians over rounds [every round]")
    head = [f"{t} {kind}" for kind in ("cpu ms", "wall ms") for t in args.transports]
    print("| way | " + " | ".join(head) + " |\n|---|" + "---|" * len(head))
    for name in results[args.transports[0]]["cpu"]:
        cells = [_cell(results[t][kind][name]) for kind in ("cpu", "wall") for t in args.transports]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for t in args.transports:
        floor = statistics.median(results[t]["cpu"]["remote - local: the floor"])
        print(f"{t}: best ratio to a no-RPC ceiling of {args.ceiling_cpu:g} cpu ms/batch: "
              f"{args.ceiling_cpu / (args.ceiling_cpu + max(floor, 0.0)):.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
