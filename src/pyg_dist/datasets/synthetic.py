"""The built-in graph generator used by demos, tests and benchmarks.

A degree-corrected stochastic block model with Chung-Lu weights: power-law degrees, communities of
``community_size`` nodes with ``intra_frac`` of the edges inside a community, symmetrised, deduplicated,
no self loops. Labels follow communities and features are noisy class centroids, so a GNN that
aggregates neighbours learns them much better than an MLP. Heterogeneous graphs split the same node
set into several node types (edges keep their community structure across types).
"""
from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, check_positive_int

_WHERE = "synthetic_graph"


def _draw(cdf: Tensor, lo: Tensor, hi: Tensor, gen: torch.Generator) -> Tensor:
    """Draws node ids with probability proportional to weight inside cdf bounds ``[lo, hi)``."""
    u = lo + (hi - lo) * torch.rand(lo.numel(), dtype=torch.float64, generator=gen)
    idx = torch.searchsorted(cdf, u, right=True) - 1
    return idx.clamp_(0, cdf.numel() - 2)


def dcsbm_edges(num_nodes: int, num_pairs: int, community_size: int = 1200, intra_frac: float = 0.85,
                power: float = 0.5, seed: int = 0, chunk: int = 8_000_000) -> Tuple[Tensor, Tensor]:
    """Undirected DC-SBM edges as a sorted, deduplicated, symmetric ``(row, col)`` pair.

    Node ``i`` belongs to community ``i // community_size``; Chung-Lu weights (``rank ** -power`` over a
    random rank order) give power-law degrees, and ``intra_frac`` of the drawn pairs stay inside the
    source's community. :func:`synthetic_graph` relabels the nodes randomly afterwards.
    """
    gen = torch.Generator().manual_seed(seed)
    src, dst = dcsbm_pairs(num_nodes, num_pairs, community_size, intra_frac, power, gen, chunk)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.unique(torch.cat([src * num_nodes + dst, dst * num_nodes + src]))
    return key // num_nodes, key % num_nodes


def dcsbm_pairs(num_nodes: int, num_pairs: int, community_size: int, intra_frac: float, power: float,
                gen: torch.Generator, chunk: int = 8_000_000) -> Tuple[Tensor, Tensor]:
    """The ``num_pairs`` drawn ``(src, dst)`` pairs of :func:`dcsbm_edges`, in draw order (self loops and
    duplicates kept). The draws consume ``gen`` in a fixed order: a random rank per node, then per ``chunk``
    of pairs the sources, the intra-community coins and the destinations."""
    weight = (torch.randperm(num_nodes, generator=gen).double() + 1.0).pow(-power)
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(weight, 0)])
    del weight
    total = cdf[-1].item()
    srcs, dsts = [], []
    for start in range(0, num_pairs, chunk):
        m = min(chunk, num_pairs - start)
        zeros = torch.zeros(m, dtype=torch.float64)
        src = _draw(cdf, zeros, zeros + total, gen)
        intra = torch.rand(m, generator=gen) < intra_frac
        comm = src // community_size
        lo = torch.where(intra, cdf[comm * community_size], zeros)
        hi = torch.where(intra, cdf[torch.clamp((comm + 1) * community_size, max=num_nodes)], zeros + total)
        srcs.append(src)
        dsts.append(_draw(cdf, lo, hi, gen))
    if len(srcs) <= 1:  # no copy of the only chunk; no pairs: empty id tensors
        return (srcs[0], dsts[0]) if srcs else (torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))
    return torch.cat(srcs), torch.cat(dsts)


def _split_masks(n: int, split: Sequence[float], gen: torch.Generator):
    if len(split) != 3 or any(s < 0 for s in split) or sum(split) > 1.0 + 1e-9:
        raise InvalidArgumentError(_WHERE, "split", split, "three non-negative fractions summing to <= 1")
    perm = torch.randperm(n, generator=gen)
    bounds = [0, int(split[0] * n), int((split[0] + split[1]) * n), int(sum(split) * n)]
    masks = []
    for i in range(3):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[perm[bounds[i]:bounds[i + 1]]] = True
        masks.append(mask)
    return masks


def _check_args(num_nodes, avg_degree, num_features, num_classes, community_size, intra_frac):
    check_positive_int(_WHERE, "num_nodes", num_nodes)
    check_positive_int(_WHERE, "num_features", num_features)
    check_positive_int(_WHERE, "num_classes", num_classes)
    check_positive_int(_WHERE, "community_size", community_size)
    if not (isinstance(avg_degree, (int, float)) and avg_degree >= 0):
        raise InvalidArgumentError(_WHERE, "avg_degree", avg_degree, "a non-negative number")
    if not (0.0 <= intra_frac <= 1.0):
        raise InvalidArgumentError(_WHERE, "intra_frac", intra_frac, "a fraction in [0, 1]")


