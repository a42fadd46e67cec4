"""The planner's graph: its CSR for the replay (:mod:`.replay`) and its partition folders for the job runs.

The graph comes as the partitioner takes it (``--dataset NAME --root R`` and the dataset's options; ``chunked``:
a folder of edge chunks, read chunk by chunk into one int32 CSR), or as a ``{rowptr, col, N}`` file (``--graph
FILE``: the ``products_like`` dataset over that file). Folders are written by ``pyg-dist-partition`` (a child
process, so its memory is returned) into ``<work>/parts-<N>`` and reused when their ``META.json`` says ``N``
parts; the replay then uses the folder's own assignment (:func:`folder_owner`), so a ``--check`` row replays
exactly the partitions its job runs on.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.calibrate import JobFailedError
from pyg_dist.plan.replay import Graph


def dataset_args(args) -> List[str]:
    """The partitioner's arguments that name the graph (and its stand-in features, for generated graphs)."""
    name, root = ("products_like", args.graph) if args.graph else (args.dataset, args.root)
    out = ["--dataset", name] + (["--root", str(root)] if root else [])
    for flag, value in (("--x-dim", args.x_dim), ("--num-classes", args.num_classes),
                        ("--train-frac", args.train_frac), ("--feature-dtype", getattr(args, "feature_dtype", None))):
        if value is not None:
            out += [flag, str(value)]
    return out


def load_graph(args) -> Graph:
    """The symmetric CSR of the graph (``--graph``: read as is; a dataset: its edges made undirected)."""
    if args.graph:
        try:
            raw = torch.load(args.graph, weights_only=True, mmap=True)
            graph = Graph(raw["rowptr"].long(), raw["col"].long())
        except Exception as e:  # noqa: BLE001 - any failure to read is a bad argument
            raise InvalidArgumentError("pyg-dist-plan", "--graph", str(args.graph),
                                       f"a readable {{rowptr, col, N}} file ({e})") from None
        return graph.check(f"--graph {args.graph}")
    if args.dataset == "chunked":
        return _chunked_graph(args.root).check(f"--root {args.root}")
    from torch_geometric.utils import remove_self_loops, to_undirected

    from pyg_dist.datasets.registry import load_dataset
    opts = {k: v for k, v in (("x_dim", args.x_dim), ("num_classes", args.num_classes),
                              ("train_frac", args.train_frac)) if v is not None}
    data = load_dataset(args.dataset, args.root, **opts)
    if getattr(data, "edge_index", None) is None:
        raise InvalidArgumentError("pyg-dist-plan", "--dataset", args.dataset, "a homogeneous graph (edge_index)")
    ei = remove_self_loops(to_undirected(data.edge_index, num_nodes=data.num_nodes))[0]
    rowptr = torch.zeros(data.num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(ei[0], minlength=data.num_nodes), 0)
    train = getattr(data, "train_mask", None)
    mask = train if isinstance(train, torch.Tensor) and train.dtype == torch.bool else None
    return Graph(rowptr, ei[1], mask).check(f"--dataset {args.dataset}")


def _chunked_graph(root) -> Graph:
    """A ``chunked`` folder's edges (stored symmetric, as the generators write them) as an int32-column CSR:
    two passes over the chunks (degrees, then columns), 4 bytes per edge and 8 per node in memory."""
    import numpy as np

    from pyg_dist._types import HOMO_EDGE, HOMO_NODE
    from pyg_dist.partition.ooc.chunked import open_chunked
    g = open_chunked(root)
    n, edges = g.num_nodes[HOMO_NODE], g.edges[HOMO_EDGE]
    deg = np.zeros(n, np.int64)
    for _, src, _ in edges.chunks(1 << 24):
        deg += np.bincount(src, minlength=n)
    rowptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=rowptr[1:])
    col, fill = np.empty(int(rowptr[-1]), np.int32), rowptr[:-1].copy()
    for _, src, dst in edges.chunks(1 << 24):
        order = np.argsort(src, kind="stable")
        s, d = src[order], dst[order]
        first = np.searchsorted(s, s, side="left")  # position of each edge within its source's run here
        pos = fill[s] + (np.arange(s.size) - first)
        col[pos] = d
        fill += np.bincount(s, minlength=n)
    train = g.node_attrs[HOMO_NODE].get("train_mask")
    mask = torch.from_numpy(np.asarray(train[:], dtype=bool)) if train is not None else None
    return Graph(torch.from_numpy(rowptr), torch.from_numpy(col), mask)


def folder_owner(path: Path) -> Optional[torch.Tensor]:
    """The part of every node (original ids) of a homogeneous partition folder, ``None`` for a heterogeneous one."""
    from pyg_dist.format import meta as M
    if M.read_meta(path).is_hetero:
        return None
    parts = M.load_tensor(M.node_map_path(path, "_N", False)).long()
    orig = Path(M.original_node_ids_path(path, "_N"))
    owner = torch.empty_like(parts)
    owner[M.load_tensor(orig).long() if orig.exists() else torch.arange(parts.numel())] = parts
    return owner


def folder(args, parts: int, say=print) -> Path:
    """``<work>/parts-<parts>``, written by the partitioner unless it is there already (one written with another
    ``--feature-dtype`` raises :class:`~pyg_dist.errors.InvalidArgumentError` naming it: the plan would measure
    the wrong rows)."""
    from pyg_dist.format.meta import read_meta
    out = Path(args.work) / f"parts-{parts}"
    if (out / "META.json").exists() and read_meta(out).num_parts == parts:
        stored = folder_dtype(out)
        wanted = getattr(args, "feature_dtype", None)
        if wanted is not None and stored != wanted:
            raise InvalidArgumentError("pyg-dist-plan", "--feature-dtype", wanted,
                                       f"the dtype of the features in {out} ({stored}): another --work, or remove it")
        return out
    say(f"partitioning the graph into {parts} part(s) ({args.method}) -> {out}")
    cmd = [sys.executable, "-m", "pyg_dist.partition.cli", *dataset_args(args), "--num-parts", str(parts),
           "--method", args.method, "--out", str(out), "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise JobFailedError(f"pyg-dist-partition ({parts} parts) exited {proc.returncode}:\n{tail}")
    return out


def folder_dtype(path: Path) -> Optional[str]:
    """The dtype a partition folder stores its node feature ``x`` in (META.json's ``attr_dtypes``; ``None``
    without one).

    Raises:
        PartitionFormatError: naming ``META.json`` when it is missing, not JSON or malformed.
    """
    from pyg_dist.format.meta import read_meta
    from pyg_dist.format.precision import META_DTYPES, recorded
    meta = read_meta(path)
    for ntype in meta.node_types:
        dtype = recorded(meta.extra.get(META_DTYPES), "node", ntype).get("x")
        if dtype is not None:
            return str(dtype)
    return None


def machine_cores(value: Optional[int]) -> int:
    """``value`` when given, else the cores this process may run on."""
    import os
    if value:
        return value
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


__all__ = ["dataset_args", "load_graph", "folder", "folder_dtype", "machine_cores"]
