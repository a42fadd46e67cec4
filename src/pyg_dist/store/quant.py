"""Quantised remote rows: the opt-in wire format of feature lookups (``remote_rows="int8"``).

A :class:`~pyg_dist.store.lookup.LookupRequest` says which format it wants (``remote_rows``; ``"exact"``, the
default, is what every older request means). With ``"int8"`` the owner encodes each row of a quantised
attribute (:func:`quantised`: floating, not a label / time / weight, and smaller that way) as int8 codes plus
a float32 scale and offset per row (:mod:`pyg_dist.ops.quant`: affine min/max, 256 levels); the requester checks
every chunk on arrival (:func:`check_chunks`) and decodes it straight into the
batch's output rows (:func:`place_chunk`). Everything else travels exact: labels, masks, ids, time, integer
attributes, narrow rows, and every row read locally or from the cache.

**Encoded once.** The owner encodes a whole column the first time a peer asks for it as int8 and keeps the
codes (:class:`RowCodes`: ``d + 8`` bytes per owned row of a ``d``-value attribute, about a quarter of a float32
column); serving then only gathers codes, scales and offsets, which costs less CPU than gathering the exact
rows. A column that changes afterwards (a learnable embedding, a replaced tensor), or that holds a row the
codec cannot carry, is encoded per request instead, so every reply decodes exactly what the column holds
when it is served.

Wire bytes of a float32 row of ``d`` values: ``d + 8`` instead of ``4 d`` (100-dim: 108 vs 400, 3.7x fewer).
**Error bound** per element: ``|v - v'| <= scale / 2 + (2**-21 + u) * max(|min|, |max|) + 2**-126`` with
``scale = (max - min) / 255`` over the row (``u``: 0 for float32 / float64, ``2**-11`` float16, ``2**-8``
bfloat16), i.e. half a level plus float32 rounding (:func:`pyg_dist.ops.quant.error_bound`).

Rows the codec cannot carry (NaN / inf, or a magnitude over ``2**126``: only in folders partitioned with
``allow_nonfinite=True``) are refused by the owner with :class:`~pyg_dist.errors.QuantisationError` naming the
partition, attribute and global id (the requester raises it as ``RemoteCallError``): ask for them with
``remote_rows="exact"``. An owner's reply bytes (its budget, the reply cap, the chunk size) count the wire bytes.

Example:
    >>> import torch
    >>> col = torch.randn(5, 16)
    >>> chunk = encode_rows(col, torch.tensor([4, 1]), "x of '_N'")
    >>> out = torch.zeros(3, 16)
    >>> place_chunk(out, torch.tensor([2, 0]), check_chunks(1, "x", [chunk], out, 2, "int8")[0])
    >>> bool(((out[2] - col[4]).abs() <= 0.1).all()), quantised("x", col.dtype, col.shape[1:])
    (True, True)
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, PyGDistError, QuantisationError
from pyg_dist.format import precision

#: Values of ``remote_rows``: how rows owned by other partitions travel.
REMOTE_ROWS = ("exact", "int8")
#: Attributes that always travel exact, whatever their dtype: the ones a folder never casts either (labels,
#: times, the sampling weight: :data:`pyg_dist.format.precision.EXACT_ATTRS`).
EXACT_ATTRS = precision.EXACT_ATTRS
#: Wire bytes a quantised row adds to its codes: its float32 scale and offset.
ROW_OVERHEAD = 8


@dataclass(frozen=True)
class QuantRows:
    """Consecutive rows of one attribute in the int8 wire format (one chunk of a reply).

    Attributes:
        q: int8 codes, ``[n, *row shape]``.
        scale: float32 ``[n]``, finite and >= 0.
        offset: float32 ``[n]``, finite. Row ``i`` decodes to ``q[i] * scale[i] + offset[i]``.
    """
    q: Tensor
    scale: Tensor
    offset: Tensor

    @property
    def rows(self) -> int:
        return self.q.size(0)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.scale, self.offset))


Chunk = Union[Tensor, QuantRows]


def check_remote_rows(where: str, value: Any) -> str:
    """``value`` when it is one of :data:`REMOTE_ROWS`, else :class:`InvalidArgumentError` naming ``where``."""
    if not isinstance(value, str) or value not in REMOTE_ROWS:
        raise InvalidArgumentError(where, "remote_rows", value, f"one of {list(REMOTE_ROWS)} ('exact': rows as "
                                   "stored; 'int8': floating feature rows of other partitions as 8-bit codes)")
    return value


def quantised(name: str, dtype: torch.dtype, row_shape: Sequence[int]) -> bool:
    """Whether attribute ``name`` (rows of ``dtype`` shaped ``row_shape``) travels as int8 when asked: floating,
    not in :data:`EXACT_ATTRS`, and fewer bytes that way (``d + 8 < d * itemsize``: float32 from 3 values)."""
    if not dtype.is_floating_point or name in EXACT_ATTRS:
        return False
    d = math.prod(row_shape)
    return d + ROW_OVERHEAD < d * dtype.itemsize


def wire_row_bytes(col: Tensor, name: str, remote_rows: str) -> int:
    """Bytes one row of ``col`` (attribute ``name``) takes in a reply of format ``remote_rows``."""
    d = math.prod(col.shape[1:])
    if remote_rows == "int8" and quantised(name, col.dtype, col.shape[1:]):
        return d + ROW_OVERHEAD
    return d * col.element_size()


def encode_rows(col: Tensor, rows: Tensor, what: str, q: Optional[Tensor] = None,
                name_row: Optional[Callable[[int], str]] = None) -> QuantRows:
    """``col[rows]`` in the int8 wire format (``q``: where to write the codes, e.g. a pooled buffer).

    Raises:
        QuantisationError: a row holds NaN / inf or a magnitude over ``2**126``; the message names ``what``
            (the owner's partition, group and attribute) and the row (``name_row(row of col)``, e.g. its
            global id; default ``"row <r>"``).
    """
    from pyg_dist.ops.quant import quantise_rows
    codes, scale, offset, bad = quantise_rows(col, rows, q)
    if bad >= 0:
        row = int(rows[bad])
        raise QuantisationError(f"{what}: {name_row(row) if name_row else f'row {row}'} holds NaN / inf or a "
                                "magnitude over 2**126, which int8 rows cannot carry; fetch this folder's rows "
                                "with remote_rows='exact'")
    return QuantRows(codes, scale, offset)


class RowCodes:
    """The int8 codes of whole columns, encoded once (one per serving store; thread-safe).

    :meth:`encode` answers ``col[rows]`` in the int8 wire format: from the column's codes, encoded on first use
    and kept while the column is the same tensor, unchanged (same storage, shape, dtype and in-place version).
    A column that changed since, or that holds a row the codec refuses, is encoded per request from then on
    (:func:`encode_rows`: the refusal names the row), so the codes always match what the column holds.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._codes: Dict[Hashable, Tuple[Tuple[Any, ...], Optional[QuantRows]]] = {}

    @property
    def nbytes(self) -> int:
        """Bytes of the codes kept."""
        return sum(c.nbytes for _, c in self._codes.values() if c is not None)

    def encode(self, key: Hashable, col: Tensor, rows: Tensor, what: str, pool=None,
               name_row: Optional[Callable[[int], str]] = None) -> QuantRows:
        """``col[rows]`` (column ``key``, e.g. ``(group, name)``) as int8 rows; ``pool``: where large code
        gathers go (a :class:`~pyg_dist.store.buffers.BufferPool`). Raises as :func:`encode_rows`."""
        codes = self._column_codes(key, col)
        if codes is None:
            buf = None if pool is None else pool.empty((rows.numel(),) + tuple(col.shape[1:]), torch.int8)
            return encode_rows(col, rows, what, buf, name_row)
        from pyg_dist.store.buffers import gather_rows
        return QuantRows(gather_rows(codes.q, rows, pool), codes.scale.index_select(0, rows),
                         codes.offset.index_select(0, rows))

    def _column_codes(self, key: Hashable, col: Tensor) -> Optional[QuantRows]:
        stamp = (col.data_ptr(), tuple(col.shape), col.dtype, col._version)
        with self._lock:  # one encoding per column, whichever serving thread asks first
            kept = self._codes.get(key)
            if kept is None:
                q, scale, offset, bad = _encode_column(col)
                kept = (stamp, None if bad >= 0 else QuantRows(q, scale, offset))
                self._codes[key] = kept
            elif kept[0] != stamp and kept[1] is not None:
                kept = (stamp, None)  # changed since: per request from now on (it may change again)
                self._codes[key] = kept
            return kept[1]


