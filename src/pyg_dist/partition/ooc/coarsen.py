"""Coarsen-then-partition with bounded memory: size-constrained label propagation over the on-disk block
adjacency, METIS (multi-constraint, :func:`~pyg_dist.partition.metis.metis_kway`) on the coarse graph,
projection back, then greedy refinement passes (:func:`~pyg_dist.partition.ooc.streaming.fennel_assign` with
``alpha=0``).

State is O(N) (a label and a size per node) plus the coarse graph, whose edges are aggregated per block
(``np.unique``) and merged once; the fine edges are only ever read one block at a time.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from pyg_dist.partition.metis import metis_kway
from pyg_dist.partition.ooc.spill import BlockAdjacency, stable_order, unique_counts
from pyg_dist.partition.ooc.streaming import fennel_assign


def _best_labels(ptr: np.ndarray, nbr: np.ndarray, lo: int, hi: int, labels: np.ndarray,
                 n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For block rows ``lo..hi``: ``(rows, best label, its count)`` for rows with neighbours, and the count
    of each row's current label (ties go to the smallest label)."""
    b = hi - lo
    row = np.repeat(np.arange(b, dtype=np.int64), np.diff(ptr[lo:hi + 1]))
    lab = labels[nbr[ptr[lo]:ptr[hi]]]
    key, cnt = unique_counts(row * n + lab)  # sorted by row, then label
    r, lab = key // n, key % n
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    group = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, r.size]))
    pos = np.flatnonzero(cnt == np.maximum.reduceat(cnt, starts)[group])
    first = pos[np.r_[True, group[pos][1:] != group[pos][:-1]]]  # the smallest label among a row's best
    return r[first], lab[first], cnt[first]


def _current_count(ptr, nbr, lo, hi, labels, own: np.ndarray) -> np.ndarray:
    b = hi - lo
    row = np.repeat(np.arange(b, dtype=np.int64), np.diff(ptr[lo:hi + 1]))
    same = labels[nbr[ptr[lo]:ptr[hi]]] == own[row]
    return np.bincount(row[same], minlength=b)


def label_propagation(adj: BlockAdjacency, max_size: int, rounds: int = 3, batch: int = 65536,
                      progress=None) -> np.ndarray:
    """Size-constrained label propagation: every node adopts the label most frequent among its neighbours
    when that cluster has room (``max_size`` nodes); ``rounds`` passes. Returns ``[N]`` int64 labels."""
    n = adj.num_nodes
    labels = np.arange(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64)
    for _ in range(rounds):
        for start, rows, ptr, nbr in adj.blocks():
            if ptr is None or nbr is None:  # another rank's block: apply its moves to the sizes too
                old = labels[start:start + rows].copy()
                adj.sync(start, labels[start:start + rows])
                np.subtract.at(size, old, 1)
                np.add.at(size, labels[start:start + rows], 1)
                continue
            for lo in range(0, rows, batch):
                hi = min(rows, lo + batch)
                r, best, cnt = _best_labels(ptr, nbr, lo, hi, labels, n)
                ids = start + lo + r
                own = labels[start + lo:start + hi]
                gain = cnt - _current_count(ptr, nbr, lo, hi, labels, own)[r]
                move = (best != labels[ids]) & (gain > 0)
                ids, best, gain = ids[move], best[move], gain[move]
                order = np.lexsort((-gain, best))
                ids, best = ids[order], best[order]
                first = np.r_[True, best[1:] != best[:-1]]
                rank = np.arange(best.size) - np.maximum.accumulate(np.where(first, np.arange(best.size), 0))
                ok = size[best] + rank + 1 <= max_size
                ids, best = ids[ok], best[ok]
                np.subtract.at(size, labels[ids], 1)
                np.add.at(size, best, 1)
                labels[ids] = best
                if progress is not None:
                    progress.update(hi - lo)
            adj.sync(start, labels[start:start + rows])
    return labels


def coarse_graph(adj: BlockAdjacency, cluster: np.ndarray, num_clusters: int
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cluster graph as METIS input ``(xadj, adjncy, adjwgt)``: an edge between two clusters weighs the
    number of fine edges between them (symmetric, no self loops)."""
    pieces: List[Tuple[np.ndarray, np.ndarray]] = []
    c = np.int64(num_clusters)
    for start, rows, ptr, nbr in adj.blocks():
        if ptr is None:
            continue
        cu = np.repeat(cluster[start:start + rows], np.diff(ptr))
        cv = cluster[nbr]
        keep = cu != cv
        pieces.append(unique_counts(cu[keep] * c + cv[keep]))
    pieces = [p for rank_pieces in adj.comm.all_gather(pieces) for p in rank_pieces]  # every rank: the same graph
    keys = np.concatenate([k for k, _ in pieces]) if pieces else np.zeros(0, np.int64)
    cnts = np.concatenate([w for _, w in pieces]) if pieces else np.zeros(0, np.int64)
    del pieces
    order = stable_order(keys)
    keys, cnts = keys[order], cnts[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, np.int64)
    key = keys[starts]
    wgt = np.add.reduceat(cnts, starts) if keys.size else cnts
    src, dst = key // c, key % c
    xadj = np.zeros(num_clusters + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_clusters), out=xadj[1:])
    return xadj, dst, wgt


def coarsen_assign(adj: BlockAdjacency, weights: np.ndarray, num_parts: int, seed: int = 0, ufactor: int = 30,
                   cluster_factor: int = 256, rounds: int = 3, refine: int = 2,
                   progress=None) -> Tuple[np.ndarray, Dict[str, int]]:
    """Coarsen (label propagation, clusters of at most ``N / (num_parts * cluster_factor)`` nodes), METIS
    on the cluster graph with the clusters' summed ``weights`` as constraints, project, refine.

    Returns:
        ``([N] int64 parts, info)`` with the number of clusters and coarse edges.
    """
    n = adj.num_nodes
    max_size = max(1, n // (num_parts * cluster_factor))
    labels = label_propagation(adj, max_size, rounds, progress=progress)
    uniq, cluster = np.unique(labels, return_inverse=True)
    del labels
    k = int(uniq.size)
    xadj, adjncy, adjwgt = coarse_graph(adj, cluster, k)
    vw = np.stack([np.bincount(cluster, weights=weights[:, j], minlength=k) for j in range(weights.shape[1])], 1)
    vw = vw.astype(np.int64)
    keep = vw.sum(0) > 0
    cpart, _ = metis_kway(xadj, adjncy, num_parts, vw[:, keep], seed=seed, ufactor=ufactor, adjwgt=adjwgt)
    parts = cpart.numpy()[cluster]
    info = {"clusters": k, "coarse_edges": int(adjncy.size)}
    del xadj, adjncy, adjwgt, cluster
    if refine:
        parts = fennel_assign(adj, weights, num_parts, passes=refine, alpha=0.0, slack=ufactor / 1000,
                              init=parts, progress=progress)
    return parts, info
