"""Offline Planetoid (Cora / CiteSeer / PubMed) loading without writing next to the input."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

from pyg_dist.envvars import raw
from pyg_dist.errors import InvalidArgumentError

_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def shared_data_root() -> Path:
    """The folder holding shared real data: ``$PYG_DIST_DATA`` (when set and not empty), else the per-user
    ``data/`` folder of :func:`~pyg_dist.datasets.cache.cache_home` (``$XDG_CACHE_HOME/pyg_dist/data``, else
    ``~/.cache/pyg_dist/data``); nothing outside the user's own folders is looked at by default."""
    env = raw("PYG_DIST_DATA")
    if env:
        return Path(env)
    from pyg_dist.datasets.cache import cache_home
    return cache_home() / "data"


def _raw_dir(root: Path, name: str) -> Optional[Path]:
    for cand in (root / name / "raw", root / "planetoid" / name / "raw", root / name.lower() / "raw"):
        if cand.is_dir() and any(cand.iterdir()):
            return cand
    return None


def load_planetoid(name: str, root: Union[str, Path, None] = None):
    """Loads a Planetoid graph from raw files already on disk (no download).

    PyG's ``Planetoid`` writes ``processed/`` next to ``raw/``; this copies the raw folder to a
    temporary directory first, so a read-only or shared input stays untouched. The raw pickles are
    checked with a restricted unpickler first (:mod:`pyg_dist.datasets.safe_pickle`).

    Args:
        name: ``"cora"``, ``"citeseer"`` or ``"pubmed"`` (any case).
        root: A folder holding ``<Name>/raw`` or ``planetoid/<Name>/raw``. Defaults to
            :func:`shared_data_root`.

    Returns:
        A ``torch_geometric.data.Data`` with ``x``, ``y``, ``edge_index`` and the split masks.

    Example:
        >>> data = load_planetoid("cora", "/data/shared/planetoid")  # doctest: +SKIP
    """
    from torch_geometric.datasets import Planetoid

    from pyg_dist.errors import require
    require("scipy", "reading Planetoid raw files (pickled scipy matrices)")
    canonical = _NAMES.get(str(name).lower())
    if canonical is None:
        raise InvalidArgumentError("load_planetoid", "name", name, f"one of {sorted(_NAMES)}")
    root = Path(root) if root is not None else shared_data_root()
    raw = _raw_dir(root, canonical)
    if raw is None:
        raise InvalidArgumentError("load_planetoid", "root", str(root),
                                   f"a folder holding {canonical}/raw or planetoid/{canonical}/raw (no raw "
                                   f"files for {canonical!r} found there)")
    with tempfile.TemporaryDirectory(prefix="pyg_dist_planetoid_") as tmp:
        shutil.copytree(raw, Path(tmp) / canonical / "raw")
        from pyg_dist.datasets.safe_pickle import check_planetoid_raw
        check_planetoid_raw(Path(tmp) / canonical / "raw")  # the copy PyG will read: no code runs on a crafted file
        data = Planetoid(tmp, canonical)[0]
    return data
