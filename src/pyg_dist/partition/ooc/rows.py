"""One partition's rows of each node or edge attribute, written in chunks into memory-mapped tensors.

The out-of-core writer's attribute half (:func:`mapped_rows`): rows are taken (read from the input, or computed
by a generated source such as :mod:`pyg_dist.datasets.papers_like`'s features) a chunk at a time, checked for
NaN / inf, cast to the stored dtype (``feature_dtype`` for features) and written straight into a tensor over a
scratch file, which ``torch.save`` then streams into the partition's file. Working memory: one chunk (the memory
budget's share) instead of the partition's whole attribute in its source dtype, its cast copy and the checks'
masks (a 55 M-row, 128-wide float32 feature: 28 GB, 14 GB more in bfloat16). The checks see every row, and
their lines and errors name the same rows as a check of the whole would (:func:`pyg_dist.partition.source.
nonfinite_rows`, :func:`pyg_dist.format.precision.cast_features`).

Example:
    >>> import numpy as np, torch, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> out = mapped_rows({"x": torch.arange(12.).view(6, 2)}, np.array([5, 0, 2]), "node attribute _N", [],
    ...                   False, torch.bfloat16, folder / "x", budget=8)
    >>> out["x"].dtype, out["x"].tolist()
    (torch.bfloat16, [[10.0, 11.0], [0.0, 1.0], [4.0, 5.0]])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist import _fsio
from pyg_dist.format.precision import cast_rows, overflow_error, stored_dtype
from pyg_dist.partition.ooc.chunked import take_rows
from pyg_dist.partition.source import nonfinite_line, nonfinite_mask

_WHERE = "OutOfCorePartitioner"


class _Rows:
    """Rows flagged across chunks: how many, and the first five (global row numbers)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: List[int] = []

    def add(self, lo: int, bad: Optional[Tensor]) -> None:
        if bad is not None:
            rows = bad.nonzero().view(-1)
            self.count += rows.numel()
            self.first += (rows[:5 - len(self.first)] + lo).tolist() if len(self.first) < 5 else []


def mapped_tensor(path: Path, shape: Tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """A writable tensor of ``shape`` and ``dtype`` over the file ``path`` (typed error when the disk is full)."""
    n = int(np.prod(shape))
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    size = torch.empty(0, dtype=dtype).element_size()
    np_dtype = np.dtype(f"u{size}") if dtype == torch.bfloat16 else torch.empty(0, dtype=dtype).numpy().dtype
    with _fsio.writing(path, needed=n * size):
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np_dtype, shape=shape)
    out = torch.from_numpy(array)
    return out.view(torch.bfloat16) if dtype == torch.bfloat16 else out


def _attr(name: str, label: str, source: Any, idx: np.ndarray, tally: list, allow: bool,
          feature_dtype: Optional[torch.dtype], path: Path, budget: int) -> Tensor:
    """One attribute's rows ``idx`` in chunks (see the module docstring); non-finite lines go to ``tally``."""
    head = take_rows(source, idx[:1], feature_dtype)
    want = stored_dtype(name, head.dtype, feature_dtype)
    row_bytes = max(1, head[0].numel() * head.element_size()) if head.size(0) else 1
    step = max(1, budget // (4 * row_bytes))  # the chunk in its source dtype, its cast, the checks' masks
    out = mapped_tensor(path, (idx.size,) + tuple(head.shape[1:]), want)
    nonfinite, overflow, top = _Rows(), _Rows(), 0.0
    for lo in range(0, idx.size, step):
        chunk = take_rows(source, idx[lo:lo + step], feature_dtype)
        nonfinite.add(lo, nonfinite_mask(chunk))
        cast, bad = (chunk, None) if want == chunk.dtype else cast_rows(chunk, want)
        if bad is not None and not overflow.count:
            top = float(chunk[bad.nonzero().view(-1)[0]].abs().max())
        overflow.add(lo, bad)
        out[lo:lo + chunk.size(0)] = cast
    where = f"{label}.{name}"
    if nonfinite.count:
        tally.append(nonfinite_line(_WHERE, where, nonfinite.count, nonfinite.first, allow, " in one partition"))
    if overflow.count:
        overflow_error(_WHERE, "feature_dtype", want, where, overflow.count, overflow.first, top)
    return out


def mapped_rows(attrs: Dict[str, Any], idx: np.ndarray, label: str, tally: list, allow: bool,
                feature_dtype: Optional[torch.dtype], scratch: Path, budget: int) -> Dict[str, Tensor]:
    """Rows ``idx`` of every attribute in ``attrs``, each over a file ``<scratch>.<name>.npy`` (removed by
    :func:`drop_scratch` once saved); lines about non-finite rows kept (``allow``) are appended to ``tally``."""
    return {k: _attr(k, label, v, idx, tally, allow, feature_dtype, Path(f"{scratch}.{k}.npy"), budget)
            for k, v in attrs.items()}


def drop_scratch(scratch: Path, names) -> None:
    """Removes the files :func:`mapped_rows` made for ``names``."""
    for k in names:
        Path(f"{scratch}.{k}.npy").unlink(missing_ok=True)


__all__ = ["mapped_tensor", "mapped_rows", "drop_scratch"]
