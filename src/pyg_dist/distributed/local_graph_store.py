"""PyG's ``torch_geometric.distributed.local_graph_store.LocalGraphStore`` over pyg_dist's graph store.

Two ways to build one, as in PyG: from a partition folder (``from_partition(root, pid)``: read-only, both
folder layouts), or empty (``LocalGraphStore()``, ``from_data``, ``from_hetero_data``) and filled with
``put_edge_index`` / ``put_edge_id`` and PyG's settings (``node_pb``, ``edge_pb``, ``meta``,
``partition_idx``, ``num_partitions``). Edge indices hold GLOBAL node ids; reads return what was put. A
folder's store reads as PyG's ``from_partition`` puts it: per edge type one COO ``[2, E]`` tensor sorted by
destination (built on first read), ``get_edge_id`` aligned, and PyG's ``_edge_index`` / ``_edge_attr`` /
``_edge_id`` dicts.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore
from torch_geometric.data.graph_store import EdgeLayout

from pyg_dist.distributed import memory as mem
from pyg_dist.distributed.stores import PyGStore, book_property
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.store import graph_store as native_gs

_WHERE = "LocalGraphStore"


def _check_num_nodes(where: str, arg: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(where, arg, value, "a non-negative int (nodes in the whole graph)")
    return value


class _Lazy(Mapping):
    """A read-only dict whose values are built when read (a folder's ``[2, E]`` edge indices)."""

    def __init__(self, keys: List[Any], value: Callable[[Any], Any]):
        self._keys, self._value = keys, value

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return self._value(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _sorted(edge_index, edge_id, is_sorted: bool):
    """PyG's order: by destination, then source (unless ``is_sorted``)."""
    if is_sorted:
        return edge_index, edge_id
    from torch_geometric.utils import sort_edge_index
    return sort_edge_index(edge_index, edge_id, sort_by_row=False)


class LocalGraphStore(PyGStore, native_gs.LocalGraphStore):  # type: ignore[misc]  # from_partition: PyG's pid
    """PyG's ``LocalGraphStore``: opened from a partition folder, or built in memory.

    Example:
        >>> gs = LocalGraphStore.from_partition("/tmp/parts", pid=0)                  # doctest: +SKIP
        >>> gs.meta["num_parts"], gs.partition_idx, gs.node_pb[:5]                     # doctest: +SKIP
        >>> import torch
        >>> gs = LocalGraphStore.from_data(torch.tensor([7, 8]), torch.tensor([[0, 2], [1, 1]]), num_nodes=3)
        >>> gs.node_pb, gs.num_partitions, gs.partition_idx = torch.tensor([0, 0, 1]), 2, 0
        >>> gs.get_edge_index(edge_type=None, layout="coo").tolist()
        [[0, 2], [1, 1]]
    """

    _VIEW = ("partition_meta", "book", "partition", "_mmap", "_parts", "_csc", "_node_time", "_topo")

    _memory: Optional[mem.GraphPuts]

    def __init__(self, data=None, mmap: bool = False):
        if data is not None:  # opened from a folder (from_partition)
            super().__init__(data, mmap)
            return
        GraphStore.__init__(self)
        self._memory = mem.GraphPuts()

    def _load(self, pd) -> None:
        native_gs.LocalGraphStore.__init__(self, pd, mmap=False)

    def _spec_alone(self):
        return mem.make_spec(_WHERE, None, self._memory)

    # ------------------------------------------------------------------ constructors (PyG's)
    @classmethod
    def from_data(cls, edge_id: Optional[Tensor], edge_index: Tensor, num_nodes: int,
                  is_sorted: bool = False) -> "LocalGraphStore":
        """A homogeneous store of this partition's edges (PyG's signature).

        Args:
            edge_id: Global id of every edge (``None``: ids unique across partitions are made up).
            edge_index: ``[2, E]`` GLOBAL node ids of the edges this partition holds.
            num_nodes: Nodes in the whole graph.
            is_sorted: ``edge_index`` is sorted by destination already (else it is sorted, as PyG does).
        """
        where = f"{cls.__name__}.from_data"
        return cls._filled(where, {None: edge_id}, {None: edge_index}, None, num_nodes, is_sorted)

    @classmethod
    def from_hetero_data(cls, edge_id_dict: Dict[Any, Optional[Tensor]], edge_index_dict: Dict[Any, Tensor],
                         num_nodes_dict: Dict[str, int], is_sorted: bool = False) -> "LocalGraphStore":
        """A heterogeneous store (PyG's signature): per edge type the global edge ids (``None`` as in
        :meth:`from_data`) and ``[2, E]`` global node ids, and the node count of every node type."""
        where = f"{cls.__name__}.from_hetero_data"
        for arg, value in (("edge_id_dict", edge_id_dict), ("edge_index_dict", edge_index_dict),
                           ("num_nodes_dict", num_nodes_dict)):
            if not isinstance(value, dict):
                raise InvalidArgumentError(where, arg, type(value).__name__, "a dict per type")
        return cls._filled(where, edge_id_dict, edge_index_dict, num_nodes_dict, None, is_sorted)

    @classmethod
    def _filled(cls, where, ids, indices, nodes_dict, num_nodes, is_sorted) -> "LocalGraphStore":
        if not isinstance(is_sorted, bool):
            raise InvalidArgumentError(where, "is_sorted", is_sorted, "a bool")
        store = cls()
        store.meta = {"is_hetero": nodes_dict is not None}
        for et, edge_index in indices.items():
            et = mem.check_edge_type(where, et)
            if nodes_dict is None:
                n = _check_num_nodes(where, "num_nodes", num_nodes)
                size = (n, n)
            elif et[0] not in nodes_dict or et[2] not in nodes_dict:
                raise InvalidArgumentError(where, "num_nodes_dict", sorted(nodes_dict), f"the types of {et!r}")
            else:
                size = (_check_num_nodes(where, "num_nodes_dict", nodes_dict[et[0]]),
                        _check_num_nodes(where, "num_nodes_dict", nodes_dict[et[2]]))
            mem.check_edges(where, "coo", edge_index)
            if not isinstance(edge_index, Tensor):
                raise InvalidArgumentError(where, "edge_index", type(edge_index).__name__, "a [2, E] tensor")
            eid = ids.get(et) if nodes_dict is not None else ids[None]
            if eid is not None:
                eid = mem.check_index(where, "edge_id", eid)
                if eid.numel() != edge_index.size(1):
                    raise InvalidArgumentError(where, "edge_id", eid.numel(), f"one id per edge of {et!r} "
                                               f"({edge_index.size(1)})")
            edge_index, eid = _sorted(edge_index, eid, is_sorted)
            attr = dict(edge_type=et, layout="coo", size=size, is_sorted=True)
            store.put_edge_index(edge_index, **attr)
            if eid is not None:
                store.put_edge_id(eid, **attr)
        return store

    # ------------------------------------------------------------------ PyG's settings
    node_pb = book_property("node_pb", False, "Owning partition of every node id (per node type in hetero graphs); "
                            "settable on an in-memory store.")
    edge_pb = book_property("edge_pb", True, "Owning partition of every edge id (per edge type in hetero graphs); "
                            "settable on an in-memory store.")

    @property  # type: ignore[override]  # settable, as PyG's attribute
    def is_sorted(self) -> Optional[bool]:
        """Folders: ``True`` (edges grouped by destination); in memory: as set (PyG's default ``None``)."""
        return True if self._memory is None else self._memory.settings.is_sorted

    @is_sorted.setter
    def is_sorted(self, value) -> None:
        self._set("is_sorted", value)

    # ------------------------------------------------------------------ PyG's dictionaries
    def _folder_coo(self, edge_type) -> Tuple[Tensor, Tensor]:
        """``([2, E] global ids, edge ids)`` of one edge type of a folder, as PyG's ``from_partition`` puts them
        (by destination; built on first ask, then kept)."""
        et = self._etype("get_edge_index", edge_type)
        cache = self.__dict__.setdefault("_coo_cache", {})
        if et not in cache:
            row, col = native_gs.LocalGraphStore._get_edge_index(self, EdgeAttr(et, EdgeLayout.COO))
            cache[et] = (torch.stack((row, col)), native_gs.LocalGraphStore.get_edge_id(self, et, "coo"))
        return cache[et]

    def _folder_attrs(self) -> Dict[Tuple[Any, str], EdgeAttr]:
        """PyG's ``(edge_type, 'coo')`` key and ``EdgeAttr`` of every edge type of a folder."""
        out = {}
        for et in self.edge_types:
            public = et if self.is_hetero else None
            size = (self.partition_meta.num_nodes[et[0]], self.partition_meta.num_nodes[et[2]])
            out[(public, "coo")] = EdgeAttr(public, EdgeLayout.COO, is_sorted=True, size=size)
        return out

    @property
    def _edge_index(self) -> Mapping[Tuple[Any, str], Any]:
        """PyG's dict ``(edge_type, layout) -> edge index`` (read-only here). A folder's: ``[2, E]`` global ids
        per ``(edge_type, 'coo')``, built when read; in memory: what was put."""
        if self._memory is None:
            return _Lazy(list(self._folder_attrs()), lambda key: self._folder_coo(key[0])[0])
        return {key: value for key, (_, value) in self._memory.edge_index.items()}

    @property
    def _edge_attr(self) -> Mapping[Tuple[Any, str], EdgeAttr]:
        """PyG's dict ``(edge_type, layout) -> EdgeAttr`` (read-only here)."""
        if self._memory is None:
            return self._folder_attrs()
        return {key: attr for key, (attr, _) in self._memory.edge_index.items()}

    @property
    def _edge_id(self) -> Mapping[Tuple[Any, str], Tensor]:
        """PyG's dict ``(edge_type, layout) -> global edge ids``, aligned with :attr:`_edge_index` (read-only)."""
        if self._memory is None:
            return _Lazy(list(self._folder_attrs()), lambda key: self._folder_coo(key[0])[1])
        return dict(self._memory.edge_id)

    # ------------------------------------------------------------------ PyG GraphStore interface
    def _key(self, where: str, attr: EdgeAttr):
        return mem.check_edge_type(where, attr.edge_type), attr.layout.value

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        where = f"{_WHERE}.put_edge_index"
        puts = self._puts(where, "edge_index")
        key = self._key(where, edge_attr)
        value, num = mem.check_edges(where, key[1], edge_index)
        have = puts.edge_id.get(key)
        if have is not None and have.numel() != num:
            raise InvalidArgumentError(where, "edge_index", f"{num} edges", f"{have.numel()} edges, as the edge_id "
                                       "put for it")
        puts.edge_index[key] = (edge_attr, value)
        self._changed()
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr):
        if self._memory is None:
            if EdgeLayout(edge_attr.layout) == EdgeLayout.COO:
                return self._folder_coo(edge_attr.edge_type)[0]
            return super()._get_edge_index(edge_attr)
        entry = self._memory.edge_index.get(self._key(f"{_WHERE}.get_edge_index", edge_attr))
        return None if entry is None else entry[1]

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        puts = self._puts(f"{_WHERE}.remove_edge_index", "edge_attr")
        found = puts.edge_index.pop(self._key(f"{_WHERE}.remove_edge_index", edge_attr), None) is not None
        self._changed()
        return found

    def put_edge_id(self, edge_id: Tensor, *args, **kwargs) -> bool:
        """Global id of every edge put under the same edge type and layout (PyG's)."""
        where = f"{_WHERE}.put_edge_id"
        puts = self._puts(where, "edge_id")
        key = self._key(where, self._edge_attr_cls.cast(*args, **kwargs))
        edge_id = mem.check_index(where, "edge_id", edge_id)
        entry = puts.edge_index.get(key)
        if entry is not None and mem.check_edges(where, key[1], entry[1])[1] != edge_id.numel():
            raise InvalidArgumentError(where, "edge_id", f"{edge_id.numel()} ids", "one id per edge put with "
                                       f"put_edge_index for {key}")
        puts.edge_id[key] = edge_id
        self._changed()
        return True

    def get_edge_id(self, *args, **kwargs) -> Optional[Tensor]:  # type: ignore[override]  # PyG's: None if not put
        """Global edge ids aligned with :meth:`get_edge_index` (``None`` in memory when none were put)."""
        if self._memory is None:
            attr = self._edge_attr_cls.cast(*args, **kwargs)
            if EdgeLayout(attr.layout) == EdgeLayout.COO:
                return self._folder_coo(attr.edge_type)[1]
            return super().get_edge_id(*args, **kwargs)
        return self._memory.edge_id.get(self._key(f"{_WHERE}.get_edge_id", self._edge_attr_cls.cast(*args, **kwargs)))

    def remove_edge_id(self, *args, **kwargs) -> bool:
        """Removes the ids put for an edge type and layout (in memory)."""
        where = f"{_WHERE}.remove_edge_id"
        puts = self._puts(where, "edge_attr")
        found = puts.edge_id.pop(self._key(where, self._edge_attr_cls.cast(*args, **kwargs)), None) is not None
        self._changed()
        return found

    def __repr__(self) -> str:
        if self._memory is None:
            return super().__repr__()
        return (f"{_WHERE}(in memory, partition={self.partition_idx}/{self.num_partitions}, "
                f"edge_index={len(self._memory.edge_index)})")

    def get_all_edge_attrs(self) -> List[EdgeAttr]:
        """One ``EdgeAttr`` per edge type (folders: COO, sorted by destination, as PyG's ``from_partition``
        puts them) or per put (in memory, in put order)."""
        if self._memory is None:
            return list(self._folder_attrs().values())
        return [attr for attr, _ in self._memory.edge_index.values()]


__all__ = ["LocalGraphStore"]
