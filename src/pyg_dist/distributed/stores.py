"""What PyG's two stores share in the migration layer: their common attributes and the pair check.

Both stores ARE pyg_dist's stores (subclasses: every pyg_dist loader and sampler takes them) with PyG's
public attributes: ``meta`` (META.json as a dict), ``num_partitions``, ``partition_idx`` and the partition
books. A store opened from a folder derives them from the folder (read-only); a store built empty
(``LocalGraphStore()``) takes them by assignment, as in PyG (:mod:`pyg_dist.distributed.memory`).
"""
from __future__ import annotations

import functools
import json
from typing import Any, Dict, Optional, Union

import torch
from torch import Tensor

from pyg_dist.distributed.memory import InMemory, pair_stores
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import meta as M
from pyg_dist.store import feature_store as native_fs
from pyg_dist.store import graph_store as native_gs
from pyg_dist.store.folder import resolve_pid


def _partition_books(store, edges: bool) -> Union[Tensor, Dict[Any, Tensor]]:
    """Owner of every node (or edge) id: one tensor (homogeneous) or a dict per type, as PyG's."""
    types = store.edge_types if edges else store.node_types
    nums = store.partition_meta.num_edges if edges else store.partition_meta.num_nodes
    out = {t: store.book.owner(t, torch.arange(nums[t])) for t in types}
    return out if store.is_hetero else out[types[0]]


def book_property(name: str, edges: bool, doc: str) -> property:
    """PyG's settable partition-book attribute ``name`` (``node_pb``, ``edge_feat_pb``, ...): reads the owner of
    every node (or edge, ``edges``) id; assigning it sets the in-memory store's book."""
    return property(lambda self: self._book(edges=edges), lambda self, value: self._set(name, value), doc=doc)


class PyGStore(InMemory):
    """PyG's attributes of both stores, for either kind (see the module docstring)."""

    partition_meta: M.PartitionMeta  # set by the pyg_dist store this mixes into
    partition: int

    @classmethod
    def from_partition(  # PyG's name, pid (``part`` kept as an alias)
            cls, root, pid: Optional[int] = None, *, part: Optional[int] = None, ctx=None, mmap: bool = True,
            verify: Any = "once"):
        """Opens partition ``pid`` of the folder ``root`` (PyG's name; ``part`` is pyg_dist's alias, and with
        neither the partition of ``ctx``)."""
        pid = resolve_pid(f"{cls.__name__}.from_partition", pid, part)
        return super().from_partition(root, pid, ctx=ctx, mmap=mmap, verify=verify)  # type: ignore[misc]

    @functools.cached_property
    def _folder_meta(self) -> Dict[str, Any]:
        return json.loads(M.meta_path(self.partition_meta.root).read_text())

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        """PyG's META as a dict (``num_parts``, ``is_hetero``, ...): the folder's, or the one assigned."""
        if self._memory is None:
            return self._folder_meta
        return self._memory.settings.meta

    @meta.setter
    def meta(self, value) -> None:
        self._set("meta", value)

    @property
    def num_partitions(self) -> int:
        """Number of partitions (set it on a store built in memory; PyG's default 1)."""
        if self._memory is None or "_pd" in self.__dict__:  # a folder's, or the partition built in memory
            return self.partition_meta.num_parts
        s = self._memory.settings
        if s.num_partitions is not None:
            return s.num_partitions
        return int((s.meta or {}).get("num_parts") or 1)

    @num_partitions.setter
    def num_partitions(self, value) -> None:
        self._set("num_partitions", value)

    @property
    def partition_idx(self) -> int:
        """This store's partition (set it on a store built in memory; PyG's default 0)."""
        if self._memory is None or "_pd" in self.__dict__:
            return self.partition
        value = self._memory.settings.partition_idx
        return 0 if value is None else value

    @partition_idx.setter
    def partition_idx(self, value) -> None:
        self._set("partition_idx", value)

    def _book(self, edges: bool):
        """The owner of every id as PyG has it: derived from the folder, or the book assigned."""
        if self._memory is None:
            name = "_edge_book_cache" if edges else "_node_book_cache"
            if name not in self.__dict__:
                self.__dict__[name] = _partition_books(self, edges)
            return self.__dict__[name]
        settings = self._memory.settings
        return settings.edge_pb if edges else settings.node_pb


def check_stores(where: str, data) -> tuple:
    """``(feature_store, graph_store)`` from PyG's ``data`` pair (either order), or a typed error. Stores
    filled in memory get their partition built here, from both together."""
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise InvalidArgumentError(where, "data", type(data).__name__, "a (LocalFeatureStore, LocalGraphStore) pair")
    fs, gs = data
    if isinstance(fs, native_gs.LocalGraphStore) and isinstance(gs, native_fs.LocalFeatureStore):
        fs, gs = gs, fs
    if not isinstance(fs, native_fs.LocalFeatureStore) or not isinstance(gs, native_gs.LocalGraphStore):
        raise InvalidArgumentError(where, "data", (type(fs).__name__, type(gs).__name__),
                                   "a (LocalFeatureStore, LocalGraphStore) pair")
    if isinstance(fs, PyGStore) and isinstance(gs, PyGStore):
        pair_stores(where, fs, gs)
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


__all__ = ["PyGStore", "book_property", "check_stores", "time_attr_of", "resolve_pid"]
