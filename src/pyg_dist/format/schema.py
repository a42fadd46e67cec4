"""The entries of a partition folder's ``.pt`` files: one typed definition each, filled by every writer
(in-memory, out-of-core, PyG layout) and read by every reader, so no other module spells their keys.

A file holds one entry per type (``{type: entry}`` in a heterogeneous folder, the entry itself in a
homogeneous one, as PyG writes them); an entry is saved as a plain ``dict`` of its non-``None`` fields
(loadable with ``torch.load(weights_only=True)``).

Example:
    >>> import torch
    >>> e = NodeEntry(torch.arange(3), {"x": torch.zeros(3, 2)})
    >>> sorted(e.to_dict())
    ['feats', 'global_id']
    >>> NodeEntry.from_dict(e.to_dict(), "node_feats.pt").global_id.tolist()
    [0, 1, 2]
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Type, TypeVar, Union

from torch import Tensor

from pyg_dist.errors import PartitionFormatError

#: Node attribute that carries node timestamps / edge attribute that carries edge timestamps.
NODE_TIME, EDGE_TIME = "time", "edge_time"
#: The edge attribute exposed to samplers as the edge weight.
WEIGHT = "edge_weight"

_E = TypeVar("_E", bound="_Entry")


class _Entry:
    """Shared ``to_dict`` / ``from_dict`` of the entry dataclasses."""

    def to_dict(self) -> Dict[str, Any]:
        """The entry as saved: its non-``None`` fields, in field order."""
        return {f.name: v for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls: Type[_E], raw: Any, path: Union[str, Path], key: Any = None) -> _E:
        """The entry in ``raw`` (read from ``path``); :class:`PartitionFormatError` naming the file (and
        the entry's type ``key``) when it is not a dict or lacks a required key. Unknown keys are ignored."""
        where = f"entry {key!r}: " if key is not None else ""
        if not isinstance(raw, dict):
            raise PartitionFormatError(path, f"{where}expected a dict of {cls.__name__} fields, got "
                                             f"{type(raw).__name__}")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        required = [f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in raw]
        if missing:
            raise PartitionFormatError(path, f"{where}missing key(s) {missing} (has {sorted(map(str, raw))})")
        return cls(**{f.name: raw[f.name] for f in fields if f.name in raw})


@dataclass
class GraphEntry(_Entry):
    """One edge type of ``part_<i>/graph.pt``: the in-edges of the destinations a partition samples for.

    Attributes:
        row / col: Global source / destination id of each edge, sorted by destination (PyG's keys).
        edge_id: Global edge id of each edge.
        size: ``(num_src_nodes, num_dst_nodes)`` of the edge type.
        colptr: CSC pointers over ``[dst_start, dst_end)`` (pyg_dist folders; PyG's have none).
        dst_start / dst_end: The destination range covered (owned, or all nodes in hybrid folders).
        edge_time / weight: Per-edge time and weight aligned with ``row`` (hybrid folders only; elsewhere
            they live in ``edge_feats.pt``).
    """
    row: Tensor
    col: Tensor
    edge_id: Tensor
    size: Tuple[int, int]
    colptr: Optional[Tensor] = None
    dst_start: Optional[int] = None
    dst_end: Optional[int] = None
    edge_time: Optional[Tensor] = None
    weight: Optional[Tensor] = None


@dataclass
class NodeEntry(_Entry):
    """One node type of ``part_<i>/node_feats.pt``: the owned nodes' attributes.

    Attributes:
        global_id: Global id of each row (ascending in pyg_dist folders).
        feats: ``x``, ``y``, the masks and every other node attribute, row-aligned.
        time: Node time of each row (pyg_dist), or of every node of the type (PyG's layout).
        id: PyG's heterogeneous layout only: the type-local ids (``global_id`` is then offset).
    """
    global_id: Tensor
    feats: Dict[str, Tensor] = field(default_factory=dict)
    time: Optional[Tensor] = None
    id: Optional[Tensor] = None


@dataclass
class EdgeEntry(_Entry):
    """One edge type of ``part_<i>/edge_feats.pt``: the owned edges' attributes and time.

    Attributes:
        global_id: Global edge id of each row; PyG may save ``edge_time`` alone (aligned with graph.pt).
        feats: Every edge attribute, row-aligned.
        edge_time: Edge time of each row.
    """
    global_id: Optional[Tensor] = None
    feats: Dict[str, Tensor] = field(default_factory=dict)
    edge_time: Optional[Tensor] = None


@dataclass
class TopologyCacheEntry(_Entry):
    """One edge type of ``part_<i>/topology_cache.pt``: the in-edges of cached remote destinations.

    Attributes:
        ids: The cached destination ids (sorted).
        count: In-degree of each id.
        row / edge_id: Global sources and edge ids, grouped by destination in the owner's order.
    """
    ids: Tensor
    count: Tensor
    row: Tensor
    edge_id: Tensor
