"""The int8 row codec of quantised remote rows: one affine code per row, min/max (numba with a torch twin).

Row ``r`` (its ``w`` values flattened, computed in float64) becomes ``w`` int8 codes and two float32 numbers::

    scale  = float32((max - min) / 255)
    offset = float32(min + 128 * scale)          # float32(min) when scale == 0 (a constant row)
    q      = clamp(round((v - offset) / scale), -128, 127)          # 0 when scale == 0
    v'     = q * scale + offset                   # decoded in float32 arithmetic

so code ``-128`` stands for ``min`` and ``127`` for ``max``. **Error bound**, per element:

    |v - v'| <= scale / 2  +  (2**-21 + u) * max(|min|, |max|)  +  2**-126

``scale / 2 = (max - min) / 510`` is the rounding to the nearest of 256 levels; the rest is float32 rounding
of the stored scale / offset and of the decode (``u``: the rounding of the attribute's own dtype when it is
narrower than float32: ``2**-11`` for float16, ``2**-8`` for bfloat16, else 0; ``2**-126`` covers float32's
subnormal range). :func:`error_bound` computes it per row. A row holding NaN / inf, or any value of
magnitude over :data:`MAX_MAGNITUDE` (``2**126``, where float32's decode could overflow), cannot be encoded:
:func:`quantise_rows` reports it and the caller decides (the owner refuses: :mod:`pyg_dist.store.quant`).

Example:
    >>> import torch
    >>> x = torch.tensor([[0.0, 1.0, 2.0, 5.1], [3.0, 3.0, 3.0, 3.0]])
    >>> q, scale, offset, bad = quantise_rows(x)
    >>> q.dtype, bad, offset[1].item()
    (torch.int8, -1, 3.0)
    >>> out = torch.empty(2, 4)
    >>> dequantise_rows(out, torch.tensor([1, 0]), q, scale, offset)
    >>> bool(((out[[1, 0]] - x).abs() <= error_bound(x)[:, None]).all())
    True
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops.backend import numba_available

#: Largest magnitude a row may hold to be encoded (above it float32's decode could overflow).
MAX_MAGNITUDE = 2.0 ** 126
#: Float32 rounding of the codec, relative to the row's largest magnitude (see the module docstring).
REL_ROUNDING = 2.0 ** -21
#: Rounding of the decoded value into an attribute narrower than float32 (unit roundoff of its dtype).
DTYPE_ROUNDING = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
_NUMBA_DTYPES = (torch.float32, torch.float64)
_EMPTY = torch.empty(0, dtype=torch.int64)


def _flat(t: Tensor) -> Tensor:
    return t.reshape(t.size(0), -1)


def quantise_rows(src: Tensor, rows: Optional[Tensor] = None, q: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor, Tensor, int]:
    """Encodes ``src[rows]`` (``rows=None``: every row of ``src``), a floating tensor of any row shape.

    Args:
        src: ``[N, *shape]`` floating rows.
        rows: 1-D int64 rows of ``src`` to encode (in range: the caller's ids are validated), or ``None``.
        q: Where to write the codes (``[n, *shape]`` int8, contiguous), e.g. from a buffer pool; default: new.

    Returns:
        ``(q, scale, offset, bad)``: int8 codes shaped like the rows, float32 ``[n]`` scales and offsets, and
        ``-1``, or the first row (of the output) that cannot be encoded (NaN / inf, or a magnitude over
        :data:`MAX_MAGNITUDE`; the codes, scales and offsets are then incomplete).

    Raises:
        InvalidArgumentError: ``src`` is not floating, or ``q`` does not fit.
        IndexError: a row is out of range.
    """
    if not src.is_floating_point() or src.dim() < 1:
        raise InvalidArgumentError("quantise_rows", "src", (src.dtype, tuple(src.shape)), "floating rows")
    n = src.size(0) if rows is None else rows.numel()
    shape = (n,) + tuple(src.shape[1:])
    if q is None:
        q = torch.empty(shape, dtype=torch.int8)
    elif q.dtype != torch.int8 or tuple(q.shape) != shape or not q.is_contiguous():
        raise InvalidArgumentError("quantise_rows", "q", (q.dtype, tuple(q.shape)), f"a contiguous int8 {shape}")
    scale, offset = torch.empty(n, dtype=torch.float32), torch.empty(n, dtype=torch.float32)
    if n == 0 or math.prod(shape[1:]) == 0:
        scale.zero_()
        return q, scale, offset.zero_(), -1
    if numba_available() and src.dtype in _NUMBA_DTYPES and src.device.type == "cpu" and src.is_contiguous():
        from pyg_dist.ops._numba_quant import quantise_rows as kernel
        idx = _EMPTY if rows is None else rows.to(torch.int64).contiguous()
        status, i = kernel(_flat(src).numpy(), idx.numpy(), MAX_MAGNITUDE, _flat(q).numpy(), scale.numpy(),
                           offset.numpy())
        if status == 2:
            raise IndexError(f"quantise_rows: rows[{i}] = {int(idx[i])} is out of range for src with "
                             f"{src.size(0)} rows")
        return q, scale, offset, (i if status == 1 else -1)
    return _quantise_torch(src if rows is None else src.index_select(0, rows), q, scale, offset)


def _quantise_torch(rows: Tensor, q: Tensor, scale: Tensor, offset: Tensor) -> Tuple[Tensor, Tensor, Tensor, int]:
    """The torch twin of the numba kernel (the same float64 formulas)."""
    x = _flat(rows).to(torch.float64)
    bad = (~(x.abs() <= MAX_MAGNITUDE)).any(1).nonzero().view(-1)
    if bad.numel():
        return q, scale, offset, int(bad[0])
    lo, hi = x.amin(1), x.amax(1)
    scale.copy_((hi - lo) / 255.0)
    s = scale.to(torch.float64)
    const = s == 0
    offset.copy_(torch.where(const, lo, lo + 128.0 * s))
    inv = torch.where(const, torch.zeros_like(s), 1.0 / torch.where(const, torch.ones_like(s), s))
    codes = ((x - offset.to(torch.float64)[:, None]) * inv[:, None]).round_().clamp_(-128.0, 127.0)
    _flat(q).copy_(codes)
    return q, scale, offset, -1


def dequantise_rows(out: Tensor, pos: Tensor, q: Tensor, scale: Tensor, offset: Tensor,
                    index: Optional[Tensor] = None) -> None:
    """Decodes rows into place: ``out[pos[i]] = q[index[i]] * scale[index[i]] + offset[index[i]]`` (``index``
    None: row ``i``), in float32 arithmetic, cast to ``out``'s dtype.

    Raises:
        InvalidArgumentError: ``out`` is not floating, row shapes differ, or the lengths do not match.
        IndexError: a position or row is out of range (the entries before it are written).
    """
    n = pos.numel()
    if not out.is_floating_point() or q.dtype != torch.int8 or out.shape[1:] != q.shape[1:]:
        raise InvalidArgumentError("dequantise_rows", "q", (q.dtype, tuple(q.shape)),
                                   f"int8 rows shaped {tuple(out.shape[1:])} for a floating out ({out.dtype})")
    if scale.shape != (q.size(0),) or offset.shape != (q.size(0),) or (q.size(0) if index is None
                                                                       else index.numel()) != n:
        raise InvalidArgumentError("dequantise_rows", "scale / offset / index", (tuple(scale.shape), n),
                                   "one scale and offset per row of q, one row per position")
    if n == 0:
        return
    s, o = scale.to(torch.float32).contiguous(), offset.to(torch.float32).contiguous()
    if numba_available() and out.dtype in _NUMBA_DTYPES and out.device.type == "cpu" and out.is_contiguous():
        from pyg_dist.ops._numba_quant import dequantise_rows as kernel
        p = pos.to(torch.int64).contiguous()
        idx = _EMPTY if index is None else index.to(torch.int64).contiguous()
        bad = kernel(_flat(out).numpy(), p.numpy(), _flat(q.contiguous()).numpy(), s.numpy(), o.numpy(), idx.numpy())
        if bad >= 0:
            row = bad if index is None else int(idx[bad])
            raise IndexError(f"dequantise_rows: entry {bad} decodes row {row} of {q.size(0)} to position "
                             f"{int(p[bad])} of an output with {out.size(0)} rows")
        return
    src = q if index is None else q.index_select(0, index)
    s, o = (s, o) if index is None else (s.index_select(0, index), o.index_select(0, index))
    vals = _flat(src).to(torch.float32).mul_(s[:, None]).add_(o[:, None])
    from pyg_dist.ops.rows import copy_rows
    copy_rows(out, pos, vals.view(src.shape).to(out.dtype))


def error_bound(rows: Tensor) -> Tensor:
    """Per row of ``rows`` (floating, any row shape), the largest ``|v - v'|`` the codec allows (float64 ``[n]``):
    ``scale / 2 + (2**-21 + u) * max(|min|, |max|) + 2**-126`` (see the module docstring)."""
    x = _flat(rows).to(torch.float64)
    if x.size(1) == 0:
        return torch.zeros(x.size(0), dtype=torch.float64)
    scale = ((x.amax(1) - x.amin(1)) / 255.0).to(torch.float32).to(torch.float64)
    rel = REL_ROUNDING + DTYPE_ROUNDING.get(rows.dtype, 0.0)
    return scale / 2 + rel * x.abs().amax(1) + 2.0 ** -126


__all__ = ["quantise_rows", "dequantise_rows", "error_bound", "MAX_MAGNITUDE", "REL_ROUNDING", "DTYPE_ROUNDING"]
