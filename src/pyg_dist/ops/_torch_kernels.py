"""Vectorised pure-torch one-hop sampling and relabel (any device; the fallback without numba).

Sampling expands the candidate in-edges of every seed, drops the disallowed ones (zero weight, newer
than the seed), gives each candidate a random key (uniform: ``U(0,1)``; weighted: an exponential race
``Exp(w)``; temporal 'last': minus its time) and keeps the ``k`` smallest keys per seed. Sampling with
replacement draws ``k`` positions per seed by inverse CDF over the allowed candidates.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.ops.csc import CSC


def _expand(colptr: Tensor, seeds: Tensor) -> Tuple[Tensor, Tensor]:
    """(segment, position) of every in-edge of every seed, grouped by seed."""
    start = colptr[seeds]
    deg = colptr[seeds + 1] - start
    seg = torch.repeat_interleave(torch.arange(seeds.numel(), device=seeds.device), deg)
    first = torch.cumsum(deg, 0) - deg
    pos = start[seg] + torch.arange(seg.numel(), device=seeds.device) - first[seg]
    return seg, pos


def _edge_time(csc: CSC, pos: Tensor, node_time: Optional[Tensor]) -> Tensor:
    """Time of the edges at ``pos``: their edge time, else the time of their source node."""
    if csc.edge_time is not None:
        return csc.edge_time[pos]
    assert node_time is not None, "temporal sampling without edge time needs node_time"
    return node_time[csc.row[pos].long()]


def _allowed(csc: CSC, seg: Tensor, pos: Tensor, node_time: Optional[Tensor],
             seed_time: Optional[Tensor]) -> Tensor:
    keep = torch.ones(pos.numel(), dtype=torch.bool, device=pos.device)
    if csc.weight is not None:
        keep &= csc.weight[pos] > 0
    if seed_time is not None:
        t = _edge_time(csc, pos, node_time)
        keep &= t <= seed_time[seg]
    return keep


def _counts(n: Tensor, k: int, replace: bool) -> Tensor:
    if k < 0:
        return n
    if replace:
        return torch.where(n > 0, torch.full_like(n, k), n)
    return n.clamp(max=k)


def _draw_with_replacement(csc: CSC, seg: Tensor, pos: Tensor, n: Tensor, cnt: Tensor,
                           gen: Optional[torch.Generator]) -> Tuple[Tensor, Tensor]:
    dev = pos.device
    out_seg = torch.repeat_interleave(torch.arange(n.numel(), device=dev), cnt)
    first = torch.cumsum(n, 0) - n
    u = torch.rand(out_seg.numel(), generator=gen, dtype=torch.float64, device=dev)
    if csc.weight is None:
        idx = first[out_seg] + (u * n[out_seg]).long().clamp(max=(n[out_seg] - 1).clamp(min=0))
    else:
        cdf = torch.cumsum(csc.weight[pos], 0)
        base = torch.where(first > 0, cdf[(first - 1).clamp(min=0)], torch.zeros_like(first, dtype=cdf.dtype))
        total = cdf[(first + n - 1).clamp(min=0)] - base
        target = base[out_seg] + u * total[out_seg]
        idx = torch.searchsorted(cdf, target, right=True)
        idx = torch.minimum(torch.maximum(idx, first[out_seg]), first[out_seg] + n[out_seg] - 1)
    return out_seg, pos[idx]


def _uniform_positions(colptr: Tensor, seeds: Tensor, k: int, replace: bool,
                       gen: Optional[torch.Generator]) -> Tuple[Tensor, Tensor]:
    """Uniform fast path without expanding the neighbourhoods: (positions grouped by seed, counts).

    Without replacement it runs Floyd's algorithm for all seeds at once: ``k`` vectorised steps, each
    checking the new draw against the (at most ``k``) previous ones.
    """
    dev = seeds.device
    start = colptr[seeds]
    deg = colptr[seeds + 1] - start
    cnt = _counts(deg, k, replace)
    seg = torch.repeat_interleave(torch.arange(seeds.numel(), device=dev), cnt)
    if replace:
        u = torch.rand(seg.numel(), generator=gen, dtype=torch.float64, device=dev)
        return start[seg] + (u * deg[seg]).long().clamp(max=(deg[seg] - 1).clamp(min=0)), cnt
    first = torch.cumsum(cnt, 0) - cnt
    pos = start[seg] + torch.arange(seg.numel(), device=dev) - first[seg]  # deg <= k: take all
    big = (deg > k).nonzero().view(-1)
    if big.numel():
        d = deg[big]
        chosen = torch.empty(big.numel(), k, dtype=torch.int64, device=dev)
        for j in range(k):
            top = d - k + j  # draw in [0, top]
            r = (torch.rand(big.numel(), generator=gen, dtype=torch.float64, device=dev) * (top + 1)).long()
            r = torch.minimum(r, top)
            dup = (chosen[:, :j] == r.view(-1, 1)).any(1)
            chosen[:, j] = torch.where(dup, top, r)
        slots = first[big].view(-1, 1) + torch.arange(k, device=dev).view(1, -1)
        pos[slots.view(-1)] = (start[big].view(-1, 1) + chosen).view(-1)
    return pos, cnt


def sample_torch(csc: CSC, seeds: Tensor, k: int, replace: bool, last: bool,
                 node_time: Optional[Tensor], seed_time: Optional[Tensor],
                 gen: Optional[torch.Generator]) -> Tuple[Tensor, Tensor, Tensor]:
    """Returns ``(nbr, edge, count)``: sampled global ids and edge ids grouped by seed, and counts."""
    if csc.weight is None and seed_time is None and k >= 0:
        pos, cnt = _uniform_positions(csc.colptr, seeds, k, replace, gen)
        edge = csc.edge_ids(pos)
        return csc.row[pos].long(), edge, cnt
    seg, pos = _expand(csc.colptr, seeds)
    if csc.weight is not None or seed_time is not None:
        keep = _allowed(csc, seg, pos, node_time, seed_time)
        seg, pos = seg[keep], pos[keep]
    n = torch.bincount(seg, minlength=seeds.numel())
    if replace and not last:
        cnt = _counts(n, k, True)
        seg, pos = _draw_with_replacement(csc, seg, pos, n, cnt, gen)
    elif k >= 0:
        cnt = _counts(n, k, False)
        if last:
            t = _edge_time(csc, pos, node_time)
            order = torch.argsort(-pos)  # ties: the later position first
            order = order[torch.sort(-t[order], stable=True).indices]
        elif csc.weight is not None:
            u = torch.rand(pos.numel(), generator=gen, dtype=torch.float64, device=pos.device)
            order = torch.argsort(-torch.log1p(-u) / csc.weight[pos])
        else:
            order = torch.argsort(torch.rand(pos.numel(), generator=gen, device=pos.device))
        order = order[torch.sort(seg[order], stable=True).indices]
        seg, pos = seg[order], pos[order]
        first = torch.cumsum(n, 0) - n
        rank = torch.arange(seg.numel(), device=seg.device) - first[seg]
        keep = rank < k
        seg, pos = seg[keep], pos[keep]
    else:
        cnt = n
    edge = csc.edge_ids(pos)
    return csc.row[pos].long(), edge, cnt


class TorchRelabeler:
    """First-seen local ids for one node type via sort-based dedup (works on any device)."""

    def __init__(self, num_nodes: int, disjoint: bool, device=None):
        self.num_nodes, self.disjoint = num_nodes, disjoint
        self._keys = torch.empty(0, dtype=torch.int64, device=device)
        self._nodes = torch.empty(0, dtype=torch.int64, device=device)
        self._batch = torch.empty(0, dtype=torch.int64, device=device) if disjoint else None

    @property
    def size(self) -> int:
        return self._nodes.numel()

    @property
    def nodes(self) -> Tensor:
        return self._nodes

    @property
    def batch(self) -> Optional[Tensor]:
        return self._batch

    def add(self, ids: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """Local index of each id (appending unseen ids in first-seen order); an id outside
        ``[0, num_nodes)`` is an IndexError naming it (nothing is relabelled), as in the numba relabeler."""
        outside = (ids < 0) | (ids >= self.num_nodes)
        if bool(outside.any()):
            at = int(outside.nonzero()[0])
            raise IndexError(f"relabel: id {int(ids[at])} at position {at} is outside [0, {self.num_nodes}) "
                             "(nothing was relabelled)")
        keys = ids
        if self.disjoint:
            assert batch is not None, "a disjoint relabeler needs the batch of each id"
            keys = batch * self.num_nodes + ids
        old = self._keys.numel()
        allk = torch.cat([self._keys, keys])
        uniq, inv = torch.unique(allk, return_inverse=True)
        idx = torch.arange(allk.numel(), device=allk.device)
        first = torch.full((uniq.numel(),), allk.numel(), dtype=torch.int64, device=allk.device)
        first.scatter_reduce_(0, inv, idx, reduce="amin")
        local = first.clone()
        is_new = first >= old
        new_first = torch.sort(first[is_new]).values
        local[is_new] = old + torch.searchsorted(new_first, first[is_new])
        self._keys = torch.cat([self._keys, allk[new_first]])
        self._nodes = torch.cat([self._nodes, ids[new_first - old]])
        if self._batch is not None and batch is not None:  # disjoint
            self._batch = torch.cat([self._batch, batch[new_first - old]])
        return local[inv[old:]]

    def close(self) -> None:
        """Nothing to release (kept for symmetry with the numba relabeler)."""
