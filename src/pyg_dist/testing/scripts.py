"""Scripts and examples (files outside the package) loaded as modules, for the tests that check them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional, Union


def load_script(path: Union[str, Path], name: Optional[str] = None, register: bool = False) -> ModuleType:
    """The Python file ``path`` run as a fresh module named ``name`` (default: the file's stem).

    Args:
        path: The file (a script in ``scripts/`` or an example).
        name: The module's name.
        register: Also put it in ``sys.modules`` (dataclasses and pickle look a module up there).
    """
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"load_script: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
