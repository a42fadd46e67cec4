"""The partition book's routing kernels and the partitioner's kernels, numba or torch.

Each function runs the numba kernel (:mod:`pyg_dist.ops._numba_book`, :mod:`pyg_dist.ops._numba_csr`)
when :func:`pyg_dist.ops.backend.numba_available` says so, else its pure-torch twin
(:mod:`pyg_dist.ops._torch_book`, :mod:`pyg_dist.ops._torch_csr`) with the same results, order and
dtypes. That is the one switch: numba missing, or ``$PYG_DIST_BACKEND=torch``, selects torch here and
in the sampling kernels alike.

Example:
    >>> import numpy as np
    >>> count_by_range(np.array([0, 4, 3]), np.array([0, 3, 5])).tolist()
    [1, 2]
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import _torch_book, _torch_csr
from pyg_dist.ops.backend import numba_available


def rows_in_range(ids: np.ndarray, start: int, end: int, out: np.ndarray) -> bool:
    """Writes ``ids - start`` to ``out`` when every id lies in ``[start, end)`` and returns True; else
    returns False (stopping early; ``out`` then holds nothing useful).

    Args:
        ids: 1-D int64 array.
        start: First id of the range.
        end: One past the last id of the range.
        out: int64 array as long as ``ids``.
    """
    if numba_available():
        from pyg_dist.ops._numba_book import rows_in_range as kernel
        return bool(kernel(ids, start, end, out))
    return _torch_book.rows_in_range(ids, start, end, out)


def count_by_range(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """How many of ``ids`` each range ``[bounds[p], bounds[p + 1])`` holds (int64 array).

    Args:
        ids: 1-D int64 array of ids in ``[bounds[0], bounds[-1])``.
        bounds: Ascending int64 array of ``num_ranges + 1`` bounds.
    """
    if numba_available():
        from pyg_dist.ops._numba_book import count_by_range as kernel
        return kernel(ids, bounds)
    return _torch_book.count_by_range(ids, bounds)


def split_by_range(ids: np.ndarray, bounds: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of ``ids`` grouped by the range holding them (one stable pass): ``(order, rows, ptr)``.

    ``order[ptr[p]:ptr[p + 1]]`` are the positions of the ids in range ``p``, ascending; ``rows``
    (aligned with ``order``) is each id minus its range's start. All int64 arrays.

    Args:
        ids: 1-D int64 array of ids in ``[bounds[0], bounds[-1])``.
        bounds: Ascending int64 array of ``num_ranges + 1`` bounds.

    Example:
        >>> order, rows, ptr = split_by_range(np.array([4, 0, 3]), np.array([0, 3, 5]))
        >>> order.tolist(), rows.tolist(), ptr.tolist()
        ([1, 0, 2], [0, 1, 0], [0, 1, 3])
    """
    if numba_available():
        from pyg_dist.ops._numba_book import split_by_range as kernel
        return kernel(ids, bounds)
    return _torch_book.split_by_range(ids, bounds)


def split_by_slot(ids: np.ndarray, pos: np.ndarray, table: np.ndarray, lo: int
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions ``pos`` into ``ids`` split by a dense slot table (a cache's id -> row map), one pass.

    Returns ``(hit_pos, hit_slot, miss_pos)`` (int64, each in the order of ``pos``): positions whose id
    has a slot ``table[id - lo] >= 0``, those slots, and the other positions (ids outside the table too).

    Args:
        ids: 1-D int64 array.
        pos: 1-D int64 positions into ``ids``.
        table: 1-D int32 array of slots, ``-1`` where none.
        lo: The id of ``table[0]``.

    Example:
        >>> hit, slot, miss = split_by_slot(np.array([7, 5, 9]), np.array([2, 0, 1]),
        ...                                 np.array([3, -1, 0], dtype=np.int32), 5)
        >>> hit.tolist(), slot.tolist(), miss.tolist()
        ([0, 1], [0, 3], [2])
    """
    if numba_available():
        from pyg_dist.ops._numba_book import split_by_slot as kernel
        return kernel(ids, pos, table, lo)
    return _torch_book.split_by_slot(ids, pos, table, lo)


def symmetric_csr(src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """METIS' input: the undirected, self-loop-free, deduplicated CSR of the edges ``src -> dst``.

    Returns ``(xadj, adjncy)`` as int64 arrays; each row's neighbours ascend. The numba kernel is
    linear time and returns an input that is already symmetric and simple as it is.

    Example:
        >>> import torch
        >>> xadj, adj = symmetric_csr(torch.tensor([0, 1, 1]), torch.tensor([1, 0, 2]), 3)
        >>> xadj.tolist(), adj.tolist()
        ([0, 1, 3, 4], [1, 0, 2, 1])
    """
    if numba_available():
        from pyg_dist.ops._numba_csr import symmetric_csr as kernel
        return kernel(src, dst, num_nodes)
    return _torch_csr.symmetric_csr(src, dst, num_nodes)


def relabel_csc(edge_index: Tensor, inv_src: Tensor, inv_dst: Tensor, num_dst: int,
                order_in: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """CSC order under new ids: ``(perm, row, col, colptr)`` as int64 tensors.

    ``perm[new] = old`` edge id (edges sorted by new destination ``inv_dst[dst]``), ``row`` / ``col``
    the new source / destination of each edge in that order, ``colptr`` the ``[num_dst + 1]`` pointer.
    Edges with the same destination keep the order of ``order_in`` (a permutation of the edges;
    default: input order), so a pre-sort by edge time gives time-sorted neighbour lists.

    Raises:
        InvalidArgumentError: ``order_in`` does not hold one entry per edge.

    Example:
        >>> import torch
        >>> perm, row, col, ptr = relabel_csc(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1, 0]),
        ...                                   torch.tensor([1, 0]), 2)
        >>> perm.tolist(), row.tolist(), col.tolist(), ptr.tolist()
        ([0, 1], [1, 0], [0, 1], [0, 1, 2])
    """
    if order_in is not None and tuple(order_in.shape) != (edge_index.size(1),):
        raise InvalidArgumentError("relabel_csc", "order_in", tuple(order_in.shape),
                                   f"a 1-D permutation of the {edge_index.size(1)} edges")
    if numba_available():
        from pyg_dist.ops._numba_csr import relabel_csc as kernel
        return kernel(edge_index, inv_src, inv_dst, num_dst, order_in)
    return _torch_csr.relabel_csc(edge_index, inv_src, inv_dst, num_dst, order_in)


__all__ = ["rows_in_range", "count_by_range", "split_by_range", "split_by_slot", "symmetric_csr", "relabel_csc"]
