"""The partitioner's settings: one validated dataclass for the in-memory and the out-of-core partitioner.

Example:
    >>> PartitionConfig(2, "coarsen", out_of_core=True, passes=0).owner_method
    'coarsen'
    >>> PartitionConfig(2, "hybrid", base_method="random").owner_method
    'random'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from pyg_dist.errors import InvalidArgumentError, check_choice, check_positive_int
from pyg_dist.format.precision import parse_dtype

#: Values of ``method`` in memory; ``hybrid`` takes node ownership from ``base_method``.
METHODS = ("metis", "random", "supernode", "hybrid")
#: Values of ``method`` out of core (bounded-memory assignment).
OOC_METHODS = ("coarsen", "fennel", "random")
#: Ownership methods ``hybrid`` can build on.
BASE_METHODS = ("metis", "random", "supernode")


@dataclass(frozen=True)
class PartitionConfig:
    """Validated partitioner settings (see :class:`~pyg_dist.partition.Partitioner` and
    :class:`~pyg_dist.partition.OutOfCorePartitioner` for the meaning of each field).

    ``out_of_core`` selects the partitioner the settings are for: its method list and the name errors give
    (``Partitioner`` / ``OutOfCorePartitioner``); ``passes``, ``memory_budget`` and ``chunk_size`` are the
    out-of-core partitioner's, ``base_method`` and ``recursive`` the in-memory one's. ``feature_dtype`` is
    kept as a ``torch.dtype`` (or ``None``), whatever spelling was given.
    """
    num_parts: int
    method: str = "metis"
    base_method: str = "metis"
    sub_parts: int = 1
    num_clusters: Optional[int] = None
    seed: int = 0
    ufactor: int = 30
    balance: bool = True
    recursive: bool = False
    out_of_core: bool = False
    passes: Optional[int] = None
    memory_budget: int = 2 * 10 ** 9
    chunk_size: Optional[int] = None
    feature_dtype: Optional[Union[str, torch.dtype]] = None

    def __post_init__(self):
        where = self.where
        check_positive_int(where, "num_parts", self.num_parts)
        check_choice(where, "method", self.method, OOC_METHODS if self.out_of_core else METHODS)
        check_choice(where, "base_method", self.base_method, BASE_METHODS)
        for name in ("sub_parts", "ufactor", "memory_budget"):
            check_positive_int(where, name, getattr(self, name))
        check_positive_int(where, "seed", self.seed, allow_zero=True)
        for name in ("balance", "recursive", "out_of_core"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(where, name, getattr(self, name), "a bool")
        if self.num_clusters is not None:
            check_positive_int(where, "num_clusters", self.num_clusters)
            if self.num_clusters < self.num_parts:
                raise InvalidArgumentError(where, "num_clusters", self.num_clusters,
                                           f"at least num_parts ({self.num_parts}); usually >> num_parts")
        if self.passes is not None:
            check_positive_int(where, "passes", self.passes, allow_zero=self.method == "coarsen")
        if self.chunk_size is not None:
            check_positive_int(where, "chunk_size", self.chunk_size)
        object.__setattr__(self, "feature_dtype", parse_dtype(where, "feature_dtype", self.feature_dtype))

    @property
    def where(self) -> str:
        """The partitioner these settings are for (named in errors)."""
        return "OutOfCorePartitioner" if self.out_of_core else "Partitioner"

    @property
    def stored_dtype(self) -> Optional[torch.dtype]:
        """``feature_dtype`` as checked: the ``torch.dtype`` features are stored in (``None``: as given)."""
        return self.feature_dtype if isinstance(self.feature_dtype, torch.dtype) else None

    @property
    def owner_method(self) -> str:
        """The method that decides node ownership."""
        return self.base_method if self.method == "hybrid" else self.method

    @property
    def edges_per_chunk(self) -> int:
        """Out of core: edges read at once, about 400 bytes of working memory each (ids, relabelled ids,
        routing)."""
        return self.chunk_size or int(min(max(self.memory_budget // 400, 1 << 12), 1 << 24))


__all__ = ["PartitionConfig", "METHODS", "OOC_METHODS", "BASE_METHODS"]
