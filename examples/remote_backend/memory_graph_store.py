"""``MemoryGraphStore``: the smallest useful PyG ``GraphStore``, holding edge indices in memory.

PyG ships ``torch_geometric.testing.MyGraphStore``, but that is a helper of PyG's own test-suite (its
package also holds pytest decorators), not an API to build on; this is the same idea in 60 lines, keyed
on ``(edge_type, layout)`` so a lookup finds the edges whatever ``size`` / ``is_sorted`` it names.

Example:
    >>> gs = MemoryGraphStore()
    >>> gs.put_edge_index((row, col), edge_type=None, layout="coo", size=(n, n))  # doctest: +SKIP
    >>> row, col = gs.get_edge_index(edge_type=None, layout="coo")                 # doctest: +SKIP
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore

from pyg_dist.errors import InvalidArgumentError

_WHERE = "MemoryGraphStore"


class MemoryGraphStore(GraphStore):
    """Edge indices per ``(edge_type, layout)``, in memory (``edge_type=None`` for a homogeneous graph)."""

    def __init__(self) -> None:
        super().__init__()
        self._edges: Dict[Tuple, Tuple[EdgeAttr, Tuple[Tensor, Tensor]]] = {}

    @staticmethod
    def _key(attr: EdgeAttr) -> Tuple:
        edge_type = tuple(attr.edge_type) if isinstance(attr.edge_type, list) else attr.edge_type
        return edge_type, attr.layout.value

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        where = f"{_WHERE}.put_edge_index"
        if isinstance(edge_index, Tensor) and edge_index.dim() == 2 and edge_index.size(0) == 2:
            edge_index = (edge_index[0], edge_index[1])
        if not (isinstance(edge_index, (tuple, list)) and len(edge_index) == 2
                and all(isinstance(t, Tensor) and t.dim() == 1 and not t.is_floating_point() for t in edge_index)):
            raise InvalidArgumentError(where, "edge_index", type(edge_index).__name__,
                                       "a [2, E] integer tensor or a pair of 1-D integer tensors")
        if edge_attr.layout.value == "coo" and edge_index[0].numel() != edge_index[1].numel():
            raise InvalidArgumentError(where, "edge_index", [t.numel() for t in edge_index],
                                       "two index tensors of one length (COO)")
        size = edge_attr.size
        if size is not None and (len(size) != 2 or any(int(s) < 0 for s in size)):
            raise InvalidArgumentError(where, "size", size, "None or (num_src_nodes, num_dst_nodes)")
        pair = (edge_index[0].to(torch.int64), edge_index[1].to(torch.int64))
        self._edges[self._key(edge_attr)] = (edge_attr, pair)
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Optional[Tuple[Tensor, Tensor]]:
        entry = self._edges.get(self._key(edge_attr))
        return None if entry is None else entry[1]

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return self._edges.pop(self._key(edge_attr), None) is not None

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        return [attr for attr, _ in self._edges.values()]

    def __repr__(self) -> str:
        return f"{_WHERE}(edge_attrs={[(a.edge_type, a.layout.value, a.size) for a in self.get_all_edge_attrs()]})"
