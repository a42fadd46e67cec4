"""The per-user cache folder of pyg_dist's data: ``$XDG_CACHE_HOME/pyg_dist``, else ``~/.cache/pyg_dist``.

Generated graphs (:mod:`pyg_dist.datasets.products_like`) are kept under it, and ``$PYG_DIST_DATA`` defaults to
its ``data/`` folder (:func:`pyg_dist.datasets.planetoid.shared_data_root`). Nothing outside the user's own
cache is read or written by default.
"""
from __future__ import annotations

import os
from pathlib import Path

from pyg_dist.envvars import raw


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/pyg_dist`` (when set and not empty), else ``~/.cache/pyg_dist``; not created here.

    Example:
        >>> cache_home().name
        'pyg_dist'
    """
    base = raw("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyg_dist"