def _encode_column(col: Tensor) -> Tuple[Tensor, Tensor, Tensor, int]:
    from pyg_dist.ops.quant import quantise_rows
    return quantise_rows(col if col.is_contiguous() else col.contiguous())


def check_chunks(partition: int, name: str, chunks: Any, dst: Tensor, rows: int, remote_rows: str) -> List[Chunk]:
    """``chunks`` when it is a list of chunks holding ``rows`` rows for ``dst`` (exact tensors shaped and typed
    like ``dst``'s rows; with ``remote_rows="int8"`` and a quantised attribute, also :class:`QuantRows` with
    int8 codes of that shape and finite float32 scales >= 0 and offsets, one per row).

    Raises:
        QuantisationError: a malformed quantised chunk (names the partition and attribute).
        PyGDistError: any other mismatch (the partitions do not come from the same folder).
    """
    quant = remote_rows == "int8" and quantised(name, dst.dtype, dst.shape[1:])
    ok = isinstance(chunks, list)
    for c in chunks if ok else ():
        if quant and isinstance(c, QuantRows):
            _check_quant(partition, name, c, dst)
        elif not (isinstance(c, Tensor) and c.dtype == dst.dtype and c.dim() == dst.dim()
                  and c.shape[1:] == dst.shape[1:]):
            ok = False
    if not ok or sum(c.rows if isinstance(c, QuantRows) else c.size(0) for c in chunks) != rows:
        got = None if not isinstance(chunks, list) else [_describe(c) for c in chunks[:3]]
        raise PyGDistError(f"partition {partition} answered attribute {name!r} with {got}; expected {rows} rows "
                           f"of {dst.dtype} {tuple(dst.shape[1:])}{' (or int8 rows)' if quant else ''} (do the "
                           "partitions come from the same folder?)")
    return chunks


