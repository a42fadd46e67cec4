"""GraphSAGE on Cora through three backends: an SQLite ``FeatureStore``, pyg_dist's partition stores, a ``Data``.

Every backend is given to the same ``pyg_dist.NeighborLoader`` — ``data=(feature_store, graph_store)`` for
the stores — with the same seeds, model, fanouts and epochs::

    python examples/remote_backend/train.py                      # all three backends
    python examples/remote_backend/train.py --backend sqlite --db /tmp/cora.db --epochs 20

* ``sqlite``: :class:`sqlite_store.SQLiteFeatureStore` (every node attribute of Cora, one table each, one
  ``SELECT`` per batch) with :class:`memory_graph_store.MemoryGraphStore` (the edge index, in memory);
* ``partition``: Cora partitioned into ONE part by pyg_dist's partitioner, opened as
  ``(LocalFeatureStore, LocalGraphStore)`` (memory-mapped, no RPC: partition 0 owns every node);
* ``data``: the plain ``Data``.

Prints one table: test accuracy (full neighbourhoods), batches, feature-fetch calls, the mean feature
fetch per training batch (the stores: the loader's one ``multi_get_tensor`` call, timed; ``data``: the
same rows gathered from the in-memory tensors, ``index_select`` of every node attribute on the batch's
``n_id``), SQL statements per batch (sqlite), and the training time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from memory_graph_store import MemoryGraphStore  # this folder is on sys.path when the script runs
from sqlite_store import SQLiteFeatureStore

import pyg_dist
from pyg_dist.ops import warmup
from pyg_dist.train.entry import run_main

BACKENDS = ("data", "sqlite", "partition")
NODE_ATTRS = ("x", "y", "train_mask", "val_mask", "test_mask")
HIDDEN, LR, DROPOUT, EVAL_BATCH = 64, 0.01, 0.5, 256


@dataclass
class FetchMeter:
    """Feature fetches: how many, and their seconds (``train_*``: during training only)."""

    calls: int = 0
    seconds: float = 0.0
    train: List[float] = field(default_factory=list)   # seconds of each fetch during training
    training: bool = False

    def add(self, seconds: float) -> None:
        self.calls, self.seconds = self.calls + 1, self.seconds + seconds
        if self.training:
            self.train.append(seconds)

    def wrap(self, store) -> None:
        """Times every ``store.multi_get_tensor`` call (the loader's one fetch per batch)."""
        inner = store.multi_get_tensor

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.add(time.perf_counter() - start)

        store.multi_get_tensor = timed


@dataclass
class Backend:
    """What the loaders get (``source``), the seeds, and how the fetch is measured."""

    name: str
    source: object
    train_ids: torch.Tensor
    test_ids: torch.Tensor
    meter: FetchMeter
    gather: Optional[Callable[[torch.Tensor], None]] = None   # the data path: time the in-memory gather
    sql: Optional[List[str]] = None                            # the sqlite path: every statement run


@dataclass
class Result:
    name: str
    test_acc: float
    batches: int
    train_batches: int
    train_rows: int
    train_seconds: float
    meter: FetchMeter
    statements: Optional[int]


def parse_args(argv=None) -> argparse.Namespace:
    def fanouts(text: str) -> List[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected e.g. 10,5") from None
        if any(v < -1 or v == 0 for v in values):
            raise argparse.ArgumentTypeError(f"--num-neighbors got {text!r}; expected positive ints or -1")
        return values

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-neighbors", type=fanouts, default=[10, 5])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: timings that do not "
                   "depend on what else runs on the machine, and bitwise-reproducible sums)")
    p.add_argument("--db", default=None, help="SQLite file to write Cora's node attributes to (default: a "
                   "temporary file); an existing file's attributes of the same names are replaced")
    p.add_argument("--root", default=None, help="folder with Cora/raw or planetoid/Cora/raw "
                   "(default: $PYG_DIST_DATA, else ~/.cache/pyg_dist/data)")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "threads"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} got {getattr(args, name)}; expected a positive int")
    return args


def data_backend(data) -> Backend:
    meter = FetchMeter()
    attrs = [data[name] for name in NODE_ATTRS]

    def gather(n_id: torch.Tensor) -> None:   # what the Data path's filter does for node attributes
        start = time.perf_counter()
        for attr in attrs:
            attr.index_select(0, n_id)
        meter.add(time.perf_counter() - start)

    return Backend("data", data, data.train_mask.nonzero().view(-1), data.test_mask.nonzero().view(-1), meter,
                   gather=gather)


