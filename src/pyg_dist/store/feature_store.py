"""``LocalFeatureStore``: node and edge attributes of one partition, answering for ANY global id.

Rows this partition owns come from memory (memory-mapped by default, so a trainer and its sampler
workers share one copy through the page cache); rows other partitions own come from their stores
over pyg_dist's RPC (:mod:`pyg_dist.store.lookup`). Attributes per group: every node attribute of the
folder (``x``, ``y``, the masks, ...) plus ``time``; every edge attribute (``edge_attr``,
``edge_weight``, ...) plus ``edge_time``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr
from torch_geometric.data.feature_store import _FieldStatus

from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.cache.rows import FeatureCache
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format import meta as M
from pyg_dist.format.book import PartitionBook
from pyg_dist.format.data import PartitionData
from pyg_dist.store import lookup, serving
from pyg_dist.store.buffers import gather_rows
from pyg_dist.store.folder import PartitionStoreMixin
from pyg_dist.store.limits import ByteBudget
from pyg_dist.store.quant import RowCodes
from pyg_dist.store.routing import owned_rows

_WHERE = "LocalFeatureStore"
Group = Union[str, Tuple[str, str, str]]
#: Attribute each kind of group is asked for when ``attr_names`` is not given.
DEFAULT_NODE_ATTR, DEFAULT_EDGE_ATTR = "x", "edge_attr"


class GlobalTensorAttr(TensorAttr):
    """A :class:`TensorAttr` whose ``index`` defaults to ``None`` (= this partition's whole block)."""

    def __init__(self, group_name=_FieldStatus.UNSET, attr_name=_FieldStatus.UNSET, index=None):
        super().__init__(group_name, attr_name, index)


def check_ids(where: str, ids: Any, num: int, group) -> Tuple[Tensor, Optional[Tuple[int, int]]]:
    """``ids`` as a contiguous 1-D int64 tensor of ids in ``[0, num)`` and their ``(min, max)`` (None if
    empty), or InvalidArgumentError."""
    if not isinstance(ids, Tensor):
        try:
            ids = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            raise InvalidArgumentError(where, "ids", ids, "a 1-D integer tensor of global ids") from None
    if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise InvalidArgumentError(where, "ids", ids, "a 1-D integer tensor of global ids")
    ids = ids.to(device="cpu", dtype=torch.int64).contiguous()  # stores live in CPU memory
    if not ids.numel():
        return ids, None
    arr = ids.numpy()  # single-threaded numpy: no OpenMP region for an 8-byte-per-id pass
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= num:
        raise InvalidArgumentError(where, "ids", f"ids in [{lo}, {hi}]", f"global ids of {group!r} in [0, {num})")
    return ids, (lo, hi)


class LocalFeatureStore(PartitionStoreMixin, FeatureStore):
    """PyG ``FeatureStore`` over one partition; indices are GLOBAL ids of the partitioned graph.

    Build it with :meth:`from_partition` (or :func:`pyg_dist.store.load_stores` for both stores at
    once). Every process that answers for its partition serves it with
    :func:`~pyg_dist.sampler.dist_neighbor.serve_partition` before ``init_rpc`` (``dist_session`` does).

    Example:
        >>> fs = LocalFeatureStore.from_partition("/tmp/demo-2", 0)           # doctest: +SKIP
        >>> serve_partition(None, fs)                                          # doctest: +SKIP
        >>> with rpc_session(ctx):                                             # doctest: +SKIP
        ...     x = fs.lookup_features(torch.tensor([5, 1999, 7]))             # any mix of partitions
        ...     y = fs.get_tensor(None, "y", torch.tensor([1999]))             # PyG interface
    """

    def __init__(self, data: PartitionData, mmap: bool = False):
        super().__init__(tensor_attr_cls=GlobalTensorAttr)
        self._attach(data, mmap)
        cols: Dict[Group, Dict[str, Tensor]] = {t: {} for t in data.meta.node_types}
        cols.update({e: {} for e in data.meta.edge_types})
        for t, nf in data.node_feats.items():
            cols[t].update(nf.feats)
            if nf.time is not None:
                cols[t]["time"] = nf.time
        for e, ef in data.edge_feats.items():
            cols[e].update(ef.feats)
            if ef.edge_time is not None:
                cols[e]["edge_time"] = ef.edge_time
        self._cols = cols
        self._added: Dict[Tuple[Group, str], Tensor] = {}  # columns put for this job (in memory)
        self._cache: Optional[FeatureCache] = None
        self._budget = ByteBudget()  # reply bytes this store serves at once (one serving store per process)
        self._reply_pool = serving.reply_pool()  # ... and their buffers, recycled once sent
        self._row_codes = RowCodes()  # ... and the int8 codes of its columns, encoded on first use
        path = M.feature_cache_path(data.meta.root, data.part)
        if data.meta.is_native and path.is_file():  # written by the partitioner: no RPC at start-up
            self._load_folder_cache(path, mmap)

    # ------------------------------------------------------------------ description
    def columns(self) -> Mapping[Group, Mapping[str, Tensor]]:
        """This partition's own columns, ``{node type or edge type: {attribute: rows}}`` (not copies)."""
        return self._cols

    def attr_names(self, group_name=None, is_node: Optional[bool] = None) -> List[str]:
        """The attributes stored for a group (``None`` = the homogeneous node type)."""
        return sorted(self._cols[self._group("attr_names", group_name, is_node)])

    def has_edge_attr(self) -> bool:
        """Whether any edge type carries ``edge_attr``."""
        return any(DEFAULT_EDGE_ATTR in self._cols[e] for e in self.edge_types)

    def get_global_id(self, group_name=None, mask: Optional[str] = None, is_node: Optional[bool] = None) -> Tensor:
        """Global ids this partition owns (row ``i`` of every local tensor is ``get_global_id()[i]``).

        Args:
            group_name: Node type, edge type, or ``None`` for the homogeneous node type.
            mask: Name of a boolean attribute (e.g. ``"train_mask"``): only owned ids where it is set.
            is_node: With ``group_name=None``, ``False`` selects the homogeneous edge type.
        """
        group = self._group("get_global_id", group_name, is_node)
        ids = self.book.owned_ids(group, self.partition)
        if mask is None:
            return ids
        col = self._column("get_global_id", group, mask)
        if col.dtype != torch.bool or col.dim() != 1:
            raise InvalidArgumentError(f"{_WHERE}.get_global_id", "mask", mask, "the name of a 1-D boolean attribute")
        return ids[col]

    def num_items(self, group_name=None, is_node: Optional[bool] = None) -> int:
        """Number of nodes / edges of the group in the whole graph."""
        return self.book.num_items(self._group("num_items", group_name, is_node))

    # ------------------------------------------------------------------ lookups
    def lookup_features(self, ids, is_node_feat: bool = True, input_type=None,
                        attr_names: Union[None, str, Sequence[str]] = None, timeout: Optional[float] = None):
        """Rows of global ``ids`` (local and remote, any mix), in the requested order.

        Args:
            ids: 1-D integer global ids of ``input_type`` (repeats allowed).
            is_node_feat: Node (``True``) or edge (``False``) attributes.
            input_type: Node or edge type; ``None`` in a homogeneous graph.
            attr_names: ``None`` (``"x"`` for nodes, ``"edge_attr"`` for edges) or one name: returns a
                tensor; a list of names: returns ``{name: tensor}``.
            timeout: Seconds per remote call (default: ``init_rpc``'s ``call_timeout``).

        Raises:
            InvalidArgumentError: unknown type or attribute, ids that are not global ids of the type.
            RemoteCallError / RpcTimeoutError: a remote partition failed or did not answer.
            NotInitializedError: remote ids but no RPC world in this process.

        Example:
            >>> fs.lookup_features(torch.tensor([3, 0]), attr_names=["x", "y"])  # doctest: +SKIP
            {'x': tensor([[...], [...]]), 'y': tensor([1, 4])}
        """
        return self.lookup_features_async(ids, is_node_feat, input_type, attr_names, timeout).wait()

    def lookup_features_async(self, ids, is_node_feat: bool = True, input_type=None,
                              attr_names: Union[None, str, Sequence[str]] = None,
                              timeout: Optional[float] = None) -> lookup.LookupFuture:
        """Like :meth:`lookup_features`, but returns at once: ``await`` the result or ``.wait()``."""
        where = f"{_WHERE}.lookup_features"
        if not isinstance(is_node_feat, bool):
            raise InvalidArgumentError(where, "is_node_feat", is_node_feat, "a bool")
        group = self._group("lookup_features", input_type, is_node_feat, arg="input_type")
        single = attr_names is None or isinstance(attr_names, str)
        if attr_names is None:
            attr_names = DEFAULT_NODE_ATTR if is_node_feat else DEFAULT_EDGE_ATTR
        names = self._names(where, group, [attr_names] if single else attr_names)
        timeout = lookup.check_timeout(where, timeout)
        rows = self._owned_rows(group, ids)
        if rows is None:
            query = lookup.FeatureQuery(group, names, *check_ids(where, ids, self.book.num_items(group), group))
            rows = owned_rows(self.book, self.partition, group, query.ids, query.id_range)
        if rows is not None:  # all local (the common case of small batches): no plan, no future to wait on
            out = {name: gather_rows(self._cols[group][name], rows) for name in names}
            return lookup.LookupFuture.completed(out[names[0]] if single else out)
        finish = (lambda outs: outs[0][names[0]]) if single else (lambda outs: outs[0])
        return lookup.start_lookup(self.book, self.partition, self._serve_column, [query], finish, timeout,
                                   self._cache)

    def _owned_rows(self, group, ids) -> Optional[Tensor]:
        """Fast path: rows of a clean id tensor (1-D int64, contiguous, CPU) this partition owns entirely
        (one pass, which also proves the ids valid), else None (the checked path decides)."""
        if isinstance(ids, Tensor) and ids.dtype == torch.int64 and ids.dim() == 1 and ids.numel() \
                and ids.device.type == "cpu" and ids.is_contiguous() and isinstance(self.book, PartitionBook):
            return self.book.rows_if_owned(group, self.partition, ids)
        return None

    def lookup_many_async(self, ids: Mapping[Any, Any], attr_names: Mapping[Any, Sequence[str]],
                          timeout: Optional[float] = None, remote_rows: str = "exact") -> lookup.LookupFuture:
        """Several groups in one round: at most one request per remote partition.

        Args:
            ids: Group (node type or edge type; typed keys such as ``"_N"`` work) -> global ids.
            attr_names: Group -> attribute names (every group of ``ids`` needs an entry).
            timeout: Seconds per remote call.
            remote_rows: ``"exact"`` or ``"int8"``: the wire format of rows other partitions send
                (:mod:`pyg_dist.store.quant`; local and cached rows are always exact).

        Returns:
            A :class:`~pyg_dist.store.lookup.LookupFuture` resolving to ``{group: {name: tensor}}``
            with the keys of ``ids``.

        Example:
            >>> fut = fs.lookup_many_async({"paper": pid, ("paper", "cites", "paper"): eid},  # doctest: +SKIP
            ...                            {"paper": ["x", "y"], ("paper", "cites", "paper"): ["edge_attr"]})
            >>> out = fut.wait()                                                            # doctest: +SKIP
        """
        where = f"{_WHERE}.lookup_many_async"
        if not isinstance(ids, Mapping) or not isinstance(attr_names, Mapping):
            raise InvalidArgumentError(where, "ids", type(ids).__name__, "a dict of group -> ids, with a dict "
                                       "of group -> attribute names")
        keys, queries = list(ids), []
        for key in keys:
            group = self._group("lookup_many_async", key, None, arg="ids")
            if key not in attr_names:
                raise InvalidArgumentError(where, "attr_names", sorted(map(str, attr_names)),
                                           f"an entry for {key!r}")
            names = self._names(where, group, attr_names[key])
            checked = check_ids(where, ids[key], self.book.num_items(group), group)
            queries.append(lookup.FeatureQuery(group, names, *checked))
        finish = lambda outs: dict(zip(keys, outs))  # noqa: E731
        return lookup.start_lookup(self.book, self.partition, self._serve_column, queries, finish,
                                   lookup.check_timeout(where, timeout), self._cache, remote_rows)

    # ------------------------------------------------------------------ remote-feature cache
    @property
    def cache(self) -> Optional[FeatureCache]:
        """The :class:`~pyg_dist.cache.rows.FeatureCache` lookups consult before asking an owner, or None."""
        return self._cache

    def set_cache(self, cache: Optional[FeatureCache]) -> None:
        """Uses ``cache`` for remote-owned rows from now on (``None``: no cache). Build one with
        :func:`pyg_dist.sampler.cache_policy.build_cache`; a folder's ``feature_cache.pt`` is used by default.

        Raises:
            InvalidArgumentError: a type that is not a node type, an attribute the folder does not have
                or with another row shape / dtype, or cached ids this partition owns.
        """
        where = f"{_WHERE}.set_cache"
        if cache is not None and not isinstance(cache, FeatureCache):
            raise InvalidArgumentError(where, "cache", cache, "a pyg_dist.cache.rows.FeatureCache or None")
        for t, e in (cache.entries.items() if cache is not None else ()):
            if t not in self.node_types:
                raise InvalidArgumentError(where, "cache", f"type {t!r}", f"node types of the folder {self.node_types}")
            for name, col in e.cols.items():
                own = self._column("set_cache", t, name)
                if col.dtype != own.dtype or col.shape[1:] != own.shape[1:]:
                    raise InvalidArgumentError(where, "cache", f"{name!r} of {t!r}: {col.dtype} {tuple(col.shape[1:])}",
                                               f"rows like the folder's: {own.dtype} {tuple(own.shape[1:])}")
            if e.ids.numel() and bool((self.book.owner(t, e.ids) == self.partition).any()):
                raise InvalidArgumentError(where, "cache", f"ids of {t!r}", f"ids other partitions own (not "
                                           f"partition {self.partition}'s: their rows are here already)")
        self._cache = cache

    def _load_folder_cache(self, path, mmap: bool) -> None:
        from pyg_dist.errors import PartitionFormatError
        cache = FeatureCache.load(path, mmap=mmap)
        want = self.partition_meta.extra.get("fingerprint")
        if cache.info.get("fingerprint") != want or cache.info.get("part") != self.partition:
            raise PartitionFormatError(path, f"feature cache of another partitioning or partition (fingerprint "
                                       f"{cache.info.get('fingerprint')}, part {cache.info.get('part')}; META.json: "
                                       f"{want}, part {self.partition})")
        try:
            self.set_cache(cache)
        except InvalidArgumentError as e:
            raise PartitionFormatError(path, f"feature cache disagrees with the partition: {e}") from None

    def _carried(self) -> dict:  # a pickled store keeps its cache (shared memory or the same file) and its puts
        return {"_cache": self._cache, "_added": dict(self._added)}

    def _restore(self, carried: dict) -> None:
        for (group, name), rows in carried.pop("_added", {}).items():  # tensors shared with the trainer's
            self._cols[group][name] = self._added[(group, name)] = rows
        super()._restore(carried)

    # ------------------------------------------------------------------ serving remote lookups
    def serve(self, replace: bool = False) -> None:
        """Answers remote lookups in this process with this store (register before ``init_rpc``); the
        store's part of :func:`~pyg_dist.sampler.dist_neighbor.serve_partition`, which is how a partition is
        served (this method is its primitive, kept for its ``replace`` check).

        One store per process serves: ``replace=True`` replaces another store that serves already.
        """
        from pyg_dist import rpc

        if lookup.LOOKUP_OP in rpc.registered_callees():
            from pyg_dist.rpc.callees import lookup as registered
            old = getattr(registered(lookup.LOOKUP_OP), "__self__", None)
            if old is self:
                return
            if not replace:
                who = f"partition {old.partition}" if isinstance(old, LocalFeatureStore) else repr(old)
                raise InvalidArgumentError(f"{_WHERE}.serve", "replace", replace,
                                           f"True to replace the lookup callee already registered ({who})")
        rpc.register_callee(lookup.LOOKUP_OP, self._serve_request, replace=True)

    def stop_serving(self) -> None:
        """Unregisters this store's lookup callee (no-op when another one, or none, is registered)."""
        from pyg_dist import rpc
        from pyg_dist.rpc.callees import lookup as registered

        op = lookup.LOOKUP_OP
        if op in rpc.registered_callees() and getattr(registered(op), "__self__", None) is self:
            rpc.unregister_callee(op)

    def _serve_request(self, req: lookup.LookupRequest) -> lookup.LookupReply:
        """The lookup callee: answers within this process's serving limits (:mod:`pyg_dist.store.limits`)."""
        return serving.serve_request(self.book, self.partition, self._serve_column, req, self._budget,
                                     self._reply_pool, self._row_codes)

    def _serve_column(self, group, name: str) -> Tensor:
        return self._column("lookup", group, name)

    # ------------------------------------------------------------------ PyG FeatureStore interface
    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        """Whole local block (``index=None``) or the rows of global ids ``index`` (remote included)."""
        group = self._group("get_tensor", attr.group_name, None, arg="group_name")
        col = self._column("get_tensor", group, attr.attr_name)
        if attr.index is None:
            return col
        if isinstance(attr.index, slice):
            raise InvalidArgumentError(f"{_WHERE}.get_tensor", "index", attr.index,
                                       "None or a 1-D tensor of global ids (no slices: rows are global ids)")
        return self.lookup_features_async(attr.index, isinstance(group, str), group, attr.attr_name).wait()

    def get_tensor_from_global_id(self, *args, **kwargs) -> Tensor:
        """PyG's name for :meth:`get_tensor` with global ids (``index`` must be given)."""
        attr = self._tensor_attr_cls.cast(*args, **kwargs)
        if attr.index is None:
            raise InvalidArgumentError(f"{_WHERE}.get_tensor_from_global_id", "index", None, "global ids")
        return self.get_tensor(attr)

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, ...]:
        """GLOBAL size: (number of nodes or edges of the group in the whole graph, *row shape)."""
        group = self._group("get_tensor_size", attr.group_name, None, arg="group_name")
        col = self._column("get_tensor_size", group, attr.attr_name)
        return (self.book.num_items(group),) + tuple(col.shape[1:])

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        """Every (group, attribute); homogeneous groups are named ``None`` / ``(None, None)`` as in PyG."""
        out: List[TensorAttr] = []
        for group, cols in self._cols.items():
            public = group if self.is_hetero else (None if group == HOMO_NODE else (None, None))
            out.extend(GlobalTensorAttr(public, name) for name in sorted(cols))
        return out

    def add_learnable(self, group, name: str, rows: Tensor) -> None:
        """Adds a learnable column (a :class:`~pyg_dist.embedding.DistEmbedding` table): ``rows`` of the
        ids this partition owns, updated in place by its optimizer; lookups serve it like any attribute, sampler
        workers included (:meth:`_put_tensor`'s rules).

        Raises:
            InvalidArgumentError: an existing attribute name, or not one row per owned id.
        """
        where = f"{_WHERE}.add_learnable"
        key = self._group("add_learnable", group, True)
        if not isinstance(name, str) or name in self._cols[key]:
            raise InvalidArgumentError(where, "name", name, f"a new attribute name (taken: {sorted(self._cols[key])})")
        if isinstance(rows, Tensor) and rows.dim() != 2:
            raise InvalidArgumentError(where, "rows", tuple(rows.shape), "a [num owned ids, dim] tensor")
        self._add_column(where, key, name, rows)

    def _put_tensor(self, tensor, attr) -> bool:
        """PyG's ``put_tensor`` on a folder store: a column for this job, held in memory (the folder is not
        touched), one row per id this partition owns, in :meth:`get_global_id`'s order. Lookups, loaders and
        sampler workers (fork, spawn or forkserver) serve it like the folder's own attributes; a new attribute, or
        one put before (replaced), never one of the folder's."""
        where = f"{_WHERE}.put_tensor"
        if attr.index is not None:
            raise InvalidArgumentError(where, "index", attr.index, "None (a whole column: one row per owned id)")
        group = self._group("put_tensor", attr.group_name, None, arg="group_name")
        name = attr.attr_name
        if isinstance(name, str) and name in self._cols[group] and (group, name) not in self._added:
            raise InvalidArgumentError(where, "attr_name", name, f"a new attribute of {group!r}: {name!r} comes "
                                       "from the partition folder (read-only; partition the graph again to change it)")
        self._add_column(where, group, name, tensor)
        return True

    def _add_column(self, where: str, group, name, rows) -> None:
        owned = self.book.owned_ids(group, self.partition).numel()
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(where, "attr_name", name, "a non-empty str")
        if not isinstance(rows, Tensor) or rows.dim() == 0 or rows.size(0) != owned:
            raise InvalidArgumentError(where, "tensor", getattr(rows, "shape", rows),
                                       f"a tensor of {owned} rows (one per id of {group!r} partition "
                                       f"{self.partition} owns)")
        if rows.device.type != "cpu":
            raise InvalidArgumentError(where, "tensor", str(rows.device), "a CPU tensor (stores live in CPU memory, "
                                       "and sampler workers share it)")
        self._cols[group][name] = self._added[(group, name)] = rows

    def _remove_tensor(self, attr) -> bool:
        """Removes a column put for this job (the folder's own attributes are read-only)."""
        where = f"{_WHERE}.remove_tensor"
        group = self._group("remove_tensor", attr.group_name, None, arg="group_name")
        if (group, attr.attr_name) not in self._added:
            if attr.attr_name in self._cols[group]:
                raise PyGDistError(f"{where}: {attr.attr_name!r} of {group!r} comes from the partition folder "
                                   "(read-only)")
            return False
        del self._added[(group, attr.attr_name)], self._cols[group][attr.attr_name]
        return True

    def added_columns(self) -> Mapping[Tuple[Group, str], Tensor]:
        """The columns put or added for this job (``put_tensor``, ``add_learnable``), by (group, name)."""
        return dict(self._added)

    def share_added(self) -> None:
        """Moves the added columns into shared memory (in place: their tensors stay the same objects), so that
        forked sampler workers see the trainer's later in-place updates (a learnable column's optimizer steps)."""
        for rows in self._added.values():
            rows.share_memory_()

    def __repr__(self) -> str:
        return (f"{_WHERE}(root='{self.partition_meta.root}', partition={self.partition}/{self.num_partitions}, "
                f"groups={len(self._cols)}, mmap={self._mmap})")

    # ------------------------------------------------------------------ helpers
    def _group(self, method: str, group, is_node: Optional[bool], arg: str = "group_name"):
        """The typed key of a public group name (PyG's ``None`` / ``(None, None)`` for homogeneous)."""
        where = f"{_WHERE}.{method}"
        if group is None or (isinstance(group, (tuple, list)) and tuple(group) == (None, None)):
            if self.is_hetero:
                raise InvalidArgumentError(where, arg, group, f"a node type in {self.node_types} or an edge "
                                           f"type in {self.edge_types} (the graph is heterogeneous)")
            edge = (group is not None) if is_node is None else not is_node
            return HOMO_EDGE if edge else HOMO_NODE
        key = tuple(group) if isinstance(group, list) else group
        if not isinstance(key, (str, tuple)) or key not in self._cols:
            raise InvalidArgumentError(where, arg, group, f"a node type in {self.node_types} or an edge type "
                                       f"in {self.edge_types}")
        if is_node is not None and isinstance(key, str) != is_node:
            raise InvalidArgumentError(where, arg, group, f"a {'node' if is_node else 'edge'} type "
                                       f"(is_node_feat={is_node})")
        return key

    def _column(self, method: str, group, name) -> Tensor:
        col = self._cols[group].get(name) if isinstance(name, str) else None
        if col is None:
            raise InvalidArgumentError(f"{_WHERE}.{method}", "attr_name", name,
                                       f"an attribute of {group!r}, one of {sorted(self._cols[group])}")
        return col

    def _names(self, where: str, group, names) -> Tuple[str, ...]:
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            raise InvalidArgumentError(where, "attr_names", names, "a non-empty list of attribute names")
        for name in names:
            self._column(where.split(".", 1)[-1], group, name)
        if len(set(names)) != len(names):
            raise InvalidArgumentError(where, "attr_names", names, "distinct attribute names")
        return tuple(names)