def _check_quant(partition: int, name: str, c: QuantRows, dst: Tensor) -> None:
    q, scale, offset = c.q, c.scale, c.offset
    n = q.size(0) if isinstance(q, Tensor) and q.dim() else -1
    problem = None
    if not isinstance(q, Tensor) or q.dtype != torch.int8 or q.dim() != dst.dim() or q.shape[1:] != dst.shape[1:]:
        problem = f"codes {_describe(q)}, expected int8 rows shaped {tuple(dst.shape[1:])}"
    elif not all(isinstance(t, Tensor) and t.dtype == torch.float32 and tuple(t.shape) == (n,)
                 for t in (scale, offset)):
        problem = f"scale {_describe(scale)} / offset {_describe(offset)}, expected float32 [{n}] each"
    elif not bool(torch.isfinite(scale).all()) or not bool(torch.isfinite(offset).all()) or \
            bool((scale < 0).any()):
        problem = "non-finite scales or offsets, or negative scales"
    elif n and dst.dtype.is_floating_point:  # the decoding target: rows the stored dtype cannot hold are refused
        lo = float((offset.double() - 128 * scale.double()).min())
        hi = float((offset.double() + 127 * scale.double()).max())
        if not bool(torch.isfinite(torch.tensor([lo, hi], dtype=torch.float64).to(dst.dtype)).all()):
            problem = f"rows decode to [{lo:g}, {hi:g}], beyond {dst.dtype} (the attribute's stored dtype)"
    if problem is not None:
        raise QuantisationError(f"partition {partition} answered attribute {name!r} with malformed int8 rows: "
                                f"{problem} (do all processes run the same pyg_dist?)")


def _describe(c: Any) -> Any:
    if isinstance(c, QuantRows):
        return ("int8 rows", tuple(getattr(c.q, "shape", ())))
    return (getattr(c, "dtype", type(c)), tuple(getattr(c, "shape", ())))


def place_chunk(out: Tensor, pos: Tensor, chunk: Chunk, index: Optional[Tensor] = None) -> None:
    """``out[pos[i]] = chunk[index[i]]`` (``index`` None: row ``i``), decoding a :class:`QuantRows` on the way."""
    if isinstance(chunk, QuantRows):
        from pyg_dist.ops.quant import dequantise_rows
        dequantise_rows(out, pos, chunk.q, chunk.scale, chunk.offset, index)
    else:
        from pyg_dist.ops.rows import copy_rows
        copy_rows(out, pos, chunk, index)


def chunk_rows(chunk: Chunk) -> int:
    """Rows in a chunk of either format."""
    return chunk.rows if isinstance(chunk, QuantRows) else chunk.size(0)


def chunk_tensors(chunk: Chunk) -> List[Tensor]:
    """The tensors a chunk sends."""
    return [chunk.q, chunk.scale, chunk.offset] if isinstance(chunk, QuantRows) else [chunk]


def reply_bytes(reply: Any) -> int:
    """Tensor bytes of a :class:`~pyg_dist.store.lookup.LookupReply` as it travelled (codes, scales and offsets
    of int8 rows; the index of a de-duplicated answer)."""
    total = sum(sum(t.numel() * t.element_size() for c in chunks for t in chunk_tensors(c))
                for v in reply.values for chunks in v.values())
    return total + sum(i.numel() * i.element_size() for i in (getattr(reply, "index", None) or ()) if i is not None)


__all__ = ["REMOTE_ROWS", "EXACT_ATTRS", "QuantRows", "check_remote_rows", "quantised", "wire_row_bytes",
           "encode_rows", "RowCodes", "check_chunks", "place_chunk", "chunk_rows", "chunk_tensors", "reply_bytes"]
