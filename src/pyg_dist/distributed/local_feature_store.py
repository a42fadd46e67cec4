"""PyG's ``torch_geometric.distributed.local_feature_store.LocalFeatureStore`` over pyg_dist's feature store.

Two ways to build one, as in PyG: from a partition folder (``from_partition(root, pid)``: read-only, both
folder layouts), or empty (``LocalFeatureStore()``, ``from_data``, ``from_hetero_data``) and filled with
``put_global_id`` / ``put_tensor`` and PyG's settings (``node_feat_pb``, ``edge_feat_pb``, ``meta``,
``partition_idx``, ``num_partitions``, ``labels``). Rows are addressed by GLOBAL id: ``get_tensor(...,
index=ids)`` and ``get_tensor_from_global_id`` return the rows of those ids, from this store when it holds
them, else from their owner (over RPC); ``get_tensor`` without an index returns the tensor as put.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pyg_dist._types import HOMO_NODE
from pyg_dist.distributed import memory as mem
from pyg_dist.distributed.stores import PyGStore, book_property
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.store import feature_store as native_fs
from pyg_dist.store import lookup

_WHERE = "LocalFeatureStore"


def _optional(where: str, arg: str, value, rows: int) -> Optional[Tensor]:
    if value is not None and (not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != rows):
        raise InvalidArgumentError(where, arg, getattr(value, "shape", value), f"None or a tensor of {rows} rows "
                                   "(one per global id)")
    return value


class LocalFeatureStore(PyGStore, native_fs.LocalFeatureStore):  # type: ignore[misc]  # from_partition: PyG's pid
    """PyG's ``LocalFeatureStore``: opened from a partition folder, or built in memory.

    Attributes:
        labels: ``None`` or the label of every node of the (input) node type, indexed by global id; set
            it to have the loaders put ``labels[n_id]`` into the batch's ``y`` (PyG's behaviour).

    Example:
        >>> fs = LocalFeatureStore.from_partition("/tmp/parts", pid=0)                # doctest: +SKIP
        >>> fs.lookup_features(torch.tensor([3, 7])).wait()                           # doctest: +SKIP
        >>> import torch
        >>> fs = LocalFeatureStore.from_data(torch.tensor([4, 1]), x=torch.tensor([[4.0], [1.0]]))
        >>> fs.get_tensor_from_global_id(group_name=None, attr_name="x", index=torch.tensor([1])).tolist()
        [[1.0]]
    """

    _VIEW = ("partition_meta", "book", "partition", "_mmap", "_cols", "_cache", "_budget", "_reply_pool")
    labels: Optional[Tensor] = None
    _full_time: Dict[Any, Tensor] = {}  # a folder's node time of every node, per node type

    _memory: Optional[mem.FeaturePuts]

    def __init__(self, data=None, mmap: bool = False):
        if data is not None:  # opened from a folder (from_partition)
            super().__init__(data, mmap)
            self._full_time = dict(data.full_node_time)  # every node's, as PyG's
            return
        FeatureStore.__init__(self, tensor_attr_cls=native_fs.GlobalTensorAttr)
        self._memory = mem.FeaturePuts()

    def _load(self, pd) -> None:
        native_fs.LocalFeatureStore.__init__(self, pd, mmap=False)

    def _spec_alone(self):
        return mem.make_spec(_WHERE, self._memory, None)

    # ------------------------------------------------------------------ constructors (PyG's)
    @classmethod
    def from_data(cls, node_id: Tensor, x: Optional[Tensor] = None, y: Optional[Tensor] = None,
                  edge_id: Optional[Tensor] = None, edge_attr: Optional[Tensor] = None) -> "LocalFeatureStore":
        """A homogeneous store (PyG's signature): the global ids of this partition's node rows, their ``x``
        and ``y``, and the global ids and ``edge_attr`` of its edge rows."""
        return cls._filled(f"{cls.__name__}.from_data", {None: node_id}, {None: x}, {None: y},
                           {(None, None): edge_id} if edge_id is not None else None,
                           {(None, None): edge_attr} if edge_attr is not None else None)

    @classmethod
    def from_hetero_data(cls, node_id_dict: Dict[str, Tensor], x_dict: Optional[Dict[str, Tensor]] = None,
                         y_dict: Optional[Dict[str, Tensor]] = None, edge_id_dict: Optional[Dict[Any, Tensor]] = None,
                         edge_attr_dict: Optional[Dict[Any, Tensor]] = None) -> "LocalFeatureStore":
        """A heterogeneous store (PyG's signature): the dicts per node type and per edge type of
        :meth:`from_data`'s arguments."""
        where = f"{cls.__name__}.from_hetero_data"
        for arg, value in (("node_id_dict", node_id_dict), ("x_dict", x_dict), ("y_dict", y_dict),
                           ("edge_id_dict", edge_id_dict), ("edge_attr_dict", edge_attr_dict)):
            if (value is not None or arg == "node_id_dict") and not isinstance(value, dict):
                raise InvalidArgumentError(where, arg, type(value).__name__, "a dict per type")
        store = cls._filled(where, node_id_dict, x_dict or {}, y_dict or {}, edge_id_dict, edge_attr_dict)
        store.meta = {"is_hetero": True}
        return store

    @classmethod
    def _filled(cls, where, node_ids, xs, ys, edge_ids, edge_attrs) -> "LocalFeatureStore":
        store = cls()
        for arg, values, ids_arg, ids in (("x", xs, "node_id", node_ids), ("y", ys, "node_id", node_ids),
                                          ("edge_attr", edge_attrs, "edge_id", edge_ids)):
            for group in values or {}:
                if values[group] is not None and group not in (ids or {}):
                    raise InvalidArgumentError(where, ids_arg if group in (None, (None, None)) else f"{ids_arg}_dict",
                                               None if ids is None else sorted(map(str, ids)),
                                               f"global ids of {group!r}, which {arg} is given for")
        for group, gid in list(node_ids.items()) + list((edge_ids or {}).items()):
            kind = "node_id" if group is None or isinstance(group, str) else "edge_id"
            gid = mem.check_index(where, kind, gid, unique=True)
            store.put_global_id(gid, group_name=group)
            for name, values in (("x", xs), ("y", ys), ("edge_attr", edge_attrs)):
                value = _optional(where, name, (values or {}).get(group), gid.numel())
                if value is not None:
                    store.put_tensor(value, group_name=group, attr_name=name)
        return store

    # ------------------------------------------------------------------ PyG's settings
    node_feat_pb = book_property("node_feat_pb", False, "Owning partition of every node id (PyG's name in the "
                                 "feature store); settable on an in-memory store.")
    edge_feat_pb = book_property("edge_feat_pb", True, "Owning partition of every edge id; settable on an in-memory "
                                 "store.")

    # ------------------------------------------------------------------ global ids
    def put_global_id(self, global_id: Tensor, group_name) -> bool:
        """The global id of every row put (or to be put) for ``group_name`` (PyG's)."""
        where = f"{_WHERE}.put_global_id"
        puts = self._puts(where, "group_name")
        group = mem.check_group(where, group_name)
        puts.global_id[group] = mem.check_index(where, "global_id", global_id, unique=True)
        self._changed()
        return True

    def get_global_id(self, group_name=None, mask: Optional[str] = None, is_node: Optional[bool] = None):
        """Folders: the ids this partition owns (``mask``: where that boolean attribute is set). In memory: the
        ids put for ``group_name`` (``None`` when none were), as PyG."""
        if self._memory is None:
            return super().get_global_id(group_name, mask, is_node)
        group = mem.check_group(f"{_WHERE}.get_global_id", group_name)
        if group is None and is_node is False:
            group = (None, None)
        ids = self._memory.global_id.get(group)
        if ids is None or mask is None:
            return ids
        keep = self._memory.tensors.get((group, mask))
        if keep is None or keep.dtype != torch.bool or keep.shape != ids.shape:
            raise InvalidArgumentError(f"{_WHERE}.get_global_id", "mask", mask, f"a boolean attribute of {group!r} "
                                       "with one value per global id")
        return ids[keep]

    def remove_global_id(self, group_name) -> bool:
        """Removes the ids put for ``group_name`` (in memory)."""
        where = f"{_WHERE}.remove_global_id"
        found = self._puts(where, "group_name").global_id.pop(mem.check_group(where, group_name), None) is not None
        self._changed()
        return found

    # ------------------------------------------------------------------ PyG's own dictionaries
    @property
    def _global_id(self) -> Mapping[Any, Tensor]:
        """PyG's ``_global_id``, read-only: ``{group: global id of every row this store holds}``, keyed as PyG keys
        it (``None`` / ``(None, None)`` for a homogeneous graph's nodes / edges, else the node or edge type)."""
        if self._memory is not None:
            return MappingProxyType(dict(self._memory.global_id))
        return MappingProxyType({self._public(g): self.book.owned_ids(g, self.partition) for g in self._cols})

    @property
    def _feat(self) -> Mapping[Tuple[Any, str], Tensor]:
        """PyG's ``_feat``, read-only: ``{(group, attribute): rows}``, row ``i`` that of ``_global_id[group][i]``
        (the folder's attributes, node ``time`` and ``edge_time`` included, and those put for this job)."""
        if self._memory is not None:
            return MappingProxyType(dict(self._memory.tensors))
        return MappingProxyType({(self._public(g), name): rows for g, cols in self._cols.items()
                                 for name, rows in cols.items()})

    def _public(self, group):
        """PyG's name of a typed group (a homogeneous graph's are ``None`` and ``(None, None)``)."""
        if self.is_hetero:
            return group
        return None if isinstance(group, str) else (None, None)

    # ------------------------------------------------------------------ PyG FeatureStore interface
    def _tensor_key(self, where: str, attr: TensorAttr):
        if not isinstance(attr.attr_name, str):
            raise InvalidArgumentError(where, "attr_name", attr.attr_name, "a str")
        return mem.check_group(where, attr.group_name), attr.attr_name

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        where = f"{_WHERE}.put_tensor"
        if self._memory is None:  # a folder's store: a column for this job, in memory (native rules)
            return super()._put_tensor(tensor, attr)
        puts = self._puts(where, "tensor")
        key = self._tensor_key(where, attr)
        if attr.index is not None:
            raise InvalidArgumentError(where, "index", attr.index, "None (a whole tensor: rows align with the "
                                       "global ids put for the group)")
        if not isinstance(tensor, Tensor) or tensor.dim() == 0:
            raise InvalidArgumentError(where, "tensor", getattr(tensor, "shape", tensor),
                                       "a tensor with one row per id")
        puts.tensors[key] = tensor
        self._changed()
        return True

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        if self._memory is None:
            full = self._node_time(attr)
            if full is None:
                return super()._get_tensor(attr)
            if attr.index is None:
                return full  # node time of EVERY node, indexed by global id (PyG's)
            ids, _ = native_fs.check_ids(f"{_WHERE}.get_tensor", attr.index, full.size(0), attr.group_name)
            return full.index_select(0, ids)
        where = f"{_WHERE}.get_tensor"
        group, name = self._tensor_key(where, attr)
        value = self._memory.tensors.get((group, name))
        if value is None or attr.index is None:
            return value
        ids = attr.index
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise InvalidArgumentError(where, "index", getattr(ids, "shape", ids), "a 1-D integer tensor of global ids")
        have = self._memory.global_id.get(group)
        if have is not None and value.size(0) == have.numel():
            pos = _rows_of(have, ids.long())
            if bool((pos >= 0).all()):
                return value.index_select(0, pos)  # rows this store holds (owned or not)
        is_node = group is None or isinstance(group, str)
        return self.lookup_features_async(ids, is_node, group, name).wait()  # from their owners

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        where = f"{_WHERE}.remove_tensor"
        if self._memory is None:
            return super()._remove_tensor(attr)
        found = self._puts(where, "attr").tensors.pop(self._tensor_key(where, attr), None) is not None
        self._changed()
        return found

    def _get_tensor_size(self, attr: TensorAttr):
        """Folders: the GLOBAL size (all ids of the group); in memory: the size of the tensor put (PyG's)."""
        if self._memory is None:
            return super()._get_tensor_size(attr)
        value = self._memory.tensors.get(self._tensor_key(f"{_WHERE}.get_tensor_size", attr))
        return None if value is None else tuple(value.shape)

    def _node_time(self, attr: TensorAttr) -> Optional[Tensor]:
        """A folder's time of every node of ``attr``'s node type when ``attr`` names it, else ``None``."""
        if attr.attr_name != "time" or not self._full_time:
            return None
        group = attr.group_name
        if not self.is_hetero and group is None:
            group = HOMO_NODE
        return self._full_time.get(group) if isinstance(group, str) else None

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        """Every (group, attribute): those put, in put order; a folder's in the order of PyG's
        ``from_partition`` (per node type ``x`` then ``time``, per edge type ``edge_attr`` then ``edge_time``),
        followed by the attributes PyG's partitioner did not keep (``y``, masks, ...), by group and name."""
        if self._memory is None:
            attrs = super().get_all_tensor_attrs()
            rank = {"x": 0, "time": 1, "edge_attr": 0, "edge_time": 1}
            nodes = [a for a in attrs if not isinstance(a.group_name, tuple)]
            pyg = [a for a in nodes if a.attr_name in ("x", "time")]
            pyg += [a for a in attrs if isinstance(a.group_name, tuple) and a.attr_name in ("edge_attr", "edge_time")]
            pyg.sort(key=lambda a: (isinstance(a.group_name, tuple), _position(attrs, a.group_name),
                                    rank[a.attr_name]))
            return pyg + [a for a in attrs if a not in pyg]
        return [native_fs.GlobalTensorAttr(group, name) for group, name in self._memory.tensors]

    def __repr__(self) -> str:
        if self._memory is None:
            return super().__repr__()
        return (f"{_WHERE}(in memory, partition={self.partition_idx}/{self.num_partitions}, "
                f"tensors={len(self._memory.tensors)})")

    def has_edge_attr(self) -> bool:
        """Whether any edge group carries ``edge_attr``."""
        if self._memory is None:
            return super().has_edge_attr()
        return any(isinstance(g, tuple) and name == "edge_attr" for g, name in self._memory.tensors)

    def lookup_features(self, index, is_node_feat: bool = True, input_type=None,
                        attr_names=None, timeout: Optional[float] = None) -> lookup.LookupFuture:
        """PyG's signature: a future (``.wait()`` or ``await``) of the rows of global ids ``index``.

        Unlike PyG, remote failures reach the caller as :class:`~pyg_dist.errors.RemoteCallError`.
        """
        return self.lookup_features_async(index, is_node_feat, input_type, attr_names, timeout)

    def _carried(self) -> dict:  # spawned workers: re-open the folder, keep the user's labels
        return dict(super()._carried(), labels=self.labels)


def _position(attrs: List[TensorAttr], group) -> int:
    """Where ``group`` first appears among ``attrs`` (keeps the folder's order of types)."""
    return next(i for i, a in enumerate(attrs) if a.group_name == group)


def _rows_of(have: Tensor, want: Tensor) -> Tensor:
    """Position of each id of ``want`` among the distinct ids ``have`` (``-1`` where absent)."""
    if not want.numel():
        return torch.zeros(0, dtype=torch.int64)
    if not have.numel() or int(want.min()) < 0:
        return torch.full_like(want, -1)
    size = max(int(have.max()), int(want.max())) + 1
    lut = torch.full((size,), -1, dtype=torch.int64)
    lut[have] = torch.arange(have.numel())
    return lut[want]


__all__ = ["LocalFeatureStore"]
