"""Numba kernels of the partitioner: METIS' symmetric CSR and the relabelled CSC order, linear time.

Reached only through :mod:`pyg_dist.ops.graph_kernels`, which picks these or the torch twins in
:mod:`pyg_dist.ops._torch_csr` (same results, same order, same dtypes). Serial (``parallel=False``) on
purpose: no threading layer is started, so a process that partitioned a graph can still fork
DataLoader workers safely (design.md §7).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from numba import njit
from torch import Tensor


@njit(cache=True)
def _counting_order(key, num_keys, order_in):  # pragma: no cover - compiled
    """Stable counting sort of positions ``order_in`` by ``key[order_in]``; returns (order, ptr)."""
    ptr = np.zeros(num_keys + 1, dtype=np.int64)
    for i in range(order_in.shape[0]):
        ptr[key[order_in[i]] + 1] += 1
    for k in range(num_keys):
        ptr[k + 1] += ptr[k]
    cur = ptr[:-1].copy()
    out = np.empty(order_in.shape[0], dtype=np.int64)
    for i in range(order_in.shape[0]):
        e = order_in[i]
        k = key[e]
        out[cur[k]] = e
        cur[k] += 1
    return out, ptr


@njit(cache=True)
def _is_sorted_pairs(src, dst):  # pragma: no cover - compiled
    for e in range(1, src.shape[0]):
        if src[e] < src[e - 1] or (src[e] == src[e - 1] and dst[e] < dst[e - 1]):
            return False
    return True


@njit(cache=True)
def _transpose_sorted(src, dst, num_nodes):  # pragma: no cover - compiled
    """In-lists of edges sorted by (source, destination): ``(ptr, adj)``, sources ascending per row.

    One histogram and one scatter pass: reading in sorted order makes the scatter stable.
    """
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for e in range(dst.shape[0]):
        ptr[dst[e] + 1] += 1
    for k in range(num_nodes):
        ptr[k + 1] += ptr[k]
    cur = ptr[:-1].copy()
    adj = np.empty(dst.shape[0], dtype=np.int64)
    for e in range(dst.shape[0]):
        k = dst[e]
        adj[cur[k]] = src[e]
        cur[k] += 1
    return ptr, adj


@njit(cache=True)
def _is_simple(ptr, adj):  # pragma: no cover - compiled
    """Every row strictly ascending (no duplicates) and without its own id (no self loop)."""
    for v in range(ptr.shape[0] - 1):
        for k in range(ptr[v], ptr[v + 1]):
            if adj[k] == v or (k > ptr[v] and adj[k] <= adj[k - 1]):
                return False
    return True


@njit(cache=True)
def _merge_rows(out_ptr, out_adj, in_ptr, in_adj, n, ptr, adj, write):  # pragma: no cover - compiled
    """Per row: merge two ascending lists, dropping duplicates and self loops (count or write)."""
    w = 0
    for v in range(n):
        i, i_end, j, j_end = out_ptr[v], out_ptr[v + 1], in_ptr[v], in_ptr[v + 1]
        last = -1
        while i < i_end or j < j_end:
            if j >= j_end or (i < i_end and out_adj[i] <= in_adj[j]):
                x = out_adj[i]
                i += 1
            else:
                x = in_adj[j]
                j += 1
            if x != last and x != v:
                if write:
                    adj[w] = x
                w += 1
                last = x
        ptr[v + 1] = w
    return w


def symmetric_csr(src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """See :func:`pyg_dist.ops.graph_kernels.symmetric_csr`.

    Linear time: edges are put in (source, destination) order by two stable counting sorts, and the
    in-lists by one more by destination; input already in that order needs only one histogram and
    scatter pass for the in-lists. Each row then merges its two ascending lists, unless the in-lists
    equal the out-lists of a graph without loops or duplicates (already symmetric, as most PyG graphs
    are): then the input is METIS' graph as it is, and the merges and their copy are skipped.
    """
    s, d = src.long().numpy(), dst.long().numpy()
    if _is_sorted_pairs(s, d):
        out_adj = d
        in_ptr, in_adj = _transpose_sorted(s, d, num_nodes)
    else:
        by_dst, _ = _counting_order(d, num_nodes, np.arange(s.shape[0], dtype=np.int64))
        by_src, _ = _counting_order(s, num_nodes, by_dst)
        del by_dst
        out_adj = d[by_src]
        in_order, in_ptr = _counting_order(d, num_nodes, by_src)  # stable: sources ascending per row
        del by_src
        in_adj = s[in_order]
        del in_order
    out_ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=num_nodes), out=out_ptr[1:])
    if np.array_equal(out_ptr, in_ptr) and np.array_equal(out_adj, in_adj) and _is_simple(out_ptr, out_adj):
        return out_ptr, out_adj  # already symmetric and simple (most PyG graphs): nothing to merge
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    total = _merge_rows(out_ptr, out_adj, in_ptr, in_adj, num_nodes, ptr, ptr[:0], False)
    adj = np.empty(total, dtype=np.int64)  # exact size: no copy while METIS runs
    _merge_rows(out_ptr, out_adj, in_ptr, in_adj, num_nodes, ptr, adj, True)
    return ptr, adj


@njit(cache=True)
def _relabel_csc(src, dst, inv_src, inv_dst, order_in, num_dst):  # pragma: no cover - compiled
    """One stable counting pass by new destination; returns (perm, new row, new col, colptr).

    Only ``perm`` is scattered; ``row`` is gathered and ``col`` filled sequentially afterwards, which
    is markedly faster than scattering three arrays on large graphs.
    """
    m = src.shape[0]
    ptr = np.zeros(num_dst + 1, dtype=np.int64)
    buf = np.empty(m, dtype=np.int64)  # new destination per edge, later reused for rows
    for e in range(m):
        d = inv_dst[dst[e]]
        buf[e] = d
        ptr[d + 1] += 1
    for k in range(num_dst):
        ptr[k + 1] += ptr[k]
    cur = ptr[:-1].copy()
    perm = np.empty(m, dtype=np.int64)
    for i in range(m):
        e = order_in[i] if order_in.shape[0] else i
        d = buf[e]
        perm[cur[d]] = e
        cur[d] += 1
    for k in range(m):
        buf[k] = inv_src[src[perm[k]]]
    col = np.empty(m, dtype=np.int64)
    for v in range(num_dst):
        for k in range(ptr[v], ptr[v + 1]):
            col[k] = v
    return perm, buf, col, ptr


def relabel_csc(edge_index: Tensor, inv_src: Tensor, inv_dst: Tensor, num_dst: int,
                order_in: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """See :func:`pyg_dist.ops.graph_kernels.relabel_csc` (one linear counting pass here)."""
    ei = edge_index.long()
    oi = np.empty(0, dtype=np.int64) if order_in is None else order_in.numpy()
    perm, row, col, ptr = _relabel_csc(ei[0].numpy(), ei[1].numpy(), inv_src.numpy(), inv_dst.numpy(), oi, num_dst)
    return torch.from_numpy(perm), torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(ptr)
