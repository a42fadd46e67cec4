"""``pyg-dist-warmup``: compile every numba kernel once, so that no later start pays for it.

numba compiles a kernel the first time a process calls it with new argument types, then keeps the machine
code in its cache (``cache=True``): where it looks, first to last, is ``$NUMBA_CACHE_DIR`` when set, else a
``__pycache__`` folder next to the installed sources when the process may write there, else a per-user folder
(``~/.cache/numba``, or ``$XDG_CACHE_HOME/numba``). A read-only install (a container image, a shared
site-packages) therefore compiles again for each user and each fresh container, unless the cache was warmed
where every start looks: run this command once at image build time, as the user who owns site-packages (the
kernels land beside the sources) or with ``NUMBA_CACHE_DIR`` set to a folder the runs will also be given::

    pyg-dist-warmup                       # prints the seconds and the cache folder(s)
    NUMBA_CACHE_DIR=/opt/numba-cache pyg-dist-warmup

Each kernel is called on tiny inputs of the types pyg_dist calls it with (int64 ids, float32 / float64
rows, the serial and the parallel builds), so loading them later reads the cache and compiles nothing.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Set

import numpy as np
import torch


def _warm_partition_kernels() -> None:
    """The CSR / CSC builders of the partitioner and of a partition's loading."""
    from pyg_dist.ops.graph_kernels import relabel_csc, symmetric_csr
    src, dst = torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0, 2, 1])
    symmetric_csr(src, dst, 3)                                    # sorted and symmetric: no merge
    symmetric_csr(torch.tensor([2, 0]), torch.tensor([0, 1]), 3)  # unsorted and one-way: sorts and merges
    inv = torch.tensor([2, 0, 1])
    relabel_csc(torch.stack([src, dst]), inv, inv, 3)
    relabel_csc(torch.stack([src, dst]), inv, inv, 3, order_in=torch.tensor([3, 2, 1, 0]))


def _warm_row_kernels() -> None:
    """Row copies of 16- and 8-bit rows, cache lookups, int8 row codes and the sparse optimizers' row updates."""
    from pyg_dist.ops.graph_kernels import split_by_slot
    from pyg_dist.ops.quant import dequantise_rows, quantise_rows
    from pyg_dist.ops.rows import copy_rows, take_rows
    ids = torch.tensor([1, 2])
    for dtype in (torch.bfloat16, torch.int8):  # rows of 2-byte and 1-byte words (16-bit features, int8 codes)
        copy_rows(torch.zeros(3, dtype=dtype), ids, torch.ones(3, dtype=dtype), ids)
        take_rows(torch.ones(3, dtype=dtype), ids, torch.empty(2, dtype=dtype))
    split_by_slot(np.array([7, 5, 9]), np.array([2, 0, 1]), np.array([3, -1, 0], dtype=np.int32), 5)
    for dtype in (torch.float32, torch.float64):
        rows = torch.arange(6, dtype=dtype).view(3, 2)
        q, scale, offset, _ = quantise_rows(rows, torch.tensor([2, 0]))
        dequantise_rows(torch.empty(3, 2, dtype=dtype), torch.tensor([0, 2]), q, scale, offset)
    from pyg_dist.ops import _numba_optim
    param, grad = np.zeros((3, 2), np.float32), np.ones((2, 2), np.float32)
    idx, none = np.array([2, 0], np.int64), np.empty(0, np.int64)
    expanded = torch.ones(1, 2).expand(2, 2).numpy()  # a sum's gradient: an expanded view, read in place
    for g in (grad, expanded):
        _numba_optim.adam_rows(param, param.copy(), param.copy(), np.zeros(3, np.int64), idx, g, none,
                               0.01, 0.9, 0.999, 1e-8)
        _numba_optim.adagrad_rows(param, param.copy(), idx, g, none, 0.01, 1e-10)


def warm_all() -> float:
    """Compiles (or loads) every numba kernel; returns the seconds. A no-op without numba."""
    from pyg_dist.ops.backend import numba_available
    from pyg_dist.ops.hop import warmup
    t0 = time.perf_counter()
    if not numba_available():
        return 0.0
    warmup()
    _warm_partition_kernels()
    _warm_row_kernels()
    return time.perf_counter() - t0


def cache_folders() -> List[Path]:
    """The folders numba keeps pyg_dist's compiled kernels in, as this process resolves them."""
    from pyg_dist.ops.backend import numba_available
    if not numba_available():
        return []
    from pyg_dist.ops import (
        _numba_book,
        _numba_csr,
        _numba_optim,
        _numba_quant,
        _numba_relabel,
        _numba_rows,
        _numba_sample,
    )
    seen: Set[Path] = set()
    for mod in (_numba_book, _numba_csr, _numba_optim, _numba_quant, _numba_relabel, _numba_rows, _numba_sample):
        for obj in vars(mod).values():
            cache = getattr(obj, "_cache", None)
            path = getattr(cache, "_cache_path", None)
            if path:
                seen.add(Path(path))
    return sorted(seen)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``pyg-dist-warmup`` (also rendered on the docs' command-line page)."""
    from pyg_dist._version import __version__
    p = argparse.ArgumentParser(prog="pyg-dist-warmup", description=(
        "Compile every numba kernel of pyg_dist once and print the seconds and the cache folder(s). "
        "Run it at image build time (see the operations guide on installing) so no start compiles."))
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point ``pyg-dist-warmup``."""
    build_parser().parse_args(argv)
    from pyg_dist.ops.backend import numba_available
    if not numba_available():
        print("numba is not installed: pyg_dist uses its torch kernels, nothing to compile")
        return 0
    seconds = warm_all()
    folders = cache_folders()
    files = sum(1 for f in folders for p in f.glob("*.nb[ic]")) if folders else 0
    print(f"kernels ready in {seconds:.1f} s; numba cache: {', '.join(map(str, folders))} ({files} files)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
