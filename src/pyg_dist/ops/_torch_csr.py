"""Pure-torch twins of the partitioner's numba kernels (:mod:`pyg_dist.ops._numba_csr`).

Same arguments, same results, order and dtypes; used when numba is missing or switched off
(``$PYG_DIST_BACKEND=torch``). Sorting makes them ``O(m log m)`` instead of linear: slower on very
large graphs, never different.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

#: Largest node count whose (source, destination) pairs fit one int64 key ``src * n + dst``.
MAX_KEYED_NODES = 3_037_000_499


def _unique_pairs(a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
    """Distinct pairs ``(a, b)`` in lexicographic order (two stable sorts; no key arithmetic)."""
    order = torch.sort(b, stable=True).indices
    order = order.index_select(0, torch.sort(a.index_select(0, order), stable=True).indices)
    a, b = a.index_select(0, order), b.index_select(0, order)
    new = torch.ones(a.numel(), dtype=torch.bool)
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[new], b[new]


def symmetric_csr(src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """See :func:`pyg_dist.ops.graph_kernels.symmetric_csr` (here: drop loops, add the reverses, sort
    and deduplicate the pairs, count the rows)."""
    s, d = src.long(), dst.long()
    keep = s != d
    s, d = s[keep], d[keep]
    a, b = torch.cat([s, d]), torch.cat([d, s])
    if num_nodes <= MAX_KEYED_NODES:
        n = max(num_nodes, 1)
        key = torch.unique(a * n + b)  # sorted
        row, adj = key // n, key % n
    else:
        row, adj = _unique_pairs(a, b)
    ptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=ptr[1:])
    return ptr.numpy(), adj.numpy()


def relabel_csc(edge_index: Tensor, inv_src: Tensor, inv_dst: Tensor, num_dst: int,
                order_in: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """See :func:`pyg_dist.ops.graph_kernels.relabel_csc` (here: one stable sort by new destination)."""
    ei = edge_index.long()
    new_dst = inv_dst.long().index_select(0, ei[1])
    if order_in is None:
        perm = torch.sort(new_dst, stable=True).indices
    else:
        order_in = order_in.long()
        perm = order_in.index_select(0, torch.sort(new_dst.index_select(0, order_in), stable=True).indices)
    row = inv_src.long().index_select(0, ei[0].index_select(0, perm))
    col = new_dst.index_select(0, perm)
    colptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(new_dst, minlength=num_dst), 0, out=colptr[1:])
    return perm, row, col, colptr
