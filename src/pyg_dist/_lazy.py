"""Lazy public names for package ``__init__`` modules: imported on first attribute access.

Example::

    __getattr__, __dir__, __all__ = lazy_names(__name__, {"NeighborLoader": "pyg_dist.loader.node_loader"})
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Tuple


def lazy_names(package: str, names: Dict[str, str],
               eager: Tuple[str, ...] = ()) -> Tuple[Callable[[str], object], Callable[[], List[str]], List[str]]:
    """``(__getattr__, __dir__, __all__)`` of a package whose ``names`` map to defining modules."""
    public = sorted(set(names) | set(eager))

    def __getattr__(name: str):
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups are plain attribute reads (hot paths use them)
        return value

    def __dir__() -> List[str]:
        return public

    return __getattr__, __dir__, public