def synthetic_graph(num_nodes: int = 10_000, avg_degree: float = 10.0, *, num_features: int = 32,
                    num_classes: int = 8, community_size: int = 200, intra_frac: float = 0.85,
                    power: float = 0.5, noise: float = 3.0, hetero: bool = False,
                    node_types: Sequence[str] = ("paper", "author", "field"),
                    node_time: bool = False, edge_time: bool = False, edge_dim: int = 0,
                    edge_weight: bool = False, split: Sequence[float] = (0.6, 0.2, 0.2),
                    max_time: int = 100, seed: int = 0):
    """Generates a graph with power-law degrees, communities and learnable labels.

    Args:
        num_nodes: Number of nodes (over all types).
        avg_degree: Mean number of directed edges per node (before deduplication).
        num_features: Width of ``x``.
        num_classes: Number of label classes; community ``c`` has class ``c % num_classes``.
        community_size: Nodes per community.
        intra_frac: Fraction of edges inside a community.
        power: Exponent of the Chung-Lu weights (``rank ** -power``); larger is more skewed.
        noise: Standard deviation of the feature noise around unit-scale class centroids.
        hetero: Return a ``HeteroData`` whose nodes are split over ``node_types``; the first type
            carries ``y`` and the masks, every type carries ``x``; edge type ``(s, "to", d)``.
        node_types: Node type names for ``hetero=True``.
        node_time: Add an int64 node attribute ``time`` in ``[0, max_time)``.
        edge_time: Add an int64 edge attribute ``edge_time`` (symmetric per undirected edge).
        edge_dim: If positive, add ``edge_attr`` of shape ``[num_edges, edge_dim]``.
        edge_weight: Add a float ``edge_weight`` in ``(0, 1]``.
        split: Train / val / test fractions of the labelled nodes.
        max_time: Upper bound (exclusive) of the timestamps.
        seed: Seed of every random choice: the same arguments give the same graph.

    Example:
        >>> data = synthetic_graph(1000, 8, num_features=16)
        >>> data.x.shape
        torch.Size([1000, 16])
    """
    _check_args(num_nodes, avg_degree, num_features, num_classes, community_size, intra_frac)
    gen = torch.Generator().manual_seed(seed + 1)
    row, col = dcsbm_edges(num_nodes, int(num_nodes * avg_degree / 2), community_size, intra_frac,
                           power, seed)
    # dcsbm_edges numbers communities by position before shuffling weights only, so ids are communities
    y = (torch.arange(num_nodes) // community_size) % num_classes
    centroids = torch.randn(num_classes, num_features, generator=gen)
    x = centroids[y] + noise * torch.randn(num_nodes, num_features, generator=gen)
    # relabel randomly so ids carry no community information
    perm = torch.randperm(num_nodes, generator=gen)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(num_nodes)
    row, col = perm[row], perm[col]
    order = torch.argsort(row * num_nodes + col)
    row, col = row[order], col[order]
    x, y = x[inv], y[inv]
    attrs = _edge_and_time_attrs(row, col, num_nodes, node_time, edge_time, edge_dim, edge_weight,
                                 max_time, gen)
    if hetero:
        return _to_hetero(row, col, x, y, attrs, list(node_types), split, gen)
    from torch_geometric.data import Data
    data = Data(x=x, y=y, edge_index=torch.stack([row, col]), num_nodes=num_nodes)
    data.train_mask, data.val_mask, data.test_mask = _split_masks(num_nodes, split, gen)
    for key, value in attrs.items():
        data[key] = value
    return data


def _edge_and_time_attrs(row, col, n, node_time, edge_time, edge_dim, edge_weight, max_time, gen):
    out = {}
    if node_time:
        out["time"] = torch.randint(0, max_time, (n,), generator=gen)
    if edge_time:
        lo, hi = torch.minimum(row, col), torch.maximum(row, col)
        out["edge_time"] = ((lo * 1_000_003 + hi * 7_919) % max_time).to(torch.int64)
    if edge_dim:
        check_positive_int(_WHERE, "edge_dim", edge_dim)
        out["edge_attr"] = torch.randn(row.numel(), edge_dim, generator=gen)
    if edge_weight:
        out["edge_weight"] = 1.0 - torch.rand(row.numel(), generator=gen)
    return out


def _to_hetero(row, col, x, y, attrs, node_types, split, gen):
    from torch_geometric.data import HeteroData
    if not node_types or len(set(node_types)) != len(node_types):
        raise InvalidArgumentError(_WHERE, "node_types", node_types, "distinct node type names")
    n = x.size(0)
    ntype = torch.arange(n) % len(node_types)
    local = torch.empty(n, dtype=torch.long)
    data = HeteroData()
    for t, name in enumerate(node_types):
        ids = (ntype == t).nonzero().view(-1)
        local[ids] = torch.arange(ids.numel())
        data[name].x = x[ids]
        data[name].num_nodes = ids.numel()
        if "time" in attrs:
            data[name].time = attrs["time"][ids]
        if t == 0:
            data[name].y = y[ids]
            masks = _split_masks(ids.numel(), split, gen)
            data[name].train_mask, data[name].val_mask, data[name].test_mask = masks
    for s, src_name in enumerate(node_types):
        for d, dst_name in enumerate(node_types):
            sel = ((ntype[row] == s) & (ntype[col] == d)).nonzero().view(-1)
            store = data[src_name, "to", dst_name]
            store.edge_index = torch.stack([local[row[sel]], local[col[sel]]])
            for key in ("edge_time", "edge_attr", "edge_weight"):
                if key in attrs:
                    store[key] = attrs[key][sel]
    return data
