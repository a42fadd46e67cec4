r"""``pyg-dist-partition`` / ``scripts/partition_graph.py``: partition a dataset into a folder.

Example::

    pyg-dist-partition --dataset cora --root "$PYG_DIST_DATA/planetoid" --num-parts 2 --method metis \
        --out /tmp/cora-2
    pyg-dist-partition --dataset synthetic --num-nodes 100000 --hetero --node-time --num-parts 4 \
        --method supernode --num-clusters 256 --sub-parts 2 --out /tmp/syn-4
    pyg-dist-partition --dataset chunked --root /data/graph --num-parts 8 --method coarsen \
        --memory-budget 8GB --out /data/graph-8      # out-of-core (see pyg_dist.partition.ooc.partitioner)
    torchrun --nnodes 2 --nproc-per-node 1 ... -m pyg_dist.partition.cli --dataset chunked ...  # 2 machines
    pyg-dist-partition --dataset products_like --x-dim 100 --num-parts 2 --feature-dtype bfloat16 \
        --out /tmp/products-2                    # the benchmark graph (generated once, cached); bfloat16 features
    pyg-dist-partition --dataset pyg --root graph.pt --num-parts 2 --out /tmp/graph-2   # torch.save(data, ...)
    pyg-dist-partition --verify /tmp/cora-2      # every file's size and digest against META.json, per partition
    pyg-dist-partition --dataset cora --root "$PYG_DIST_DATA/planetoid" --num-parts 4 --out /tmp/cora-4 \
        --plot                                   # also /tmp/cora-4/partition_report.png (needs matplotlib)
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional

from pyg_dist._version import __version__
from pyg_dist.envvars import raw
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format.precision import FEATURE_DTYPES, parse_dtype
from pyg_dist.partition.config import METHODS, OOC_METHODS, PartitionConfig
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner, parse_bytes
from pyg_dist.partition.partitioner import Partitioner
from pyg_dist.partition.report import format_report
from pyg_dist.partition.writer import check_output

_SYNTH = {"num_nodes": int, "avg_degree": float, "num_features": int, "num_classes": int,
          "community_size": int, "edge_dim": int, "intra_frac": float, "noise": float}
_SYNTH_FLAGS = ("hetero", "node_time", "edge_time", "edge_weight")
#: Help of the built-in generator's options (defaults: :func:`~pyg_dist.datasets.synthetic.synthetic_graph`).
_SYNTH_HELP = {
    "num_nodes": "synthetic: nodes over all types (default 10000); edgelist / chunked: node count "
                 "(default: the rows of a node file, else the highest id + 1); products_like without --root: "
                 "a graph of the same shape with this many nodes (default 2449029, ogbn-products' count)",
    "avg_degree": "synthetic: mean directed edges per node before deduplication (default 10)",
    "num_features": "synthetic: width of x (default 32)",
    "num_classes": "synthetic: label classes, community c has class c mod num-classes (default 8); "
                   "products_like: random labels y in that many classes (default: no y)",
    "community_size": "synthetic: nodes per community (default 200)",
    "edge_dim": "synthetic: width of edge_attr (default 0: none)",
    "intra_frac": "synthetic: share of the edges inside a community, in [0, 1] (default 0.85)",
    "noise": "synthetic: standard deviation of the feature noise around the class centroids (default 3.0)",
    "hetero": "synthetic: a HeteroData of node types paper / author / field (the first carries y and the masks)",
    "node_time": "synthetic: add an int64 node attribute time in [0, 100)",
    "edge_time": "synthetic: add an int64 edge attribute edge_time (the same both ways of an edge)",
    "edge_weight": "synthetic: add a float edge_weight in (0, 1]",
}
_PLANETOID = ("cora", "citeseer", "pubmed")
_OOC_OPTS = ("memory_budget", "chunk_size", "passes")
#: Which datasets each reader-specific option applies to ("ogbn" stands for every ``ogbn-*`` name);
#: giving an option to a dataset it does not apply to is an error, never a silent no-op.
_APPLIES = {
    "root": _PLANETOID + ("ogbn", "edgelist", "products_like", "pyg", "chunked"),
    "split": ("ogbn",), "attr": ("edgelist",), "x_dim": ("products_like",), "train_frac": ("products_like",),
    "num_nodes": ("synthetic", "edgelist", "chunked", "products_like"),
    "num_classes": ("synthetic", "products_like"),
    **{k: ("synthetic",) for k in _SYNTH if k not in ("num_nodes", "num_classes")},
    **{k: ("synthetic",) for k in _SYNTH_FLAGS},
}


def build_parser() -> argparse.ArgumentParser:
    """The ``pyg-dist-partition`` argument parser (every dataset's options; :func:`main` checks which apply)."""
    p = argparse.ArgumentParser(prog="pyg-dist-partition", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", required=True,
                   help="cora | citeseer | pubmed | ogbn-<name> | edgelist | synthetic | products_like | "
                        "pyg (--root = a Data / HeteroData saved with torch.save) | "
                        "chunked (a folder read in chunks, partitioned out-of-core)")
    p.add_argument("--root", default=None, help="where the data lies (folder or file; not for synthetic)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--num-parts", type=int, required=True, help="number of partitions (machines)")
    p.add_argument("--method", default=None, help=f"one of {list(METHODS)} (default metis); out-of-core one of "
                   f"{list(OOC_METHODS)} (default coarsen)")
    p.add_argument("--base-method", default=None, help="ownership method of --method hybrid (default metis)")
    p.add_argument("--sub-parts", type=int, default=1, help="trainers per machine (two-level split)")
    p.add_argument("--num-clusters", type=int, default=None,
                   help="supernode: METIS mini-clusters (default: 32 per part, fewer if clusters "
                   "would hold under 40 nodes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the partitioning (and of generated data)")
    p.add_argument("--ufactor", type=int, default=None, help="METIS imbalance per constraint, 1/1000 (default 30)")
    p.add_argument("--no-balance", action="store_true", help="METIS balances node count only")
    p.add_argument("--allow-nonfinite", action="store_true", help="keep NaN / inf in features (reported)")
    p.add_argument("--cache-ratio", type=float, default=None,
                   help="also write each partition's remote-feature cache: the remote nodes with the most edges "
                        "into it, up to this fraction of its own feature bytes (e.g. 0.25)")
    p.add_argument("--cache-topology", action="store_true",
                   help="with --cache-ratio: also cache those nodes' in-edges (sampled here, not by their owner)")
    p.add_argument("--feature-dtype", default=None, metavar="DTYPE",
                   help=f"store the features (floating node / edge attributes except y, edge_label, edge_weight, "
                        f"times) as one of {' | '.join(FEATURE_DTYPES)}; default: as the dataset gives them")
    p.add_argument("--undirected", action=argparse.BooleanOptionalAction, default=None,
                   help="add every missing reverse edge (--no-undirected: keep edges as stored); "
                        "default: the dataset's convention, reported after loading")
    p.add_argument("--out-of-core", action="store_true",
                   help="partition with bounded memory (automatic for --dataset chunked)")
    p.add_argument("--memory-budget", default=None, help="out-of-core working memory, e.g. 8GB (default 2GB)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="out-of-core: edges per chunk (default from the budget)")
    p.add_argument("--passes", type=int, default=None, help="out-of-core: fennel passes / coarsen refinement passes")
    p.add_argument("--out", required=True, help="output folder (must be empty unless --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out even if it holds files (the new partition takes the whole folder's place)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--plot", action="store_true",
                   help="also draw nodes, edges, halo nodes and training nodes per part into "
                        "OUT/partition_report.png (needs matplotlib: pip install matplotlib)")
    p.add_argument("--verify", metavar="DIR", default=None,
                   help="instead of partitioning: check the folder DIR (every file's size and content digest "
                        "against META.json, the stamps), one line per partition; exit 1 on any problem")
    g = p.add_argument_group("synthetic")
    for name, typ in _SYNTH.items():
        g.add_argument("--" + name.replace("_", "-"), type=typ, default=None, help=_SYNTH_HELP[name])
    for name in _SYNTH_FLAGS:
        g.add_argument("--" + name.replace("_", "-"), action="store_true", help=_SYNTH_HELP[name])
    g = p.add_argument_group("ogbn-* / edgelist / products_like")
    g.add_argument("--split", default=None, help="ogbn: split scheme folder")
    g.add_argument("--attr", action="append", default=[], metavar="NAME=FILE",
                   help="edgelist: attribute file, e.g. x=feat.npy (repeatable)")
    g.add_argument("--x-dim", type=int, default=None, help="products_like: random feature width")
    g.add_argument("--train-frac", type=float, default=None, help="products_like: random train share")
    return p


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def is_out_of_core(args: argparse.Namespace) -> bool:
    """``--out-of-core``, or a ``chunked`` dataset."""
    return bool(args.out_of_core) or args.dataset.lower() == "chunked"


def check_applicable(args: argparse.Namespace) -> None:
    """Every option given must apply to ``--dataset`` and ``--method``; else a typed error naming it."""
    if args.method is None:
        args.method = "coarsen" if is_out_of_core(args) else "metis"
    args.feature_dtype = parse_dtype("pyg-dist-partition", "--feature-dtype", args.feature_dtype)
    if is_out_of_core(args):
        return _check_out_of_core(args)
    for opt in _OOC_OPTS:
        if getattr(args, opt) is not None:
            raise InvalidArgumentError("pyg-dist-partition", _flag(opt), getattr(args, opt),
                                       "not given: it applies to --out-of-core / --dataset chunked only")
    name = args.dataset.lower()
    kind = "ogbn" if name.startswith("ogbn-") else name
    for opt, datasets in _APPLIES.items():
        value = getattr(args, opt)
        if value not in (None, False, []) and kind in _APPLIES["root"] + ("synthetic",) and kind not in datasets:
            raise InvalidArgumentError("pyg-dist-partition", _flag(opt), value,
                                       f"not given: it applies to --dataset {' / '.join(datasets)} only")
    method_opts = {"base_method": args.method == "hybrid", "num_clusters": args.method == "supernode"
                   or (args.method == "hybrid" and args.base_method == "supernode")}
    uses_metis = args.method in ("metis", "supernode") or (args.method == "hybrid" and args.base_method in
                                                           (None, "metis", "supernode"))
    method_opts.update(ufactor=uses_metis, no_balance=uses_metis)
    for opt, ok in method_opts.items():
        value = getattr(args, opt)
        if value not in (None, False) and not ok:
            raise InvalidArgumentError("pyg-dist-partition", _flag(opt), value,
                                       f"not given: it does not apply to --method {args.method}")


def _check_out_of_core(args: argparse.Namespace) -> None:
    if args.method not in OOC_METHODS:
        raise InvalidArgumentError("pyg-dist-partition", "--method", args.method,
                                   f"one of {list(OOC_METHODS)} out-of-core")
    given = {"base_method": args.base_method, "num_clusters": args.num_clusters, "cache_ratio": args.cache_ratio,
             "cache_topology": args.cache_topology, "sub_parts": None if args.sub_parts == 1 else args.sub_parts,
             "undirected": args.undirected}
    for opt, value in given.items():
        if value not in (None, False):
            raise InvalidArgumentError("pyg-dist-partition", _flag(opt), value, "not given: the out-of-core "
                                       "partitioner does not support it (partition in memory instead)")
    if args.dataset.lower() == "chunked" and not args.root:
        raise InvalidArgumentError("pyg-dist-partition", "--root", None, "the folder of a chunked dataset")


def torchrun_comm():
    """Under ``torchrun`` with more than one rank: a gloo process group (initialised here) as a
    :class:`~pyg_dist.partition.ooc.comm.TorchComm`; otherwise the one-process :class:`Comm`."""
    from pyg_dist.partition.ooc.comm import Comm, TorchComm
    if int(raw("WORLD_SIZE", default="1")) <= 1:
        return Comm()
    from pyg_dist.group import init_process_group
    init_process_group("gloo")  # the same set-up as a training job's (torchrun's store, keys per attempt)
    return TorchComm()


def _run_out_of_core(args: argparse.Namespace):
    """Opens the input (a chunked folder, or any dataset loaded whole) and partitions it out-of-core, on
    every rank of a ``torchrun`` job (or alone). Returns ``(stats, rank)``."""
    from pyg_dist.partition.ooc.chunked import open_chunked
    PartitionConfig(args.num_parts, args.method, seed=args.seed, ufactor=30 if args.ufactor is None else args.ufactor,
                    passes=args.passes, chunk_size=args.chunk_size, out_of_core=True)  # fail fast, before reading
    budget = parse_bytes(args.memory_budget or "2GB")
    check_output(args.out, args.overwrite)
    if args.dataset.lower() == "chunked":
        data = open_chunked(args.root, num_nodes=args.num_nodes)
    else:
        from pyg_dist.datasets.registry import load_dataset
        data = load_dataset(args.dataset, args.root, undirected=None, **dataset_options(args))
    comm = torchrun_comm()
    if comm.rank == 0 and args.dataset.lower() == "chunked":
        edges = sum(data.num_edges(et) for et in data.edge_types)
        print(f"input {args.root}: {data.total_nodes()} nodes, {edges} edges (read in chunks by {comm.world} "
              f"rank(s))", flush=True)
    elif comm.rank == 0:
        print(f"loaded {args.dataset}: {data}", flush=True)
    part = OutOfCorePartitioner(data, args.num_parts, args.method, seed=args.seed,
                                ufactor=30 if args.ufactor is None else args.ufactor, balance=not args.no_balance,
                                passes=args.passes, memory_budget=budget, chunk_size=args.chunk_size,
                                allow_nonfinite=args.allow_nonfinite, comm=comm, feature_dtype=args.feature_dtype)
    try:
        return part.save(args.out, overwrite=args.overwrite, progress=not args.quiet), comm.rank
    finally:
        if comm.world > 1:
            import torch.distributed as dist
            dist.destroy_process_group()


def dataset_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Loader options for ``args.dataset`` from the flags that were given (see :func:`check_applicable`)."""
    name = args.dataset.lower()
    opts: Dict[str, Any]
    if name == "synthetic":
        opts = {k: getattr(args, k) for k in _SYNTH if getattr(args, k) is not None}
        opts.update({k: True for k in _SYNTH_FLAGS if getattr(args, k)})
        opts["seed"] = args.seed
        return opts
    if name.startswith("ogbn-"):
        return {"split": args.split} if args.split else {}
    if name == "edgelist":
        opts = {}
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
        opts = {"x_dim": args.x_dim, "num_classes": args.num_classes, "train_frac": args.train_frac,
                "num_nodes": args.num_nodes}
        return {k: v for k, v in opts.items() if v is not None}
    return {}


def edges_note(args: argparse.Namespace, data) -> str:
    """What happened to edge directions: the loaded graph's symmetry, and OGB's convention when the
    dataset's name is not in pyg_dist's table."""
    from pyg_dist.datasets.direction import edge_direction_report
    from pyg_dist.datasets.ogb import known_convention

    line = edge_direction_report(data)
    name = args.dataset.lower()
    if name.startswith("ogbn-") and args.undirected is None and known_convention(name) is None:
        line += (f"; {args.dataset} is not in the table of known OGB datasets, so its edges were taken as "
                 "stored (--undirected adds the reverse edges, --no-undirected silences this note)")
    return line


def verify_main(argv: List[str]) -> int:
    """``pyg-dist-partition --verify DIR``: one line per partition (and the shared files, META.json): ``ok``
    or what is wrong. Returns 0 when all is well, 1 on any problem, 2 when DIR is no partition folder."""
    from pyg_dist.format import digests as D
    from pyg_dist.format import meta as M
    from pyg_dist.format.checks import structure_problems
    p = argparse.ArgumentParser(prog="pyg-dist-partition --verify",
                                description="checks a partition folder: sizes and digests of every file, then every "
                                            "partition opened as a rank opens it (shapes, dtypes, counts, ids)")
    p.add_argument("--verify", metavar="DIR", required=True, help="the partition folder to check")
    args = p.parse_args(argv)
    try:
        meta = M.read_meta(args.verify)
        if not D.listed(meta):
            print(f"{M.META_FILE}: lists no file digests (written by PyG or before pyg_dist recorded them): "
                  "only presence and stamps are checked", flush=True)
        bad, start = 0, time.perf_counter()
        for label, problems, size in D.folder_problems(meta):  # each row computed just before it comes
            took = f" ({size / 1e6:.1f} MB in {time.perf_counter() - start:.2f} s)" if size else ""
            print(f"{label}: " + ("ok" + took if not problems else "; ".join(problems)), flush=True)
            bad, start = bad + bool(problems), time.perf_counter()
        for label, problems in structure_problems(meta):  # what opening checks besides digests
            print(f"{label}: " + ("ok" if not problems else "; ".join(problems)), flush=True)
            bad += bool(problems)
    except PyGDistError as e:
        print(f"pyg-dist-partition: error: {e}", file=sys.stderr)
        return 2
    print(f"{args.verify}: {'ok' if not bad else f'{bad} problem line(s)'}")
    return 1 if bad else 0


def write_plot(args: argparse.Namespace, stats: Dict[str, Any]) -> None:
    """``--plot``: the per-part chart of ``stats`` into ``OUT/partition_report.png``; prints its path."""
    if not args.plot:
        return
    from pyg_dist.partition.plot import plot_partition_report, report_path
    path = report_path(args.out)
    plot_partition_report(stats, path, label=f"{args.dataset} / {args.method}")
    print(f"chart: {path}")


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point; returns the exit status (2 on a user error, message on stderr)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--verify" or a.startswith("--verify=") for a in argv):
        return verify_main(argv)
    args = build_parser().parse_args(argv)
    from pyg_dist.datasets.registry import load_dataset
    try:
        check_applicable(args)
        if args.plot:  # fail before a long partitioning, not after it
            from pyg_dist.partition.plot import load_matplotlib
            load_matplotlib("pyg-dist-partition --plot")
        if is_out_of_core(args):
            t1 = time.perf_counter()
            stats, rank = _run_out_of_core(args)
            if rank == 0:
                print(format_report(stats))
                print(f"wrote {args.out} out-of-core in {time.perf_counter() - t1:.1f} s (method {args.method}, "
                      f"{args.num_parts} parts)")
                write_plot(args, stats)
            return 0
        method_opts = dict(base_method=args.base_method or "metis", sub_parts=args.sub_parts,
                           num_clusters=args.num_clusters, seed=args.seed,
                           ufactor=30 if args.ufactor is None else args.ufactor)
        PartitionConfig(args.num_parts, args.method, **method_opts)  # fail fast, before a long load
        check_output(args.out, args.overwrite)
        t0 = time.perf_counter()
        data = load_dataset(args.dataset, args.root, undirected=args.undirected, **dataset_options(args))
        t1 = time.perf_counter()
        print(f"loaded {args.dataset}: {data}  ({t1 - t0:.1f} s)", flush=True)
        print(edges_note(args, data), flush=True)
        part = Partitioner(data, args.num_parts, args.method, balance=not args.no_balance,
                           allow_nonfinite=args.allow_nonfinite, cache_ratio=args.cache_ratio,
                           cache_topology=args.cache_topology, feature_dtype=args.feature_dtype, **method_opts)
        stats = part.save(args.out, overwrite=args.overwrite, progress=not args.quiet)
        print(format_report(stats))
        print(f"wrote {args.out} in {time.perf_counter() - t1:.1f} s (method {args.method}, "
              f"{args.num_parts} parts x {args.sub_parts} trainers)")
        write_plot(args, stats)
    except PyGDistError as e:
        print(f"pyg-dist-partition: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