def sqlite_backend(data, db: Path) -> Backend:
    fs, gs = SQLiteFeatureStore(db), MemoryGraphStore()
    start = time.perf_counter()
    for name in NODE_ATTRS:
        fs.put_tensor(data[name], group_name=None, attr_name=name, index=None)
    print(f"sqlite: wrote {len(NODE_ATTRS)} attributes of {data.num_nodes} nodes to {db} "
          f"({db.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - start:.2f}s", flush=True)
    gs.put_edge_index(data.edge_index, edge_type=None, layout="coo", size=(data.num_nodes, data.num_nodes))
    statements: List[str] = []
    fs.connection.set_trace_callback(statements.append)   # from now on: the loader's reads only
    meter = FetchMeter()
    meter.wrap(fs)
    return Backend("sqlite", (fs, gs), data.train_mask.nonzero().view(-1), data.test_mask.nonzero().view(-1),
                   meter, sql=statements)


def partition_backend(data, folder: Path) -> Backend:
    from pyg_dist.partition import Partitioner
    from pyg_dist.store import load_stores

    Partitioner(data, 1, method="random").save(folder, progress=False)
    graph, feats = load_stores(folder, 0)
    meter = FetchMeter()
    meter.wrap(feats)
    # global ids of the partitioned graph (relabelled by the partitioner; with one part they are the originals)
    return Backend("partition", (feats, graph), feats.get_global_id(mask="train_mask"),
                   feats.get_global_id(mask="test_mask"), meter)


def run(args, b: Backend, num_features: int, num_classes: int) -> Result:
    """Trains and tests a fresh GraphSAGE (same seed for every backend) on ``b``'s loaders."""
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(args.seed)
    model = GraphSAGE(num_features, HIDDEN, len(args.num_neighbors), num_classes, dropout=DROPOUT)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=5e-4)
    train = pyg_dist.NeighborLoader(b.source, args.num_neighbors, input_nodes=b.train_ids,
                                    batch_size=args.batch_size, shuffle=True, seed=args.seed)
    batches = rows = 0
    b.meter.training, start = True, time.perf_counter()
    model.train()
    for _ in range(args.epochs):
        for batch in train:
            if b.gather is not None:
                b.gather(batch.n_id)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            batches, rows = batches + 1, rows + batch.n_id.numel()
    train_seconds, b.meter.training = time.perf_counter() - start, False
    test = pyg_dist.NeighborLoader(b.source, [-1] * len(args.num_neighbors), input_nodes=b.test_ids,
                                   batch_size=EVAL_BATCH, seed=args.seed)
    correct = total = test_batches = 0
    model.eval()
    with torch.no_grad():
        for batch in test:
            if b.gather is not None:
                b.gather(batch.n_id)
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total, test_batches = total + batch.batch_size, test_batches + 1
    statements = None if b.sql is None else sum(s.lstrip().upper().startswith("SELECT") for s in b.sql)
    return Result(b.name, correct / max(total, 1), batches + test_batches, batches, rows, train_seconds, b.meter,
                  statements)


def table(results: List[Result]) -> str:
    """One line per backend (the integration test reads it: keep the columns)."""
    lines = [f"{'backend':<10} {'test_acc':>8} {'batches':>7} {'fetch_calls':>11} {'rows/batch':>10} "
             f"{'fetch_ms/batch':>14} {'median_ms':>9} {'sql/batch':>9} {'train_s':>7}"]
    for r in results:
        times = r.meter.train or [0.0]
        fetch_ms, median_ms = 1e3 * statistics.fmean(times), 1e3 * statistics.median(times)
        sql = "-" if r.statements is None else f"{r.statements / r.batches:.2f}"
        calls = "-" if r.name == "data" else str(r.meter.calls)   # the data path has no store to call
        lines.append(f"{r.name:<10} {r.test_acc:>8.4f} {r.batches:>7d} {calls:>11} "
                     f"{r.train_rows / max(r.train_batches, 1):>10.1f} {fetch_ms:>14.3f} {median_ms:>9.3f} {sql:>9} "
                     f"{r.train_seconds:>7.2f}")
    return "\n".join(lines)


def main(argv=None) -> Dict[str, float]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warmup()   # compile / load the sampling kernels before anything is timed
    data = pyg_dist.load_planetoid("cora", args.root)
    names = BACKENDS if args.backend == "all" else (args.backend,)
    num_classes = int(data.y.max()) + 1
    print(f"Cora: nodes={data.num_nodes} edges={data.num_edges} features={data.num_features} "
          f"epochs={args.epochs} batch_size={args.batch_size} num_neighbors={args.num_neighbors} "
          f"seed={args.seed} torch_threads={torch.get_num_threads()}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="pyg_dist_remote_backend_") as tmp:
        for name in names:
            if name == "data":
                backend = data_backend(data)
            elif name == "sqlite":
                backend = sqlite_backend(data, Path(args.db) if args.db else Path(tmp) / "cora.db")
            else:
                backend = partition_backend(data, Path(tmp) / "cora-1")
            results.append(run(args, backend, data.num_features, num_classes))
            if name == "sqlite":
                backend.source[0].close()
    print(table(results), flush=True)
    return {r.name: r.test_acc for r in results}


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
