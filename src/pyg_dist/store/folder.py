"""Opening a partition for the stores: check the folder against the world first (META.json, the partition
count, the partition asked for), then load it after every check of :mod:`pyg_dist.format.checks` (the same list
``pyg-dist-partition --verify`` runs), each a :class:`~pyg_dist.errors.PartitionFormatError` naming the file.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format.checks import VERIFY, check_verify, load_checked
from pyg_dist.format.data import PartitionData


def resolve_part(where: str, meta: M.PartitionMeta, part: Optional[int], ctx) -> int:
    """The partition to load: ``part``, or the context's; checks the folder matches the world."""
    if ctx is not None:
        from pyg_dist.context import DistContext

        if not isinstance(ctx, DistContext):
            raise InvalidArgumentError(where, "ctx", ctx, "a pyg_dist.context.DistContext or None")
        if ctx.num_partitions != meta.num_parts:
            raise PartitionFormatError(M.meta_path(meta.root),
                                       f"the folder has {meta.num_parts} partitions but the world expects "
                                       f"{ctx.num_partitions} (DistContext.num_partitions); partition the "
                                       "graph again or launch a matching world")
        if part is None:
            part = ctx.partition
    if part is None:
        raise InvalidArgumentError(where, "part", part, "a partition index, as pid= or part= (or pass "
                                   "ctx=DistContext)")
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < meta.num_parts:
        raise InvalidArgumentError(where, "part", part, f"an int in [0, {meta.num_parts})")
    return part


def open_partition(where: str, root, part: Optional[int], ctx, mmap: bool, verify: Any = "once") -> PartitionData:
    """Validates the folder against the world and loads partition ``part`` after every check of
    :mod:`pyg_dist.format.checks` (``verify``: :data:`~pyg_dist.format.checks.VERIFY`)."""
    if not isinstance(mmap, bool):
        raise InvalidArgumentError(where, "mmap", mmap, "a bool")
    check_verify(where, verify)
    meta = M.read_meta(root)
    part = resolve_part(where, meta, part, ctx)
    return load_checked(meta, part, mmap, verify)


def resolve_pid(where: str, pid, part) -> Optional[int]:
    """PyG's ``pid`` or pyg_dist's ``part`` (an alias): the one given; both is an error."""
    if pid is not None and part is not None:
        raise InvalidArgumentError(where, "part", part, f"None when pid is given (pid={pid!r}; 'part' is an alias)")
    return pid if pid is not None else part


def _reopen(cls, root: str, part: int, mmap: bool, carried: Optional[dict] = None):
    store = cls.from_partition(root, part, mmap=mmap)
    store._restore(dict(carried or {}))
    return store


class PartitionStoreMixin:
    """What both stores share: opening a partition, pickling by re-opening, and its description.

    Subclasses set ``partition_meta``, ``book``, ``partition`` and ``_mmap`` through
    :meth:`_attach`.
    """

    def _attach(self, data: PartitionData, mmap: bool) -> None:
        self.partition_meta, self.book = data.meta, data.book
        self.partition, self._mmap = data.part, mmap

    @classmethod
    def from_partition(cls, root, part: Optional[int] = None, *, pid: Optional[int] = None, ctx=None,
                       mmap: bool = True, verify: Any = "once"):
        """Opens partition ``part`` of the folder ``root`` (see :func:`pyg_dist.store.load_stores`); ``pid`` is
        PyG's name for ``part`` (give one of them, or neither with ``ctx``: its partition)."""
        where = f"{cls.__name__}.from_partition"
        part = resolve_pid(where, pid, part)
        store: Callable[..., Any] = cls  # a concrete store: its constructor takes (data, mmap)
        return store(open_partition(where, root, part, ctx, mmap, verify), mmap=mmap)

    def __reduce__(self):  # pickled (spawned workers): re-open the folder; mmap keeps one copy
        return (_reopen, (type(self), str(self.partition_meta.root), self.partition, self._mmap, self._carried()))

    def _carried(self) -> dict:
        """Attributes a pickled store keeps besides what re-opening the folder restores."""
        return {}

    def _restore(self, carried: dict) -> None:
        """Gives a re-opened store what :meth:`_carried` kept."""
        self.__dict__.update(carried)

    @property
    def num_partitions(self) -> int:
        return self.partition_meta.num_parts

    @property
    def partition_idx(self) -> int:
        """This store's partition (PyG's name)."""
        return self.partition

    @property
    def is_hetero(self) -> bool:
        return self.partition_meta.is_hetero

    @property
    def node_types(self) -> List[str]:
        return list(self.partition_meta.node_types)

    @property
    def edge_types(self) -> List[Tuple[str, str, str]]:
        return list(self.partition_meta.edge_types)

__all__ = ["VERIFY", "resolve_part", "open_partition", "resolve_pid", "PartitionStoreMixin"]
