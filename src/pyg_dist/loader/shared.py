"""Sending a batch from a DataLoader worker in ONE shared-memory block.

torch hands every tensor storage a worker returns to the main process through its own shared-memory
segment: one ``shm`` file, ``ftruncate``, ``mmap`` and descriptor transfer per storage, about 0.7 ms
each on this machine, more than sampling a small batch costs. :func:`pack_shared` copies every CPU
tensor of a sampler output into slices of a single shared block first, so a batch costs one segment
whatever the number of node and edge types. Measured by ``scripts/bench_workers.py``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

import torch
from torch import Tensor

_ALIGN = 64


def _walk(obj: Any, found: Dict[int, Tensor]) -> None:
    if isinstance(obj, Tensor):
        if obj.device.type == "cpu" and not obj.is_shared():
            found.setdefault(id(obj), obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk(v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _walk(v, found)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _walk(getattr(obj, f.name), found)


def _rebuild(obj: Any, moved: Dict[int, Tensor]) -> Any:
    if isinstance(obj, Tensor):
        return moved.get(id(obj), obj)
    if isinstance(obj, dict):
        return type(obj)((k, _rebuild(v, moved)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # NamedTuple metadata
        return type(obj)(*(_rebuild(v, moved) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuild(v, moved) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _rebuild(getattr(obj, f.name), moved) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def pack_shared(obj: Any) -> Any:
    """``obj`` (a sampler output: dataclasses, dicts, tuples of tensors) with every CPU tensor that is
    not yet in shared memory copied into one shared-memory block (contiguous, same values)."""
    found: Dict[int, Tensor] = {}
    _walk(obj, found)
    if len(found) < 2:
        return obj
    offsets: List[int] = []
    total = 0
    for t in found.values():
        offsets.append(total)
        total += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    block = torch.empty(max(total, 1), dtype=torch.uint8).share_memory_().untyped_storage()
    moved = {}
    for (key, t), off in zip(found.items(), offsets):
        view = torch.empty(0, dtype=t.dtype).set_(block, off // t.element_size(), t.shape)  # type: ignore[call-overload]
        view.copy_(t)
        moved[key] = view
    return _rebuild(obj, moved)


__all__ = ["pack_shared"]
