"""Partition books: which partition owns a global id, and at which row of the owner it lives.

:class:`PartitionBook` is a range table (pyg_dist folders own one contiguous id range per type and
partition): ``owner = searchsorted(bounds, id) - 1`` and ``local = id - bounds[owner]``; it holds
``num_parts + 1`` integers per type. :class:`DensePartitionBook` serves folders written by PyG's own
``Partitioner``, whose ids are not contiguous: the owner comes from the stored ``node_map`` and the
local row is the id's position among the owner's sorted ids.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, PyGDistError

AnyType = Union[NodeType, EdgeType]


class _BookBase:
    num_parts: int
    _sizes: Dict[AnyType, int]

    def owner(self, type_: AnyType, ids) -> Tensor:
        """Owning partition of each global id (each book implements it)."""
        raise NotImplementedError

    def to_local(self, type_: AnyType, ids) -> Tensor:
        """Row of each global id within its owner's block (each book implements it)."""
        raise NotImplementedError

    def _key(self, where: str, type_: AnyType) -> AnyType:
        key = tuple(type_) if isinstance(type_, (list, tuple)) else type_
        if key not in self._sizes:
            raise InvalidArgumentError(f"{type(self).__name__}.{where}", "type", type_,
                                       f"one of {list(self._sizes)}")
        return key

    def _ids(self, where: str, key: AnyType, ids) -> Tensor:
        ids = torch.as_tensor(ids)
        if ids.is_floating_point() or ids.dtype == torch.bool:
            raise InvalidArgumentError(f"{type(self).__name__}.{where}", "ids", ids.dtype, "an integer tensor")
        ids = ids.long()
        n = self._sizes[key]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise InvalidArgumentError(f"{type(self).__name__}.{where}", "ids",
                                       f"values in [{int(ids.min())}, {int(ids.max())}]",
                                       f"ids of {key!r} in [0, {n})")
        return ids

    def _part(self, where: str, part) -> int:
        if not isinstance(part, int) or isinstance(part, bool) or not 0 <= part < self.num_parts:
            raise InvalidArgumentError(f"{type(self).__name__}.{where}", "part", part,
                                       f"an int in [0, {self.num_parts})")
        return part

    def num_items(self, type_: AnyType) -> int:
        """Number of nodes (or edges) of ``type_`` in the whole graph."""
        return self._sizes[self._key("num_items", type_)]

    def count_by_owner(self, type_: AnyType, ids) -> List[int]:
        """How many of ``ids`` each partition owns."""
        key = self._key("count_by_owner", type_)
        return torch.bincount(self.owner(key, ids), minlength=self.num_parts).tolist()

    def split_by_owner(self, type_: AnyType, ids) -> Tuple[Tensor, Tensor, List[int]]:
        """Positions of ``ids`` grouped by owner: ``(order, rows, ptr)``.

        ``order[ptr[p]:ptr[p + 1]]`` are the positions of the ids partition ``p`` owns (ascending);
        ``rows`` is aligned with ``order``: each id's row in its owner's block.
        """
        key = self._key("split_by_owner", type_)
        ids = self._ids("split_by_owner", key, ids)
        owner = self.owner(key, ids)
        order = torch.sort(owner, stable=True).indices
        ptr = [0] + torch.cumsum(torch.bincount(owner, minlength=self.num_parts), 0).tolist()
        return order, self.to_local(key, ids).index_select(0, order), ptr


