"""Bounded-memory node assignment over a :class:`~pyg_dist.partition.ooc.spill.BlockAdjacency`.

Per-node state only (O(N) arrays); edges are read block by block from disk.

- :func:`fennel_assign`: Fennel (Tsourakakis et al., 2014) in one or more passes (restreaming, Nishimura &
  Ugander, 2013): each node goes to the part ``i`` maximising ``|N(v) ∩ P_i| - alpha * gamma * L_i **
  (gamma - 1)``, ``L_i`` the part's load, under a hard cap on every balance constraint (node count,
  train/val/test counts, in-degree: the METIS constraints). Nodes are scored in small batches against the
  assignment so far (vectorised; a batch sees the loads as they were before it), and each part then
  admits the batch's nodes best gain first while they fit its remaining capacity; a node that fits
  nowhere it wants is offered its next choice. Later passes start from the previous assignment; a
  starting assignment above a cap keeps its load there as that part's cap (never forced moves).
- With ``alpha=0`` the same routine is a greedy refinement (each node moves to the part holding most of
  its neighbours, capacity permitting): :func:`pyg_dist.partition.ooc.coarsen.coarsen_assign` refines its
  projected METIS result that way.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from pyg_dist.partition.ooc.spill import BlockAdjacency


def capacities(weights: np.ndarray, num_parts: int, slack: float) -> np.ndarray:
    """Per-constraint cap of one part: ``(1 + slack) * total / num_parts``, at least one node's largest weight
    above the mean so every node fits somewhere."""
    total = weights.sum(0).astype(np.float64)
    return np.maximum((1.0 + slack) * total / num_parts, total / num_parts + weights.max(0, initial=0))


def neighbour_counts(ptr: np.ndarray, nbr: np.ndarray, lo: int, hi: int, parts: np.ndarray,
                     num_parts: int) -> np.ndarray:
    """``[hi - lo, num_parts]``: how many neighbours of block rows ``lo..hi`` each part holds (unassigned
    neighbours, part ``-1``, are not counted)."""
    b = hi - lo
    owner = parts[nbr[ptr[lo]:ptr[hi]]]
    row = np.repeat(np.arange(b), np.diff(ptr[lo:hi + 1]))
    ok = owner >= 0
    return np.bincount(row[ok] * num_parts + owner[ok], minlength=b * num_parts).reshape(b, num_parts)


def admit(score: np.ndarray, w: np.ndarray, loads: np.ndarray, caps: np.ndarray,
          own: np.ndarray) -> np.ndarray:
    """Chooses a part for each row of ``score`` (``[b, P]``) under ``caps`` (``[P, C]``); updates ``loads``.

    Each round every open row picks its best allowed part; each part admits its pickers (rows staying in
    their ``own`` part first, then best score first) while their cumulative weights fit; rejected rows lose
    that part and pick again. A row that fits no part goes to the part with the lowest relative load.
    """
    b, num_parts = score.shape
    choice = np.full(b, -1, dtype=np.int64)
    score = score.astype(np.float64, copy=True)
    open_rows = np.arange(b)
    for _ in range(num_parts):
        if not open_rows.size:
            break
        s = score[open_rows]
        pick = s.argmax(1)
        best = s[np.arange(open_rows.size), pick]
        live = np.isfinite(best)
        rows, pick, best = open_rows[live], pick[live], best[live]
        order = np.lexsort((-best, own[rows] != pick, pick))
        rows, pick = rows[order], pick[order]
        cum = np.cumsum(w[rows], axis=0)
        starts = np.flatnonzero(np.r_[True, pick[1:] != pick[:-1]])
        group = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, pick.size]))
        within = cum - (cum[starts] - w[rows[starts]])[group]
        ok = (within <= (caps - loads)[pick]).all(1)
        choice[rows[ok]] = pick[ok]
        np.add.at(loads, pick[ok], w[rows[ok]])
        score[rows[~ok], pick[~ok]] = -np.inf
        open_rows = np.concatenate([rows[~ok], open_rows[~live]])
    for r in np.flatnonzero(choice < 0):  # fits nowhere: the least loaded part, relative to the caps
        p = int(((loads + w[r]) / caps).max(1).argmin())
        choice[r] = p
        loads[p] += w[r]
    return choice


def fennel_assign(adj: BlockAdjacency, weights: np.ndarray, num_parts: int, passes: int = 3, gamma: float = 1.5,
                  slack: float = 0.03, alpha: Optional[float] = None, batch: Optional[int] = None,
                  init: Optional[np.ndarray] = None, progress=None) -> np.ndarray:
    """Streaming (re)assignment of every node to ``num_parts`` parts; see the module docstring.

    Args:
        adj: The symmetric block adjacency.
        weights: ``[N, C]`` int64 balance weights (column 0 is the one ``L_i`` measures; usually nodes).
        num_parts: Number of parts.
        passes: Passes over the nodes (the first one sees only earlier nodes unless ``init`` is given).
        gamma: Fennel's load exponent.
        alpha: Fennel's load weight (default ``sqrt(P) * E / N ** 1.5``; 0 = greedy refinement).
        slack: Allowed imbalance per constraint (0.03 = 3 %, METIS' default ``ufactor=30``).
        batch: Nodes scored together (default ``N / 256``, between 16 and 2048: a batch sees the others'
            assignment as it was before the batch).
        init: A starting assignment (refinement); ``None`` starts with every node unassigned.
        progress: A tqdm bar advanced by nodes.

    Returns:
        ``[N]`` int64 part of every node.
    """
    n = adj.num_nodes
    batch = batch or int(min(2048, max(16, n // 256)))
    weights = weights.reshape(n, -1).astype(np.float64)
    if alpha is None:
        alpha = np.sqrt(num_parts) * (adj.num_entries / 2) / max(n, 1) ** 1.5
    parts = np.full(n, -1, dtype=np.int64) if init is None else np.asarray(init, dtype=np.int64).copy()
    loads = np.zeros((num_parts, weights.shape[1]))
    if init is not None:
        np.add.at(loads, parts, weights)
    # per part and constraint; a refinement never has to undo the imbalance it starts from
    caps = np.maximum(capacities(weights, num_parts, slack)[None, :], loads)
    scale = n / np.maximum(weights.sum(0), 1e-12)  # loads in node units, per constraint
    for _ in range(passes):
        for start, rows, ptr, nbr in adj.blocks():
            if ptr is None or nbr is None:  # another rank's block: its results arrive below
                adj.sync(start, parts[start:start + rows], loads)
                continue
            for lo in range(0, rows, batch):
                hi = min(rows, lo + batch)
                ids = np.arange(start + lo, start + hi)
                old = parts[ids]
                had = old >= 0
                np.subtract.at(loads, old[had], weights[ids[had]])
                counts = neighbour_counts(ptr, nbr, lo, hi, parts, num_parts)
                load = (loads * scale).max(1)
                score = counts - alpha * gamma * np.power(np.maximum(load, 0.0), gamma - 1.0)
                parts[ids] = admit(score, weights[ids], loads, caps, old)
                if progress is not None:
                    progress.update(hi - lo)
            adj.sync(start, parts[start:start + rows], loads)
    return parts
