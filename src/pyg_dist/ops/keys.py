"""Random keys: a batch's random draws are data, not the state of a process-wide generator.

A loader gives each batch a 62-bit key derived from ``(seed, epoch, batch index, rank)``; the sampler
derives one key per hop and edge type from it (:func:`mix`) and passes it to every one-hop call,
local or remote. The numba kernels draw seed ``v``'s neighbours from a stream keyed by ``(key, v)``,
so a batch is the same whatever the concurrency, the number of workers, the timing, or which
partition samples which seed.

Example:
    >>> mix(7, 1, 2) == mix(7, 1, 2) != mix(7, 2, 1)
    True
"""
from __future__ import annotations

from typing import Optional

import torch

_MASK64 = (1 << 64) - 1
_KEY_BITS = 62


def _finalise(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix(key: int, *words: int) -> int:
    """A new 62-bit key from ``key`` and any ints (order matters; negative ints allowed)."""
    z = int(key) & _MASK64
    for w in words:
        z = _finalise((z + 0x9E3779B97F4A7C15 + (int(w) & _MASK64) * 0xD6E8FEB86659FD93) & _MASK64)
    return z >> (64 - _KEY_BITS)


def random_key(generator: Optional[torch.Generator] = None) -> int:
    """One 62-bit key drawn from ``generator`` (default: torch's global generator)."""
    return int(torch.randint(0, 2 ** _KEY_BITS, (1,), generator=generator).item())


def key_generator(key: int, device=None) -> torch.Generator:
    """A torch generator seeded with ``key`` (for the torch kernels and negative sampling)."""
    gen = torch.Generator(device=device if device is not None else "cpu")
    gen.manual_seed(int(key) & ((1 << 63) - 1))
    return gen


__all__ = ["mix", "random_key", "key_generator"]
