"""Graphs from an edge list on disk plus optional per-node / per-edge array files.

An edge list is a text file (``.txt`` / ``.csv`` / ``.tsv``: two integer columns, ``#`` comments), a
``.npy`` array or a ``.pt`` tensor of shape ``[2, E]`` or ``[E, 2]``. Given a folder, the edges are
read from ``edges.<ext>`` and attribute files are picked up by name: ``x``, ``y``, ``time``,
``train_mask``, ``val_mask``, ``test_mask`` (per node) and ``edge_attr``, ``edge_weight``,
``edge_time`` (per edge), each as ``.npy`` or ``.pt``.
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Dict, Optional, Union

import numpy as np
import torch

from pyg_dist.errors import InvalidArgumentError

_WHERE = "load_edgelist"
_EXTS = (".txt", ".csv", ".tsv", ".npy", ".pt")
NODE_FILES = ("x", "y", "time", "train_mask", "val_mask", "test_mask")
EDGE_FILES = ("edge_attr", "edge_weight", "edge_time")


def read_array(path: Union[str, Path], name: str = "path") -> torch.Tensor:
    """Reads a ``.npy`` / ``.pt`` array or a whitespace/comma separated text table as a tensor."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgumentError(_WHERE, name, str(path), "an existing file")
    if path.suffix == ".pt":
        _not_a_graph(path, name)
    try:
        if path.suffix == ".npy":
            return torch.from_numpy(np.load(path, allow_pickle=False))
        if path.suffix == ".pt":
            value = torch.load(path, weights_only=True)
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"holds a {type(value).__name__}, not a tensor")
            return value
        delim = "," if path.suffix == ".csv" else None
        return torch.from_numpy(np.loadtxt(path, dtype=np.int64, delimiter=delim, comments="#", ndmin=2))
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError) as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise InvalidArgumentError(_WHERE, name, str(path), f"a readable .npy/.pt/text array ({first})") from None


def _not_a_graph(path: Path, name: str) -> None:
    """A ``.pt`` file holding a saved PyG graph is one typed line pointing at ``--dataset pyg``."""
    from pyg_dist.datasets.pyg_file import holds_pyg_graph
    if holds_pyg_graph(path):
        raise InvalidArgumentError(_WHERE, name, str(path), "an edge or attribute tensor; this file holds a saved "
                                   "PyG graph: partition it with --dataset pyg --root FILE (Python: "
                                   "load_dataset('pyg', FILE))")


def _edges(path: Path) -> torch.Tensor:
    e = read_array(path, "edges")
    if e.dim() != 2 or 2 not in e.shape or e.is_floating_point():
        raise InvalidArgumentError(_WHERE, "edges", f"{path} with shape {tuple(e.shape)}",
                                   "integer edges of shape [2, E] or [E, 2]")
    e = e.long()
    text = path.suffix not in (".npy", ".pt")  # text tables are always one edge per line
    return e.t().contiguous() if text or e.size(0) != 2 else e


def _find(folder: Path, stem: str) -> Optional[Path]:
    for ext in _EXTS:
        if (folder / f"{stem}{ext}").is_file():
            return folder / f"{stem}{ext}"
    return None


def load_edgelist(path: Union[str, Path], num_nodes: Optional[int] = None, undirected: bool = False,
                  files: Optional[Dict[str, Union[str, Path]]] = None):
    """Loads a ``Data`` from an edge list (a file, or a folder as described in the module docstring).

    Args:
        path: The edge file, or a folder holding ``edges.<ext>`` and attribute files.
        num_nodes: Node count; default ``max id + 1`` (or the row count of ``x``).
        undirected: Add the reverse of every edge that lacks one (:func:`~pyg_dist.datasets.registry.
            symmetrize`: edge attributes are copied alongside; idempotent).
        files: Extra ``{attribute name: file}`` pairs (e.g. ``{"x": "feat.npy"}``).

    Example:
        >>> data = load_edgelist("graph/", undirected=True)  # doctest: +SKIP
    """
    from torch_geometric.data import Data
    path = Path(path)
    if not path.exists():
        raise InvalidArgumentError(_WHERE, "path", str(path), "an existing edge file or folder")
    found: Dict[str, Path] = {}
    if path.is_dir():
        edge_file = _find(path, "edges")
        if edge_file is None:
            raise InvalidArgumentError(_WHERE, "path", str(path), f"a folder holding edges{{{','.join(_EXTS)}}}")
        found = {k: p for k in NODE_FILES + EDGE_FILES if (p := _find(path, k)) is not None}
    else:
        edge_file = path
    found.update({k: Path(v) for k, v in (files or {}).items()})
    edge_index = _edges(edge_file)
    data = Data(edge_index=edge_index)
    for key, file in found.items():
        data[key] = read_array(file, key)
    if num_nodes is None:
        num_nodes = int(data.x.size(0)) if "x" in data else (int(edge_index.max()) + 1 if edge_index.numel() else 0)
    data.num_nodes = num_nodes
    for key in found:
        if key in NODE_FILES and data[key].size(0) != num_nodes:
            raise InvalidArgumentError(_WHERE, key, f"{found[key]} with {data[key].size(0)} rows",
                                       f"one row per node ({num_nodes})")
        if key.endswith("_mask"):
            data[key] = data[key].bool()
    if undirected:
        from pyg_dist.datasets.direction import symmetrize
        data = symmetrize(data)
    return data
