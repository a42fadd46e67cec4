"""``pyg-dist-partition`` / ``scripts/partition_graph.py``: partition a dataset into a folder.

Example::

    pyg-dist-partition --dataset cora --root ../shared/data/planetoid --num-parts 2 --method metis \\
        --out /tmp/cora-2
    pyg-dist-partition --dataset synthetic --num-nodes 100000 --hetero --node-time --num-parts 4 \\
        --method supernode --num-clusters 256 --sub-parts 2 --out /tmp/syn-4
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional

from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.partition.partitioner import METHODS, PartitionConfig, Partitioner
from pyg_dist.partition.stats import format_report
from pyg_dist.partition.writer import check_output

_SYNTH = {"num_nodes": int, "avg_degree": float, "num_features": int, "num_classes": int,
          "community_size": int, "edge_dim": int}
_SYNTH_FLAGS = ("hetero", "node_time", "edge_time", "edge_weight")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyg-dist-partition", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", required=True,
                   help="cora | citeseer | pubmed | ogbn-<name> | edgelist | synthetic | products_like")
    p.add_argument("--root", default=None, help="where the data lies (folder or file, per dataset)")
    p.add_argument("--num-parts", type=int, required=True, help="number of partitions (machines)")
    p.add_argument("--method", default="metis", help=f"one of {list(METHODS)}")
    p.add_argument("--base-method", default="metis", help="ownership method of --method hybrid")
    p.add_argument("--sub-parts", type=int, default=1, help="trainers per machine (two-level split)")
    p.add_argument("--num-clusters", type=int, default=None, help="supernode: METIS mini-clusters")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ufactor", type=int, default=30, help="METIS imbalance per constraint, 1/1000")
    p.add_argument("--no-balance", action="store_true", help="METIS balances node count only")
    p.add_argument("--out", required=True, help="output folder (must be empty unless --overwrite)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    g = p.add_argument_group("synthetic")
    for name, typ in _SYNTH.items():
        g.add_argument("--" + name.replace("_", "-"), type=typ, default=None)
    for name in _SYNTH_FLAGS:
        g.add_argument("--" + name.replace("_", "-"), action="store_true")
    g = p.add_argument_group("ogbn-* / edgelist / products_like")
    g.add_argument("--split", default=None, help="ogbn: split scheme folder")
    g.add_argument("--undirected", action="store_true", help="edgelist: add reverse edges")
    g.add_argument("--attr", action="append", default=[], metavar="NAME=FILE",
                   help="edgelist: attribute file, e.g. x=feat.npy (repeatable)")
    g.add_argument("--x-dim", type=int, default=None, help="products_like: random feature width")
    g.add_argument("--train-frac", type=float, default=None, help="products_like: random train share")
    return p


def dataset_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Loader options for ``args.dataset`` from the flags that were given."""
    name = args.dataset.lower()
    if name == "synthetic":
        opts = {k: getattr(args, k) for k in _SYNTH if getattr(args, k) is not None}
        opts.update({k: True for k in _SYNTH_FLAGS if getattr(args, k)})
        opts["seed"] = args.seed
        return opts
    if name.startswith("ogbn-"):
        return {"split": args.split} if args.split else {}
    if name == "edgelist":
        opts: Dict[str, Any] = {"undirected": args.undirected}
        if args.num_nodes is not None:
            opts["num_nodes"] = args.num_nodes
        files = dict(a.split("=", 1) for a in args.attr if "=" in a)
        bad = [a for a in args.attr if "=" not in a]
        if bad:
            raise InvalidArgumentError("pyg-dist-partition", "--attr", bad[0], "NAME=FILE")
        if files:
            opts["files"] = files
        return opts
    if name == "products_like":
        opts = {"x_dim": args.x_dim, "num_classes": args.num_classes, "train_frac": args.train_frac}
        return {k: v for k, v in opts.items() if v is not None}
    return {}


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (2 on a user error, message on stderr)."""
    args = build_parser().parse_args(argv)
    from pyg_dist.datasets.registry import load_dataset
    try:
        PartitionConfig(args.num_parts, args.method, args.base_method, args.sub_parts, args.num_clusters,
                        args.seed, args.ufactor)  # fail fast, before a long load
        check_output(args.out, args.overwrite)
        t0 = time.perf_counter()
        data = load_dataset(args.dataset, args.root, **dataset_options(args))
        t1 = time.perf_counter()
        print(f"loaded {args.dataset}: {data}  ({t1 - t0:.1f} s)", flush=True)
        part = Partitioner(data, args.num_parts, args.method, base_method=args.base_method,
                           sub_parts=args.sub_parts, num_clusters=args.num_clusters, seed=args.seed,
                           ufactor=args.ufactor, balance=not args.no_balance)
        stats = part.save(args.out, overwrite=args.overwrite, progress=not args.quiet)
    except PyGDistError as e:
        print(f"pyg-dist-partition: error: {e}", file=sys.stderr)
        return 2
    print(format_report(stats))
    print(f"wrote {args.out} in {time.perf_counter() - t1:.1f} s (method {args.method}, "
          f"{args.num_parts} parts x {args.sub_parts} trainers)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
