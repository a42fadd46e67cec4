"""Node-to-partition assignment as pure functions over a :class:`TypedGraph`.

Every function returns ``Dict[NodeType, Tensor]``: the partition (int64) of every node of each type.
Methods: ``random`` (balanced, seeded; RandomTMA), ``metis`` (min edge cut with one balance constraint
per node count, train/val/test count and in-degree, per node type; DistDGL), ``supernode`` (METIS
mini-clusters dealt to partitions at random; SuperTMA). :func:`split_within` splits each partition
again for the trainers of a machine (two-level, DistDGLv2).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist._types import NodeType
from pyg_dist.ops.graph_kernels import symmetric_csr
from pyg_dist.partition.config import BASE_METHODS
from pyg_dist.partition.metis import metis_kway
from pyg_dist.partition.source import TypedGraph

METHODS = BASE_METHODS  # ownership methods (hybrid builds on one of them)
MASKS = ("train_mask", "val_mask", "test_mask")


def random_assign(num_nodes: Dict[NodeType, int], num_parts: int, seed: int = 0) -> Dict[NodeType, Tensor]:
    """Balanced random assignment: a seeded permutation dealt into equal shares per node type.

    Example:
        >>> parts = random_assign({"_N": 10}, 2, seed=0)
        >>> torch.bincount(parts["_N"]).tolist()
        [5, 5]
    """
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for t, n in num_nodes.items():
        part = torch.empty(n, dtype=torch.long)
        part[torch.randperm(n, generator=gen)] = torch.arange(n) * num_parts // max(n, 1)
        out[t] = part
    return out


def _as_long(value) -> Tensor:
    return value.long() if isinstance(value, Tensor) else torch.from_numpy(np.asarray(value)).long()


def constraint_weights(g, indeg: Optional[Dict[NodeType, Tensor]] = None) -> Tuple[List[str], np.ndarray]:
    """Vertex weights for METIS over the concatenated id space, one column per constraint.

    Per node type: node count, train / val / test counts (where masks exist) and in-degree (``indeg``, or
    counted from ``g.edge_index``). Columns that are all zero, or equal to an earlier column, are dropped.
    ``g`` is a ``TypedGraph`` or a ``ChunkedGraph`` (masks may be numpy memory maps).
    """
    offsets, total = g.offsets(), g.total_nodes()
    if indeg is None:
        indeg = {t: torch.zeros(n, dtype=torch.long) for t, n in g.num_nodes.items()}
        for (_, _, d), ei in g.edge_index.items():
            indeg[d] += torch.bincount(ei[1], minlength=g.num_nodes[d])
    names: List[str] = []
    cols: List[Tensor] = []
    for t, n in g.num_nodes.items():
        sl = slice(offsets[t], offsets[t] + n)
        cands = [("nodes", torch.ones(n, dtype=torch.long))]
        cands += [(m, _as_long(g.node_attrs[t][m])) for m in MASKS if m in g.node_attrs.get(t, {})]
        cands.append(("in_degree", indeg[t]))
        for name, w in cands:
            col = torch.zeros(total, dtype=torch.long)
            col[sl] = w
            if int(w.sum()) <= 0 or any(torch.equal(col, c) for c in cols):
                continue
            names.append(f"{t}:{name}")
            cols.append(col)
    return names, torch.stack(cols, 1).numpy()


def homogeneous_edges(g: TypedGraph) -> Tuple[Tensor, Tensor]:
    """All edges in the concatenated id space (source, destination)."""
    off = g.offsets()
    src = [ei[0] + off[s] for (s, _, d), ei in g.edge_index.items()]
    dst = [ei[1] + off[d] for (s, _, d), ei in g.edge_index.items()]
    if len(src) == 1 and off[g.edge_types[0][0]] == 0 and off[g.edge_types[0][2]] == 0:
        return g.edge_index[g.edge_types[0]][0], g.edge_index[g.edge_types[0]][1]
    empty = torch.empty(0, dtype=torch.long)
    return (torch.cat(src) if src else empty), (torch.cat(dst) if dst else empty)


def _split_types(g: TypedGraph, flat: Tensor) -> Dict[NodeType, Tensor]:
    off = g.offsets()
    return {t: flat[off[t]:off[t] + n].clone() for t, n in g.num_nodes.items()}


def metis_assign(g: TypedGraph, num_parts: int, seed: int = 0, ufactor: int = 30,
                 balance: bool = True, recursive: bool = False) -> Tuple[Dict[NodeType, Tensor], List[str]]:
    """Min-cut assignment with multi-constraint balance (see :func:`constraint_weights`); k-way, or
    recursive bisection with ``recursive``.

    Returns:
        ``(parts per node type, names of the balance constraints used)``.
    """
    src, dst = homogeneous_edges(g)
    xadj, adjncy = symmetric_csr(src, dst, g.total_nodes())
    del src, dst
    names, w = constraint_weights(g) if balance else (["nodes"], None)
    flat, _ = metis_kway(xadj, adjncy, num_parts, w, seed=seed, ufactor=ufactor, recursive=recursive)
    return _split_types(g, flat), names


#: Most mini-clusters per partition ``supernode`` makes by default, and the fewest nodes per cluster.
CLUSTERS_PER_PART, MIN_CLUSTER_NODES = 32, 40


def default_num_clusters(num_parts: int, num_nodes: int) -> int:
    """``supernode``'s default cluster count: ``CLUSTERS_PER_PART`` per partition, fewer on small graphs so
    that a cluster keeps at least ``MIN_CLUSTER_NODES`` nodes (on Cora, 4 parts: clusters of 21 nodes keep
    63 % of the edges inside the trainers' subgraphs, clusters of 42 nodes 80 %); always a whole number of
    clusters per partition, so every partition is dealt the same count.

    Example:
        >>> default_num_clusters(4, 2_449_029), default_num_clusters(4, 2708), default_num_clusters(4, 10)
        (128, 64, 4)
    """
    per_part = min(CLUSTERS_PER_PART, num_nodes // (MIN_CLUSTER_NODES * num_parts))
    return num_parts * max(per_part, 1)


def supernode_assign(g: TypedGraph, num_parts: int, num_clusters: int, seed: int = 0
                     ) -> Tuple[Dict[NodeType, Tensor], List[str]]:
    """METIS mini-clusters (``num_clusters`` >> ``num_parts``) dealt to partitions at random.

    Clusters are balanced on node count only (multi-constraint METIS with hundreds of parts is slow);
    a seeded permutation deals them round-robin, so every partition receives the same number of
    clusters and the other constraints balance statistically.
    """
    src, dst = homogeneous_edges(g)
    xadj, adjncy = symmetric_csr(src, dst, g.total_nodes())
    del src, dst
    clusters, _ = metis_kway(xadj, adjncy, num_clusters, None, seed=seed)  # one constraint: fast
    gen = torch.Generator().manual_seed(seed)
    cluster_part = torch.empty(num_clusters, dtype=torch.long)
    cluster_part[torch.randperm(num_clusters, generator=gen)] = torch.arange(num_clusters) % num_parts
    return _split_types(g, cluster_part[clusters]), ["nodes (per cluster)"]


def split_within(g: TypedGraph, parts: Dict[NodeType, Tensor], num_parts: int, sub_parts: int,
                 method: str, seed: int = 0) -> Dict[NodeType, Tensor]:
    """Two-level split: each partition's nodes split again into ``sub_parts`` trainer shares.

    ``metis`` / ``supernode`` partition each induced subgraph with the balance constraints restricted
    to it; ``random`` deals a seeded permutation. Returns the sub-part (``0..sub_parts-1``) per node.
    """
    total = g.total_nodes()
    flat_part = torch.cat([parts[t] for t in g.node_types]) if total else torch.empty(0, dtype=torch.long)
    flat_sub = torch.zeros(total, dtype=torch.long)
    if sub_parts == 1:
        return _split_types(g, flat_sub)
    gen = torch.Generator().manual_seed(seed + 7)
    if method == "random":
        for p in range(num_parts):
            members = (flat_part == p).nonzero().view(-1)
            k = members.numel()
            flat_sub[members[torch.randperm(k, generator=gen)]] = torch.arange(k) * sub_parts // max(k, 1)
        return _split_types(g, flat_sub)
    src, dst = homogeneous_edges(g)
    _, w = constraint_weights(g)
    for p in range(num_parts):
        members = (flat_part == p).nonzero().view(-1)
        local = torch.full((total,), -1, dtype=torch.long)
        local[members] = torch.arange(members.numel())
        keep = (local[src] >= 0) & (local[dst] >= 0)
        xadj, adjncy = symmetric_csr(local[src[keep]], local[dst[keep]], members.numel())
        sub_w = w[members.numpy()]
        sub_w = sub_w[:, sub_w.sum(0) > 0]
        flat_sub[members], _ = metis_kway(xadj, adjncy, sub_parts, sub_w if sub_w.shape[1] else None,
                                          seed=seed)
    return _split_types(g, flat_sub)
