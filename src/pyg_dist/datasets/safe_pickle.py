"""Checking Planetoid's raw pickles with a restricted unpickler before anything else reads them.

Planetoid raw files (``ind.<name>.{x,tx,allx,y,ty,ally,graph}``) are Python pickles, and PyG's reader
unpickles them with the full ``pickle`` module: a crafted file would run its author's code. Each file is
first unpickled here by an unpickler that admits only the types these files hold (numpy arrays and
dtypes, scipy sparse matrices, ``defaultdict`` and ``list``); any other global is a
:class:`~pyg_dist.errors.DataFileError` naming the file and the global, raised before a single
object of it is built.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from pyg_dist.errors import DataFileError

#: (module, name) pairs a Planetoid raw file may reference (several numpy / scipy module spellings).
ALLOWED = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
    ("scipy.sparse.csc", "csc_matrix"), ("scipy.sparse._csc", "csc_matrix"),
    ("scipy.sparse.lil", "lil_matrix"), ("scipy.sparse._lil", "lil_matrix"),
    ("collections", "defaultdict"), ("builtins", "list"), ("builtins", "dict"), ("builtins", "set"),
    ("__builtin__", "list"), ("__builtin__", "dict"), ("__builtin__", "set"), ("__builtin__", "object"),
    ("copy_reg", "_reconstructor"), ("copyreg", "_reconstructor"), ("builtins", "object"),
}


class _Restricted(pickle.Unpickler):
    def __init__(self, fh, path: Path):
        super().__init__(fh, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise DataFileError(self.path, f"refers to {module}.{name}, which a Planetoid raw file never "
                                       "holds (a crafted file? nothing of it was run)")
        if module.startswith("scipy.sparse."):  # the public name: scipy deprecates its old private modules
            import scipy.sparse
            return getattr(scipy.sparse, name)
        return super().find_class(module, name)


def check_pickle(path) -> None:
    """Unpickles ``path`` with only :data:`ALLOWED` globals; raises DataFileError otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            _Restricted(fh, path).load()
    except DataFileError:
        raise
    except Exception as e:  # noqa: BLE001 -- a truncated or corrupt pickle
        raise DataFileError(path, f"not a readable Planetoid raw file ({type(e).__name__}: {e})") from None


def check_planetoid_raw(raw_dir) -> None:
    """Checks every pickled file of a Planetoid ``raw/`` folder (``*.test.index`` is plain text)."""
    for path in sorted(Path(raw_dir).iterdir()):
        if path.is_file() and path.name.startswith("ind.") and not path.name.endswith(".test.index"):
            check_pickle(path)


__all__ = ["check_pickle", "check_planetoid_raw", "ALLOWED"]
