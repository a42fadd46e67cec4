"""Partition quality: edge cut, balance per part and per constraint, halo nodes, bytes on disk."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
from torch import Tensor

from pyg_dist._types import NodeType
from pyg_dist.partition.renumber import EdgeOrder, NodeOrder
from pyg_dist.partition.source import TypedGraph


def _balance(counts) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    mean = counts.mean() if counts.size else 0.0
    return float(counts.max() / mean) if mean > 0 else 1.0


def quality_stats(g: TypedGraph, nodes: Dict[NodeType, NodeOrder], edges: Dict[Any, EdgeOrder],
                  num_parts: int, constraint_names: List[str], weights) -> Dict[str, Any]:
    """Edge-cut fraction, node / edge / train balance, per-constraint balance, halo-node ratio.

    Balance is ``max over parts / mean over parts`` (1.0 = perfect). The halo of a partition is the set
    of distinct non-owned source nodes its in-edges reference.
    """
    stats: Dict[str, Any] = {"num_parts": num_parts}
    nodes_pp = {t: torch.diff(o.bounds).tolist() for t, o in nodes.items()}
    edges_pp = np.zeros(num_parts, dtype=np.int64)
    cut, total = 0, 0
    halo: Dict[tuple, Tensor] = {}  # (part, source type) -> marks of referenced non-owned nodes
    for (s, _, _), eo in edges.items():
        edges_pp += torch.diff(eo.bounds).numpy()
        sb = nodes[s].bounds
        for p in range(num_parts):
            seg = eo.row[int(eo.bounds[p]):int(eo.bounds[p + 1])]
            remote = seg[(seg < sb[p]) | (seg >= sb[p + 1])]
            cut += remote.numel()
            if (p, s) not in halo:
                halo[(p, s)] = torch.zeros(g.num_nodes[s], dtype=torch.bool)
            halo[(p, s)][remote] = True
        total += eo.row.numel()
    halo_pp = np.zeros(num_parts, dtype=np.int64)
    for (p, _), marks in halo.items():
        halo_pp[p] += int(marks.sum())
    owned_pp = np.sum([np.asarray(v) for v in nodes_pp.values()], axis=0)
    stats.update({
        "edge_cut": cut / total if total else 0.0,
        "edges_per_part": edges_pp.tolist(), "edge_balance": _balance(edges_pp),
        "nodes_per_part": nodes_pp, "node_balance": {t: _balance(v) for t, v in nodes_pp.items()},
        "halo_nodes_per_part": halo_pp.tolist(),
        "halo_ratio": float(halo_pp.sum() / max(int(owned_pp.sum()), 1)),
    })
    stats["train_per_part"], stats["train_balance"] = {}, {}
    for t, attrs in g.node_attrs.items():
        if "train_mask" in attrs:
            mask = attrs["train_mask"][nodes[t].perm].long()
            per = [int(mask[int(nodes[t].bounds[p]):int(nodes[t].bounds[p + 1])].sum()) for p in range(num_parts)]
            stats["train_per_part"][t], stats["train_balance"][t] = per, _balance(per)
    stats["constraint_balance"] = _constraint_balance(g, nodes, num_parts, constraint_names, weights)
    return stats


def _constraint_balance(g, nodes, num_parts, names, weights) -> Dict[str, float]:
    if weights is None or not names:
        return {}
    part = torch.cat([torch.searchsorted(nodes[t].bounds, nodes[t].inv, right=True) - 1
                      for t in g.node_types]).numpy()
    out = {}
    for j, name in enumerate(names):
        per = np.bincount(part, weights=weights[:, j], minlength=num_parts)
        out[name] = _balance(per)
    return out


def folder_bytes(path: Path) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def format_report(stats: Dict[str, Any]) -> str:
    """A short human-readable quality report."""
    lines = [f"partitions: {stats['num_parts']}   edge cut: {stats['edge_cut']:.3f}   "
             f"halo/owned nodes: {stats['halo_ratio']:.3f}   edge balance: {stats['edge_balance']:.3f}"]
    for t, b in stats["node_balance"].items():
        lines.append(f"  nodes[{t}] per part: {stats['nodes_per_part'][t]}  balance {b:.3f}")
    for t, b in stats.get("train_balance", {}).items():
        lines.append(f"  train[{t}] per part: {stats['train_per_part'][t]}  balance {b:.3f}")
    for name, b in stats.get("constraint_balance", {}).items():
        lines.append(f"  constraint {name}: balance {b:.3f}")
    lines.append(f"  edges per part: {stats['edges_per_part']}")
    lines.append(f"  halo nodes per part: {stats['halo_nodes_per_part']}")
    if "bytes_per_part" in stats:
        lines.append(f"  bytes per part: {stats['bytes_per_part']}")
    return "\n".join(lines)