class PartitionBook(_BookBase):
    """Range partition book over node and edge types.

    Args:
        bounds: Per node type and per edge type, an int64 tensor ``[num_parts + 1]``; partition ``p``
            owns ids ``[bounds[p], bounds[p + 1])``.

    Example:
        >>> book = PartitionBook({"_N": torch.tensor([0, 3, 5])})
        >>> book.owner("_N", torch.tensor([0, 3, 4]))
        tensor([0, 1, 1])
        >>> book.to_local("_N", torch.tensor([0, 3, 4]))
        tensor([0, 0, 1])
    """

    def __init__(self, bounds: Dict[AnyType, Tensor]):
        sizes = {len(b) for b in bounds.values()}
        if len(sizes) != 1 or min(sizes) < 2:
            raise InvalidArgumentError("PartitionBook", "bounds", {k: len(b) for k, b in bounds.items()},
                                       "one tensor of length num_parts + 1 >= 2 per type")
        self.bounds = {(tuple(k) if isinstance(k, list) else k): torch.as_tensor(b, dtype=torch.long)
                       for k, b in bounds.items()}
        self.num_parts = sizes.pop() - 1
        self._sizes = {k: int(b[-1]) for k, b in self.bounds.items()}
        self._starts = {k: b.tolist() for k, b in self.bounds.items()}  # owned_range without tensor indexing

    def owner(self, type_: AnyType, ids) -> Tensor:
        """Owning partition of each global id (int64, same shape as ``ids``)."""
        key = self._key("owner", type_)
        ids = self._ids("owner", key, ids)
        return torch.searchsorted(self.bounds[key], ids, right=True) - 1

    def to_local(self, type_: AnyType, ids) -> Tensor:
        """Row of each global id within its owner's block (int64)."""
        key = self._key("to_local", type_)
        ids = self._ids("to_local", key, ids)
        bounds = self.bounds[key]
        return ids - bounds[torch.searchsorted(bounds, ids, right=True) - 1]

    def owned_range(self, type_: AnyType, part: int) -> Tuple[int, int]:
        """``(start, end)`` of the ids ``part`` owns."""
        key = self._key("owned_range", type_)
        part = self._part("owned_range", part)
        starts = self._starts[key]
        return starts[part], starts[part + 1]

    def owned_ids(self, type_: AnyType, part: int) -> Tensor:
        """Sorted global ids owned by ``part``; row ``i`` of its block holds ``owned_ids[i]``."""
        return torch.arange(*self.owned_range(type_, part))

    def rows_if_owned(self, type_: AnyType, part: int, ids: Tensor) -> Optional[Tensor]:
        """Rows of ``ids`` in ``part``'s block when ``part`` owns ALL of them, else ``None`` (one pass that
        stops at the first foreign id). ``ids``: a contiguous 1-D int64 CPU tensor."""
        from pyg_dist.ops.graph_kernels import rows_in_range
        start, end = self.owned_range(type_, part)
        out = torch.empty_like(ids)
        return out if rows_in_range(ids.numpy(), start, end, out.numpy()) else None

    def count_by_owner(self, type_: AnyType, ids) -> List[int]:
        """See :meth:`_BookBase.count_by_owner` (one pass, no temporaries)."""
        from pyg_dist.ops.graph_kernels import count_by_range
        key = self._key("count_by_owner", type_)
        ids = self._ids("count_by_owner", key, ids).contiguous()
        return count_by_range(ids.numpy(), self.bounds[key].numpy()).tolist()

    def split_by_owner(self, type_: AnyType, ids) -> Tuple[Tensor, Tensor, List[int]]:
        """See :meth:`_BookBase.split_by_owner` (one counting-sort pass here)."""
        from pyg_dist.ops.graph_kernels import split_by_range
        key = self._key("split_by_owner", type_)
        ids = self._ids("split_by_owner", key, ids).contiguous()
        order, rows, ptr = split_by_range(ids.numpy(), self.bounds[key].numpy())
        return torch.from_numpy(order), torch.from_numpy(rows), ptr.tolist()

    def to_global(self, type_: AnyType, part: int, local) -> Tensor:
        """Inverse of :meth:`to_local` for one partition."""
        return torch.as_tensor(local, dtype=torch.long) + self.owned_range(type_, part)[0]


class DensePartitionBook(_BookBase):
    """Partition book for folders with non-contiguous ids (written by PyG's ``Partitioner``).

    Args:
        maps: Per node type and edge type, an int tensor with the owning partition of every id.
        num_parts: Number of partitions.

    Example:
        >>> book = DensePartitionBook({"_N": torch.tensor([1, 0, 1, 0])}, num_parts=2)
        >>> book.owner("_N", torch.tensor([2, 3])), book.to_local("_N", torch.tensor([2, 3]))
        (tensor([1, 0]), tensor([1, 1]))
    """

    def __init__(self, maps: Dict[AnyType, Tensor], num_parts: int):
        self.num_parts = int(num_parts)
        self.maps, self._local, self._sorted, self._starts = {}, {}, {}, {}
        for key, owner in maps.items():
            key = tuple(key) if isinstance(key, list) else key
            owner = torch.as_tensor(owner).long()
            if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
                raise PyGDistError(f"DensePartitionBook: map of {key!r} names partitions outside "
                                   f"[0, {num_parts})")
            order = torch.sort(owner, stable=True).indices          # ids grouped by part, ascending
            counts = torch.bincount(owner, minlength=self.num_parts)
            starts = torch.zeros(self.num_parts + 1, dtype=torch.long)
            torch.cumsum(counts, 0, out=starts[1:])
            local = torch.empty_like(order)
            local[order] = torch.arange(order.numel()) - starts[owner[order]]
            self.maps[key], self._local[key], self._sorted[key], self._starts[key] = owner, local, order, starts
        self._sizes = {k: int(m.numel()) for k, m in self.maps.items()}

    def owner(self, type_: AnyType, ids) -> Tensor:
        """Owning partition of each global id, read from the map."""
        key = self._key("owner", type_)
        return self.maps[key][self._ids("owner", key, ids)]

    def to_local(self, type_: AnyType, ids) -> Tensor:
        """Row of each global id within its owner's block (ids of a part in ascending order)."""
        key = self._key("to_local", type_)
        return self._local[key][self._ids("to_local", key, ids)]

    def owned_ids(self, type_: AnyType, part: int) -> Tensor:
        """Sorted global ids owned by ``part`` (not a range: a dense book's ids are scattered)."""
        key = self._key("owned_ids", type_)
        part = self._part("owned_ids", part)
        s = self._starts[key]
        return self._sorted[key][int(s[part]):int(s[part + 1])]

    def owned_range(self, type_: AnyType, part: int) -> Tuple[int, int]:
        """Not defined: a dense book's ids are not contiguous (use :meth:`owned_ids`)."""
        raise PyGDistError("DensePartitionBook.owned_range: this folder (written by PyG's Partitioner) "
                           "has non-contiguous ids; use owned_ids(type, part)")

    def to_global(self, type_: AnyType, part: int, local) -> Tensor:
        """Inverse of :meth:`to_local` for one partition."""
        return self.owned_ids(type_, part)[torch.as_tensor(local, dtype=torch.long)]
