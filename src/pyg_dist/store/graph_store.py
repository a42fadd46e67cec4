"""``LocalGraphStore``: the in-edges (CSC by destination) one partition samples from.

Per edge type it holds the sampling kernels' :class:`~pyg_dist.ops.CSC` of the partition's
:class:`~pyg_dist.format.GraphPart` (global source ids, global edge ids, ``colptr`` over the destination range
it covers: the owned range, or every node in hybrid and PyG-written folders). Opened in memory (``mmap=False``)
the CSC is compacted (:meth:`~pyg_dist.ops.CSC.compact`): source ids as int32 where every id of the type fits,
and no edge-id array when the partition's edge ids are one run (pyg_dist folders number a partition's edges
in CSC order): on the reference graph 4 bytes per edge instead of the file's 16 (int64 source and edge id).
Every id the store hands out is int64 again. Memory-mapped, the file's tensors are used as they are (one copy
in the page cache, shared between processes). Nothing per node of the whole graph is kept for pyg_dist folders
(the book is a range table), except the full node time of temporal graphs, which samplers need to filter halo
neighbours.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import EdgeLayout

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.cache.file import read_topology_cache
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError, PyGDistError
from pyg_dist.format import meta as M
from pyg_dist.format.data import GraphPart, PartitionData
from pyg_dist.format.schema import TopologyCacheEntry
from pyg_dist.format.validate import check_ids
from pyg_dist.ops import CSC, normalize_time
from pyg_dist.store.folder import PartitionStoreMixin

_WHERE = "LocalGraphStore"
_NO_IDS = torch.empty(0, dtype=torch.int64)


def _sampling_csc(root, part: int, et, g: GraphPart, compact: bool) -> CSC:
    weight = None if g.weight is None else g.weight.to(torch.float64)
    csc = CSC(g.colptr, g.row, g.edge_id, weight, normalize_time(g.edge_time))
    try:
        csc = csc.validate(f"{_WHERE}[{et!r}]")
    except InvalidArgumentError as e:
        raise PartitionFormatError(M.graph_path(root, part), str(e)) from None
    return csc.compact() if compact else csc


def _topology_cache(data: PartitionData, mmap: bool) -> Dict[Tuple[str, str, str], Tuple[CSC, Tensor]]:
    """``part_<i>/topology_cache.pt`` (in-edges of cached remote destinations), per edge type as a CSC over
    every destination id (only cached ones have edges) and a mask of the cached ids; ``{}`` without one."""
    from pyg_dist._types import str_edge_type
    path = M.topology_cache_path(data.meta.root, data.part)
    if not (data.meta.is_native and path.is_file()):
        return {}
    info, types = read_topology_cache(path, mmap)
    if info.get("fingerprint") != data.meta.extra.get("fingerprint") or info.get("part") != data.part:
        raise PartitionFormatError(path, "topology cache of another partitioning or partition")
    out = {}
    for key, raw in types.items():
        et = str_edge_type(key)
        entry = TopologyCacheEntry.from_dict(raw, path, key)
        n = data.meta.num_nodes[et[2]]
        check_ids(path, f"entry {key!r}, ids", entry.ids, n)  # before they index below
        check_ids(path, f"entry {key!r}, row", entry.row, data.meta.num_nodes[et[0]])
        check_ids(path, f"entry {key!r}, edge_id", entry.edge_id, data.meta.num_edges[et])
        if entry.count.numel() != entry.ids.numel() or int(entry.count.sum()) != entry.row.numel():
            raise PartitionFormatError(path, f"entry {key!r}: counts of {entry.count.numel()} ids sum to "
                                             f"{int(entry.count.sum())}, not to its {entry.row.numel()} rows")
        colptr = torch.zeros(n + 1, dtype=torch.int64)
        colptr[entry.ids + 1] = entry.count
        mask = torch.zeros(n, dtype=torch.bool)
        mask[entry.ids] = True
        try:
            csc = CSC(torch.cumsum(colptr, 0), entry.row, entry.edge_id).validate(f"topology cache {key}")
        except InvalidArgumentError as err:
            raise PartitionFormatError(path, str(err)) from None
        out[et] = (csc, mask)
    return out


class LocalGraphStore(PartitionStoreMixin, GraphStore):
    """PyG ``GraphStore`` over one partition; every id it returns is a GLOBAL id.

    Example:
        >>> gs = LocalGraphStore.from_partition("/tmp/demo-2", 1)             # doctest: +SKIP
        >>> start, end = gs.dst_range()                                       # doctest: +SKIP
        >>> csc = gs.local_csc()  # in-edges of v: row[colptr[v - start]:colptr[v - start + 1]]  # doctest: +SKIP
        >>> row, colptr = gs.get_edge_index(None, "csc")  # PyG's layout, over all destinations  # doctest: +SKIP
    """

    def __init__(self, data: PartitionData, mmap: bool = False):
        super().__init__()
        self._attach(data, mmap)
        self._csc = {e: _sampling_csc(data.meta.root, data.part, e, g, not mmap) for e, g in data.graph.items()}
        # the ids live in the CSC only (see graph_part); the file's int64 tensors are freed once data goes
        self._parts: Dict[Tuple[str, str, str], GraphPart] = {
            e: replace(g, row=_NO_IDS, edge_id=_NO_IDS) for e, g in data.graph.items()}
        self._node_time: Dict[str, Tensor] = dict(data.full_node_time)
        self._topo = _topology_cache(data, mmap)

    # ------------------------------------------------------------------ description
    @property
    def is_sorted(self) -> bool:
        """Always ``True``: edges are grouped by destination (PyG's attribute)."""
        return True

    def num_nodes(self, node_type: Optional[str] = None) -> int:
        """Nodes of ``node_type`` in the whole graph."""
        return self.partition_meta.num_nodes[self._ntype("num_nodes", node_type)]

    def num_edges(self, edge_type=None) -> int:
        """Edges of ``edge_type`` in the whole graph."""
        return self.partition_meta.num_edges[self._etype("num_edges", edge_type)]

    def get_global_id(self, node_type: Optional[str] = None) -> Tensor:
        """Global ids of the nodes of ``node_type`` this partition owns."""
        return self.book.owned_ids(self._ntype("get_global_id", node_type), self.partition)

    def get_partition_ids_from_nids(self, ids: Tensor, node_type: Optional[str] = None) -> Tensor:
        """Owning partition of each global node id (PyG's name)."""
        return self.book.owner(self._ntype("get_partition_ids_from_nids", node_type), ids)

    def get_partition_ids_from_eids(self, eids: Tensor, edge_type=None) -> Tensor:
        """Owning partition of each global edge id (PyG's name)."""
        return self.book.owner(self._etype("get_partition_ids_from_eids", edge_type), eids)

    # ------------------------------------------------------------------ what samplers read
    def local_csc(self, edge_type=None) -> CSC:
        """The sampling kernels' CSC: ``colptr`` indexed by ``dst - dst_range()[0]``, global ``row`` and
        ``edge_id``, float64 ``weight`` (from ``edge_weight``) and ``edge_time`` when present."""
        return self._csc[self._etype("local_csc", edge_type)]

    def dst_range(self, edge_type=None) -> Tuple[int, int]:
        """``(start, end)``: the destinations whose in-edges this partition holds."""
        g = self._parts[self._etype("dst_range", edge_type)]
        return g.dst_start, g.dst_end

    def graph_part(self, edge_type=None) -> GraphPart:
        """The partition's :class:`~pyg_dist.format.GraphPart` of ``edge_type``, its ``row`` and ``edge_id`` int64
        (the compact CSC's ids widened on each call when the store was opened in memory: keep the result)."""
        et = self._etype("graph_part", edge_type)
        csc = self._csc[et]
        return replace(self._parts[et], row=csc.row.long(), edge_id=csc.edge_ids())

    def topology_cache(self) -> Dict[Tuple[str, str, str], Tuple[CSC, Tensor]]:
        """Per edge type, the in-edges of cached remote destinations (a CSC indexed by global destination id)
        and the mask of those ids; empty without ``topology_cache.pt`` (``--cache-topology``)."""
        return self._topo

    def node_time(self, node_type: Optional[str] = None) -> Optional[Tensor]:
        """Time of EVERY node of ``node_type`` (index = global id), or ``None`` without node time."""
        return self._node_time.get(self._ntype("node_time", node_type))

    # ------------------------------------------------------------------ PyG GraphStore interface
    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        """One CSC ``EdgeAttr`` per edge type (homogeneous: ``edge_type=None``, as in PyG)."""
        out = []
        for e in self.edge_types:
            size = (self.partition_meta.num_nodes[e[0]], self.partition_meta.num_nodes[e[2]])
            out.append(EdgeAttr(e if self.is_hetero else None, EdgeLayout.CSC, size=size))
        return out

    def _get_edge_index(self, edge_attr: EdgeAttr) -> Tuple[Tensor, Tensor]:
        """``csc``: ``(row, colptr)`` with ``colptr`` over ALL destinations (built on request);
        ``coo``: ``(row, col)``. Ids are global; edges are those of this partition."""
        et = self._etype("get_edge_index", edge_attr.edge_type)
        g = self.graph_part(et)
        layout = EdgeLayout(edge_attr.layout)
        if layout == EdgeLayout.CSC:
            n_dst = self.partition_meta.num_nodes[et[2]]
            colptr = torch.zeros(n_dst + 1, dtype=torch.int64)
            colptr[g.dst_start:g.dst_end + 1] = g.colptr
            colptr[g.dst_end + 1:] = g.colptr[-1]
            return g.row, colptr
        if layout == EdgeLayout.COO:
            counts = torch.diff(g.colptr)
            col = torch.repeat_interleave(torch.arange(g.dst_start, g.dst_end), counts)
            return g.row, col
        raise InvalidArgumentError(f"{_WHERE}.get_edge_index", "layout", layout.value,
                                   "'csc' or 'coo' (edges are stored by destination)")

    def get_edge_id(self, *args, **kwargs) -> Tensor:
        """Global edge ids, aligned with :meth:`get_edge_index` (either layout)."""
        attr = self._edge_attr_cls.cast(*args, **kwargs)
        return self._csc[self._etype("get_edge_id", attr.edge_type)].edge_ids()

    def _put_edge_index(self, edge_index, edge_attr) -> bool:
        raise PyGDistError(f"{_WHERE} is read-only: its edges come from the partition folder")

    def _remove_edge_index(self, edge_attr) -> bool:
        raise PyGDistError(f"{_WHERE} is read-only: its edges come from the partition folder")

    def __repr__(self) -> str:
        return (f"{_WHERE}(root='{self.partition_meta.root}', partition={self.partition}/{self.num_partitions}, "
                f"edge_types={len(self._parts)}, mmap={self._mmap})")

    # ------------------------------------------------------------------ type names
    def _ntype(self, method: str, node_type) -> str:
        if node_type is None and not self.is_hetero:
            return HOMO_NODE
        if not isinstance(node_type, str) or node_type not in self.partition_meta.num_nodes:
            raise InvalidArgumentError(f"{_WHERE}.{method}", "node_type", node_type,
                                       f"one of {self.node_types}" + ("" if self.is_hetero else " or None"))
        return node_type

    def _etype(self, method: str, edge_type) -> Tuple[str, str, str]:
        key = tuple(edge_type) if isinstance(edge_type, (list, tuple)) else edge_type
        if not self.is_hetero and (key is None or key == (None, None)):
            return HOMO_EDGE
        if not isinstance(key, tuple) or not all(isinstance(s, str) for s in key) or key not in self._parts:
            raise InvalidArgumentError(f"{_WHERE}.{method}", "edge_type", edge_type,
                                       f"one of {self.edge_types}" + ("" if self.is_hetero else " or None"))
        return key
