"""Batch-local relabelling: global ids -> local indices in first-seen order, one node type at a time.

A relabeler is the node list of one node type of one batch: seeds first, then every new neighbour in
the order it is first seen. ``add`` dedupes against everything already in the batch (per subgraph when
``disjoint``) and returns local indices. It is single-batch state: make one per batch (the numba one
borrows its dense scratch map from a pool and gives it back in ``close``).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError
from pyg_dist.ops._torch_kernels import TorchRelabeler
from pyg_dist.ops.backend import _load_numba, resolve_backend

_MIN_CAP = 1024
_INT32_MAX = 2**31 - 1
#: Types with more nodes than this reset their dense map's touched entries after each batch instead of
#: moving its base (a base would wrap, and refill the whole map, every few batches).
_RESET_ABOVE = 2**29


class DenseScratch:
    """A dense int32 map of one node type that batch after batch reuses without clearing it.

    A batch writes ``base + local index`` for each id it sees; entries below ``base`` (an earlier
    batch's, or ``-1`` = never seen) read as unseen. :meth:`retire` moves ``base`` past the batch's
    nodes, and refills the map with ``-1`` only when ``base`` would leave int32 (every ~2**31 / nodes
    per batch batches). Types of more than ``2**29`` nodes keep ``base`` at 0 and reset the touched
    entries instead.
    """

    __slots__ = ("map", "base")

    def __init__(self, num_nodes: int):
        self.map = np.full(max(int(num_nodes), 1), -1, np.int32)
        self.base = 0

    def retire(self, kernels, nodes: np.ndarray) -> None:
        """Forgets a batch whose node list was ``nodes``."""
        size = self.map.shape[0]
        if size > _RESET_ABOVE:
            kernels.reset_dense(self.map, nodes, nodes.shape[0])
            return
        self.base += nodes.shape[0]
        if self.base + size > _INT32_MAX:
            self.map.fill(-1)
            self.base = 0


class NumbaRelabeler:
    """Relabeler over numpy buffers and numba kernels (CPU).

    Non-disjoint batches use a :class:`DenseScratch` of ``num_nodes`` entries (taken from ``pool`` when
    one is free, retired and given back in :meth:`close`); disjoint batches hash ``(batch, id)``.
    """

    def __init__(self, num_nodes: int, disjoint: bool, pool: Optional[List[DenseScratch]] = None,
                 capacity: int = _MIN_CAP):
        self.num_nodes, self.disjoint = int(num_nodes), disjoint
        self._k = _load_numba()[2]
        self._n = 0
        capacity = max(int(capacity), _MIN_CAP)
        self._nodes = np.empty(capacity, np.int64)
        self._batch = np.empty(capacity, np.int64) if disjoint else None
        self._pool, self._map = pool, None
        if disjoint:
            self._bits = 12
            self._keys = np.full(1 << self._bits, -1, np.int64)
            self._vals = np.empty(1 << self._bits, np.int64)
        else:
            try:
                self._map = pool.pop() if pool else None
            except IndexError:  # another thread took the last one
                self._map = None
            if self._map is None:
                self._map = DenseScratch(self.num_nodes)

    @property
    def size(self) -> int:
        return self._n

    @property
    def nodes(self) -> Tensor:
        return torch.from_numpy(self._nodes[:self._n])

    @property
    def batch(self) -> Optional[Tensor]:
        return None if self._batch is None else torch.from_numpy(self._batch[:self._n])

    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        if need > self._nodes.shape[0]:
            cap = max(need, 2 * self._nodes.shape[0])
            self._nodes = np.resize(self._nodes, cap)
            if self._batch is not None:
                self._batch = np.resize(self._batch, cap)
        if self._batch is not None and 2 * need > self._keys.shape[0]:  # disjoint: grow the hash table
            bits = max(self._bits + 1, int(np.ceil(np.log2(2 * need))))
            keys, vals = np.full(1 << bits, -1, np.int64), np.empty(1 << bits, np.int64)
            scratch_n, scratch_b = np.empty(self._n, np.int64), np.empty(self._n, np.int64)
            self._k.relabel_hash(self._nodes[:self._n], self._batch[:self._n], self.num_nodes, keys, vals,
                                 bits, scratch_n, scratch_b, 0, np.empty(self._n, np.int64))
            self._keys, self._vals, self._bits = keys, vals, bits

    def add_numpy(self, ids: np.ndarray, batch: Optional[np.ndarray] = None,
                  out: Optional[np.ndarray] = None) -> np.ndarray:
        """Like :meth:`add` on int64 numpy arrays; writes the local indices to ``out`` if given."""
        self._reserve(ids.shape[0])
        out = np.empty(ids.shape[0], np.int64) if out is None else out
        if self.disjoint:
            n = self._k.relabel_hash(ids, batch, self.num_nodes, self._keys, self._vals, self._bits,
                                     self._nodes, self._batch, self._n, out)
        else:
            scratch = self._map
            if scratch is None:
                raise PyGDistError("relabel: this relabeler was closed (its map went back to the pool); "
                                   "make a new one per batch")
            n = self._k.relabel_dense(ids, scratch.map, scratch.base, self._nodes, self._n, out)
        if n < 0:  # the kernel stopped before indexing with a bad id
            raise IndexError(f"relabel: id {int(ids[-1 - n])} at position {-1 - n} is outside [0, {self.num_nodes}) "
                             "(nothing was relabelled)")
        self._n = n
        return out

    def add(self, ids: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """Local index of every id, appending unseen ids (``batch``: subgraph of each id, if disjoint)."""
        b = None if batch is None else batch.to(torch.int64).contiguous().numpy()
        return torch.from_numpy(self.add_numpy(ids.to(torch.int64).contiguous().numpy(), b))

    def close(self) -> None:
        """Retires the dense map (this batch's entries read as unseen from now on); returns it to the pool."""
        if self._map is not None:
            self._map.retire(self._k, self._nodes[:self._n])
            if self._pool is not None:
                self._pool.append(self._map)
            self._map = None


def make_relabeler(num_nodes: int, disjoint: bool = False, backend: str = "auto", device=None,
                   pool: Optional[List[DenseScratch]] = None, capacity: int = _MIN_CAP):
    """A relabeler for one node type of one batch.

    Args:
        num_nodes: Number of nodes of the type (global ids are in ``[0, num_nodes)``).
        disjoint: Dedupe per subgraph: ``add(ids, batch)`` keys on ``(batch, id)``.
        backend: ``'auto'``, ``'numba'`` or ``'torch'``.
        device: Device of the ids (non-CPU devices use the torch backend).
        pool: Optional list of reusable dense maps (numba backend, non-disjoint).
        capacity: Expected number of nodes (a hint: the node list grows as needed).

    Example:
        >>> r = make_relabeler(10)
        >>> r.add(torch.tensor([4, 2])).tolist(), r.add(torch.tensor([2, 7, 7])).tolist()
        ([0, 1], [1, 2, 2])
        >>> r.nodes.tolist()
        [4, 2, 7]
        >>> r.close()
    """
    if resolve_backend(backend, device, "make_relabeler") == "numba":
        return NumbaRelabeler(num_nodes, disjoint, pool, capacity)
    return TorchRelabeler(num_nodes, disjoint, device)
