"""PyG's ``LocalGraphStore`` / ``LocalFeatureStore`` API over pyg_dist's stores.

They ARE pyg_dist's stores (subclasses: every pyg_dist loader and sampler takes them) with the public
attributes PyG's classes had: ``meta`` (META.json as a dict), ``num_partitions``, ``partition_idx``,
``node_pb`` / ``edge_pb`` and ``node_feat_pb`` / ``edge_feat_pb`` (owner of every id, materialised on
first use), ``labels`` (a tensor the user may set; loaders then put ``labels[n_id]`` in ``y``), and
``lookup_features`` returning a future as in PyG. Both folder layouts load: pyg_dist's (contiguous
ids) and PyG's (ids as in the input graph).
"""
from __future__ import annotations

import functools
import json
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import meta as M
from pyg_dist.store import feature_store as native_fs
from pyg_dist.store import graph_store as native_gs
from pyg_dist.store import lookup


def _partition_books(store, edges: bool) -> Union[Tensor, Dict[Any, Tensor]]:
    """Owner of every node (or edge) id: one tensor (homogeneous) or a dict per type, as PyG's."""
    types = store.edge_types if edges else store.node_types
    nums = store.partition_meta.num_edges if edges else store.partition_meta.num_nodes
    out = {t: store.book.owner(t, torch.arange(nums[t])) for t in types}
    return out if store.is_hetero else out[types[0]]


class _PyGStoreMixin:
    """The PyG attributes both stores share (derived from the folder, never stored twice)."""

    partition_meta: M.PartitionMeta  # set by the pyg_dist store this mixes into

    @functools.cached_property
    def meta(self) -> Dict[str, Any]:
        """The folder's META.json as a dict (PyG's keys: ``num_parts``, ``is_hetero``, ...)."""
        return json.loads(M.meta_path(self.partition_meta.root).read_text())

    @functools.cached_property
    def _node_pb(self):
        return _partition_books(self, edges=False)

    @functools.cached_property
    def _edge_pb(self):
        return _partition_books(self, edges=True)


class LocalGraphStore(_PyGStoreMixin, native_gs.LocalGraphStore):
    """PyG's ``LocalGraphStore``: ``LocalGraphStore.from_partition(root, pid)``.

    Example:
        >>> gs = LocalGraphStore.from_partition("/tmp/parts", 0)            # doctest: +SKIP
        >>> gs.meta["num_parts"], gs.partition_idx, gs.node_pb[:5]           # doctest: +SKIP
    """

    @property
    def node_pb(self) -> Union[Tensor, Dict[str, Tensor]]:
        """Owning partition of every node id (per node type in hetero graphs)."""
        return self._node_pb

    @property
    def edge_pb(self) -> Union[Tensor, Dict[Any, Tensor]]:
        """Owning partition of every edge id (per edge type in hetero graphs)."""
        return self._edge_pb


class LocalFeatureStore(_PyGStoreMixin, native_fs.LocalFeatureStore):
    """PyG's ``LocalFeatureStore``: ``LocalFeatureStore.from_partition(root, pid)``.

    Attributes:
        labels: ``None`` or the label of every node of the (input) node type, indexed by global id; set
            it to have the loaders put ``labels[n_id]`` into the batch's ``y`` (PyG's behaviour). Not
            needed when the folder stores ``y``: the loaders fetch it like any attribute.

    Example:
        >>> fs = LocalFeatureStore.from_partition("/tmp/parts", 0)          # doctest: +SKIP
        >>> fs.labels = torch.load("label.pt")                              # doctest: +SKIP
        >>> fs.lookup_features(torch.tensor([3, 7])).wait()                  # doctest: +SKIP
    """

    labels: Optional[Tensor] = None

    @property
    def node_feat_pb(self) -> Union[Tensor, Dict[str, Tensor]]:
        """Owning partition of every node id (PyG's name in the feature store)."""
        return self._node_pb

    @property
    def edge_feat_pb(self) -> Union[Tensor, Dict[Any, Tensor]]:
        """Owning partition of every edge id."""
        return self._edge_pb

    def lookup_features(self, index, is_node_feat: bool = True, input_type=None,
                        attr_names=None, timeout: Optional[float] = None) -> lookup.LookupFuture:
        """PyG's signature: a future (``.wait()`` or ``await``) of the rows of global ids ``index``.

        Unlike PyG, remote failures reach the caller as :class:`~pyg_dist.errors.RemoteCallError`.
        """
        return self.lookup_features_async(index, is_node_feat, input_type, attr_names, timeout)

    def put_global_id(self, global_id, group_name) -> bool:
        """Not supported: global ids come from the partition folder."""
        raise InvalidArgumentError("LocalFeatureStore.put_global_id", "group_name", group_name,
                                   "nothing: the store is read-only (ids come from the partition folder)")

    def _carried(self) -> dict:  # spawned workers: re-open the folder, keep the user's labels
        return dict(super()._carried(), labels=self.labels)


def check_stores(where: str, data) -> tuple:
    """``(feature_store, graph_store)`` from PyG's ``data`` pair (either order), or a typed error."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise InvalidArgumentError(where, "data", type(data).__name__, "a (LocalFeatureStore, LocalGraphStore) pair")
    fs, gs = data
    if isinstance(fs, native_gs.LocalGraphStore) and isinstance(gs, native_fs.LocalFeatureStore):
        fs, gs = gs, fs
    if not isinstance(fs, native_fs.LocalFeatureStore) or not isinstance(gs, native_gs.LocalGraphStore):
        raise InvalidArgumentError(where, "data", (type(fs).__name__, type(gs).__name__),
                                   "a (LocalFeatureStore, LocalGraphStore) pair")
    if (fs.partition_meta.root, fs.partition) != (gs.partition_meta.root, gs.partition):
        raise InvalidArgumentError(where, "data", f"feature store of partition {fs.partition}, graph store of "
                                   f"partition {gs.partition}", "both stores of the same partition and folder")
    return fs, gs


def time_attr_of(gs, time_attr: Optional[str]) -> Optional[str]:
    """PyG's ``time_attr`` in pyg_dist's terms: ``"time"`` means edge time when only edges carry time."""
    meta = gs.partition_meta
    if time_attr == "time" and not meta.node_time_types and meta.edge_time_types:
        return "edge_time"
    return time_attr


__all__ = ["LocalGraphStore", "LocalFeatureStore", "check_stores", "time_attr_of"]
