"""OGB node-property datasets already unpacked on disk, read without the ``ogb`` package or a download.

Expected layout (what the OGB zip files unpack to)::

    <root>/<name with '-' replaced by '_'>/   (or <root>/<name>/, or <root> itself)
        raw/edge.csv.gz            one "src,dst" line per edge
        raw/node-feat.csv.gz       optional, one comma-separated feature row per node
        raw/node-label.csv.gz      optional, one label per node (NaN/empty = unlabelled -> -1)
        raw/num-node-list.csv.gz   optional, the node count
        raw/node_year.csv.gz       optional, becomes node ``time``
        raw/edge-feat.csv.gz       optional, becomes ``edge_attr``
        split/<scheme>/{train,valid,test}.csv.gz   node indices of each split
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np
import torch

from pyg_dist.errors import InvalidArgumentError

_WHERE = "load_ogb_node"
#: Datasets whose edge file lists each undirected edge once (OGB's ``add_inverse_edge``).
_ADD_INVERSE = {"ogbn-products": True, "ogbn-proteins": True, "ogbn-arxiv": False, "ogbn-papers100m": False}


def known_convention(name: str) -> Optional[bool]:
    """Whether OGB's edge file of ``name`` lists each undirected edge once (``True``), both
    directions (``False``), or ``None`` when ``name`` is not in pyg_dist's table."""
    return _ADD_INVERSE.get(name.lower())


def _find_dir(root: Path, name: str) -> Path:
    for cand in (root / name.replace("-", "_"), root / name, root):
        if (cand / "raw" / "edge.csv.gz").is_file():
            return cand
    raise InvalidArgumentError(_WHERE, "root", str(root),
                               f"a folder holding {name.replace('-', '_')}/raw/edge.csv.gz (OGB layout, unpacked)")


def _read_csv(path: Path, dtype, ndmin: Literal[1, 2] = 1) -> np.ndarray:
    try:
        with gzip.open(path, "rt") as f:
            return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=ndmin)
    except (OSError, ValueError) as e:
        raise InvalidArgumentError(_WHERE, "root", str(path), f"a readable gzip CSV file ({e})") from None


def _mask(path: Path, n: int) -> torch.Tensor:
    idx = torch.from_numpy(_read_csv(path, np.int64)).view(-1)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[idx] = True
    return mask


def load_ogb_node(name: str, root: Union[str, Path], split: str = "sales_ranking",
                  add_inverse_edge: Optional[bool] = None):
    """Loads an unpacked OGB node-property dataset as a ``Data``.

    Args:
        name: Dataset name, e.g. ``"ogbn-products"`` (selects the folder and the edge convention).
        root: Folder holding the unpacked dataset (see the module docstring).
        split: Subfolder of ``split/`` to read masks from; if absent, the only subfolder present is used.
        add_inverse_edge: Add the reverse of every edge that lacks one (:func:`~pyg_dist.datasets.
            direction.symmetrize`); default from OGB's convention for ``name`` (:func:`known_convention`;
            names not in the table keep the edges as stored: pass ``True`` for an undirected graph).

    Returns:
        ``Data`` with ``edge_index`` and, where present, ``x``, ``y``, ``time``, ``edge_attr`` and the
        ``train_mask`` / ``val_mask`` / ``test_mask``.

    Example:
        >>> data = load_ogb_node("ogbn-products", "/data/ogb")  # doctest: +SKIP
    """
    from torch_geometric.data import Data
    folder = _find_dir(Path(root), name)
    raw = folder / "raw"
    edges = torch.from_numpy(_read_csv(raw / "edge.csv.gz", np.int64, ndmin=2)).t().contiguous()
    data = Data(edge_index=edges)
    if (raw / "node-feat.csv.gz").is_file():
        data.x = torch.from_numpy(_read_csv(raw / "node-feat.csv.gz", np.float32, ndmin=2))
    if (raw / "num-node-list.csv.gz").is_file():
        n = int(_read_csv(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
    else:
        n = int(data.x.size(0)) if "x" in data else int(edges.max()) + 1 if edges.numel() else 0
    data.num_nodes = n
    if (raw / "node-label.csv.gz").is_file():
        y = _read_csv(raw / "node-label.csv.gz", np.float64).reshape(n, -1)
        y = np.where(np.isnan(y), -1, y).astype(np.int64)
        data.y = torch.from_numpy(y[:, 0] if y.shape[1] == 1 else y)
    if (raw / "node_year.csv.gz").is_file():
        data.time = torch.from_numpy(_read_csv(raw / "node_year.csv.gz", np.int64)).view(-1)
    if (raw / "edge-feat.csv.gz").is_file():
        data.edge_attr = torch.from_numpy(_read_csv(raw / "edge-feat.csv.gz", np.float32, ndmin=2))
    _add_splits(data, folder / "split", split, n)
    inverse = known_convention(name) if add_inverse_edge is None else add_inverse_edge
    if inverse:
        from pyg_dist.datasets.direction import symmetrize
        data = symmetrize(data)
    return data


def _add_splits(data, split_root: Path, scheme: str, n: int) -> None:
    if not split_root.is_dir():
        return
    folder = split_root / scheme
    if not folder.is_dir():
        subs = [p for p in split_root.iterdir() if p.is_dir()]
        if len(subs) != 1:
            raise InvalidArgumentError(_WHERE, "split", scheme, f"one of {sorted(p.name for p in subs)}")
        folder = subs[0]
    for key, fname in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        path = folder / f"{fname}.csv.gz"
        if path.is_file():
            data[key] = _mask(path, n)
