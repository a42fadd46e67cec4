"""Integers on the wire as int32: the one place where a message's int64 tensors narrow and widen again.

Ids dominate the sampling traffic (seeds out, sampled neighbours and edge ids back, the ids of every feature
request) and are int64 in memory. Before a message crosses to another process (:func:`~pyg_dist.rpc.call_async`
sends the payload, the callee's process sends the reply), :func:`pack` replaces every CPU int64 tensor of at
least :data:`MIN_NUMEL` entries whose values all fit in int32 by an :class:`Int32` holding the narrowed copy;
on arrival :func:`unpack` widens each back to int64, so callees and callers only ever see int64 and the
conversion is exact (a tensor that does not fit travels as it is). It is decided by the values, so it covers
every message: ids of every type whose ids fit (any graph under 2**31 nodes and edges per type), counts,
indices, timestamps that fit. Calls answered in the same process are not packed.

:func:`unpack` trusts nothing: an :class:`Int32` must hold an int32 tensor, else :class:`~pyg_dist.errors.
PyGDistError` naming the peer. It also returns the bytes of the tensors as they travelled.

Example:
    >>> import torch
    >>> from pyg_dist.ops import OneHop
    >>> msg = OneHop(torch.arange(1000), torch.arange(1000) * 2 ** 32, torch.ones(1000, dtype=torch.int64))
    >>> packed = pack(msg)
    >>> type(packed.nbr).__name__, packed.edge.dtype, type(packed.count).__name__
    ('Int32', torch.int64, 'Int32')
    >>> back, nbytes = unpack(packed, "rank 1")
    >>> torch.equal(back.nbr, msg.nbr), torch.equal(back.edge, msg.edge), back.count.dtype, nbytes
    (True, True, torch.int64, 16000)
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, List, Tuple

import torch
from torch import Tensor

from ..errors import PyGDistError

#: Smallest int64 tensor worth narrowing (below it the range check costs more than the bytes it saves).
MIN_NUMEL = 256
_LO, _HI = -2 ** 31, 2 ** 31 - 1


@dataclass(frozen=True)
class Int32:
    """An int64 tensor in transit as int32 (every value fits); :func:`unpack` widens it back."""
    t: Tensor


def pack(obj: Any) -> Any:
    """``obj`` (a message: dataclasses, named tuples, tuples, lists and dicts of tensors) with every CPU int64
    tensor of at least :data:`MIN_NUMEL` entries that fits in int32 replaced by an :class:`Int32`; the objects
    that hold one are shallow copies (``obj`` itself is not changed)."""
    return _walk(obj, _narrow)


def unpack(obj: Any, peer: str) -> Tuple[Any, int]:
    """A message from ``peer`` with every :class:`Int32` widened back to int64, and the bytes of its tensors
    as they travelled.

    Raises:
        PyGDistError: an :class:`Int32` holds anything but an int32 tensor (names ``peer``).
    """
    sizes: List[int] = []

    def widen(leaf: Any) -> Any:
        if isinstance(leaf, Int32):
            t = leaf.t
            if not isinstance(t, Tensor) or t.dtype != torch.int32:
                raise PyGDistError(f"{peer} sent narrowed ids that are not an int32 tensor: "
                                   f"{getattr(t, 'dtype', type(t).__name__)} (do all processes run the same "
                                   "pyg_dist?)")
            sizes.append(t.numel() * 4)
            return t.to(torch.int64)
        sizes.append(leaf.numel() * leaf.element_size())
        return leaf

    out = _walk(obj, widen)
    return out, sum(sizes)


def nbytes(obj: Any) -> int:
    """Bytes of the tensors of message ``obj`` as :func:`pack` would send them (int64 tensors that narrow count
    4 bytes per entry; an :class:`Int32` counts its int32 tensor), without copying anything."""
    sizes: List[int] = []

    def count(leaf: Any) -> Any:
        if isinstance(leaf, Int32):
            sizes.append(leaf.t.numel() * 4)
        elif _fits(leaf):
            sizes.append(leaf.numel() * 4)
        else:
            sizes.append(leaf.numel() * leaf.element_size())
        return leaf

    _walk(obj, count)
    return sum(sizes)


def _fits(t: Tensor) -> bool:
    """Whether ``t`` narrows: a CPU int64 tensor of at least :data:`MIN_NUMEL` entries, all in int32's range."""
    if t.dtype != torch.int64 or t.numel() < MIN_NUMEL or t.device.type != "cpu":
        return False
    arr = t.numpy()  # numpy: single-threaded passes
    return _LO <= int(arr.min()) and int(arr.max()) <= _HI


def _narrow(t: Any) -> Any:
    return Int32(t.to(torch.int32)) if isinstance(t, Tensor) and _fits(t) else t


def _walk(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    """``obj`` with ``leaf`` applied to every tensor and :class:`Int32` in it; containers are rebuilt only
    where something changed."""
    if isinstance(obj, (Tensor, Int32)):
        return leaf(obj)
    kind = type(obj)
    if kind in (list, tuple) or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
        items = [_walk(v, leaf) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return items if kind is list else (kind(*items) if kind is not tuple else tuple(items))
    if kind is dict:
        new = {k: _walk(v, leaf) for k, v in obj.items()}
        return obj if all(new[k] is v for k, v in obj.items()) else new
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _walk_dataclass(obj, leaf)
    return obj


def _walk_dataclass(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    changed = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        new = _walk(value, leaf)
        if new is not value:
            changed[f.name] = new
    if not changed:
        return obj
    out = copy.copy(obj)  # no __init__ / __post_init__ rerun; frozen fields set as the dataclass itself does
    for name, value in changed.items():
        object.__setattr__(out, name, value)
    return out


__all__ = ["MIN_NUMEL", "Int32", "pack", "unpack", "nbytes"]
