"""PyG's ``Partitioner(data, num_parts, root, recursive=False).generate_partition()``.

Writes PyG's own layout with the ids of the input graph kept (so a script's seed ids and label files
stay valid), with pyg_dist's METIS assignment (balanced on nodes, train/val/test counts and in-degree)
and every node / edge attribute kept. For pyg_dist's native folders (contiguous ids, faster id
translation, other methods), use :class:`pyg_dist.partition.Partitioner` or ``pyg-dist-partition``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import meta as M
from pyg_dist.partition.partitioner import Partitioner as NativePartitioner
from pyg_dist.partition.pyg_writer import write_pyg_layout

_WHERE = "Partitioner"


def _replaceable(root: Path) -> bool:
    """Whether ``root`` may be (re)written: new, empty, or a partition folder (PyG rewrites it in place)."""
    if not root.exists():
        return True
    if not root.is_dir():
        return False
    return not any(root.iterdir()) or M.meta_path(root).is_file()


class Partitioner:
    """Partitions a ``Data`` / ``HeteroData`` into ``num_parts`` folders in PyG's layout.

    Args:
        data: The graph. Node attributes (``x``, ``y``, masks, ``time``) and edge attributes
            (``edge_attr``, ``edge_time``, ...) are all kept (PyG kept only ``x`` and ``edge_attr``).
        num_parts: Number of partitions.
        root: Folder to write (new, empty, or an earlier partition folder, which is replaced).
        recursive: METIS by multilevel recursive bisection instead of k-way.
        feature_dtype: pyg_dist's addition: store the features as ``"float32"``, ``"bfloat16"`` or
            ``"float16"`` (``None``: as given; see :class:`pyg_dist.partition.Partitioner`). PyG's META.json has
            no place to record it: the files' tensors carry their dtype.

    Example:
        >>> Partitioner(data, num_parts=2, root="/tmp/parts").generate_partition()  # doctest: +SKIP
    """

    def __init__(self, data, num_parts: int, root: str, recursive: bool = False, feature_dtype=None):
        self.data = data
        self.num_parts = num_parts
        self.root = root
        self.recursive = recursive
        self._native = NativePartitioner(data, num_parts, "metis", recursive=recursive, feature_dtype=feature_dtype)
        if not isinstance(root, (str, Path)):
            raise InvalidArgumentError(_WHERE, "root", root, "a folder path")

    @property
    def is_hetero(self) -> bool:
        """Whether the input is a ``HeteroData``."""
        return self._native.graph.is_hetero

    @property
    def is_node_level_time(self) -> bool:
        """Whether any node type carries ``time``."""
        return bool(self._native.graph.node_time)

    @property
    def is_edge_level_time(self) -> bool:
        """Whether any edge type carries ``edge_time``."""
        return bool(self._native.graph.edge_time)

    @property
    def node_types(self) -> Optional[List[NodeType]]:
        """Node types (``None`` for a ``Data``, as in PyG)."""
        return self._native.graph.node_types if self.is_hetero else None

    @property
    def edge_types(self) -> Optional[List[EdgeType]]:
        """Edge types (``None`` for a ``Data``, as in PyG)."""
        return self._native.graph.edge_types if self.is_hetero else None

    def generate_partition(self, progress: bool = True) -> None:
        """Assigns the nodes (METIS) and writes the folder; META.json appears last, atomically.

        Raises:
            InvalidArgumentError: ``root`` is a file or a non-empty folder that is not a partition folder.
        """
        root = Path(self.root)
        if not _replaceable(root):
            raise InvalidArgumentError(_WHERE, "root", str(root), "a new or empty folder, or an earlier partition "
                                       "folder (it holds other files: nothing was written)")
        parts, _, _ = self._native.assign()
        write_pyg_layout(self._native.graph, parts, root, self.num_parts, overwrite=True, progress=progress)

    def __repr__(self) -> str:
        return f"{_WHERE}(num_parts={self.num_parts}, root={json.dumps(str(self.root))})"


__all__ = ["Partitioner"]
