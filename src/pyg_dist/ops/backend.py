"""Backend dispatch for the sampling kernels: the ONE place that picks numba or torch.

``backend='auto'`` means numba for CPU tensors when numba imports, else the pure-torch kernels (which
also run on CUDA tensors). ``'pyg-lib'`` / ``'torch-sparse'`` are whole multi-hop samplers and are
selected by :class:`pyg_dist.sampler.NeighborSampler`, not here. The partition book's routing kernels
and the partitioner's kernels (:mod:`pyg_dist.ops.graph_kernels`) ask :func:`numba_available` too.

Environment switch ``$PYG_DIST_BACKEND`` (read at every call, so child processes follow their
environment): unset, empty or ``auto`` keeps the behaviour above; ``torch`` makes pyg_dist behave
exactly as if numba were not installed (:func:`numba_available` is False without importing numba,
``'auto'`` resolves to torch, and asking for ``backend='numba'`` raises
:class:`~pyg_dist.errors.InvalidArgumentError`); any other value raises that error, naming the
variable and the value.

Numba safety: the threading layer is set to ``workqueue`` (survives ``fork`` into DataLoader workers)
unless the user chose one through ``NUMBA_THREADING_LAYER``; ``workqueue`` must not be entered by two
Python threads at once, so every parallel kernel call holds :data:`_KERNEL_LOCK`. The kernel uses as
many threads as ``torch.get_num_threads()`` (capped by numba's pool), so one knob sets both.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

import torch

from pyg_dist.envvars import is_set, raw
from pyg_dist.errors import InvalidArgumentError

#: Kernel backends a caller may name; ``auto`` resolves per call.
KERNEL_BACKENDS = ("auto", "numba", "torch")
#: Multi-hop sampler backends (kernel backends plus the optional native samplers).
SAMPLER_BACKENDS = KERNEL_BACKENDS + ("pyg-lib", "torch-sparse")

#: The environment variable that can switch the numba kernels off, and the values it may hold.
BACKEND_ENV = "PYG_DIST_BACKEND"
BACKEND_ENV_VALUES = ("auto", "torch")

_KERNEL_LOCK = threading.Lock()
_NUMBA = None  # None = not probed yet; False = unavailable; else the kernel modules


def _reset_lock_in_child() -> None:
    global _KERNEL_LOCK
    _KERNEL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def env_backend() -> str:
    """The value of ``$PYG_DIST_BACKEND``: ``'auto'`` (also when unset or empty) or ``'torch'``.

    Raises:
        InvalidArgumentError: the variable holds anything else.

    Example:
        >>> env_backend() in ("auto", "torch")
        True
    """
    value = raw(BACKEND_ENV)
    if value == "":
        return "auto"
    if value not in BACKEND_ENV_VALUES:
        raise InvalidArgumentError("pyg_dist.ops.backend", f"${BACKEND_ENV}", value,
                                   f"one of {list(BACKEND_ENV_VALUES)} or unset")
    return value


def _load_numba():
    """Imports the numba kernels once (configuring the threading layer first); False if unavailable
    or switched off by ``$PYG_DIST_BACKEND=torch`` (then numba is not even imported)."""
    global _NUMBA
    if env_backend() == "torch":
        return False
    if _NUMBA is None:
        try:
            import numba
            if not is_set("NUMBA_THREADING_LAYER"):
                numba.config.THREADING_LAYER = "workqueue"
            from pyg_dist.ops import _numba_relabel, _numba_sample
            _NUMBA = (numba, _numba_sample, _numba_relabel)
        except ImportError:
            _NUMBA = False
    return _NUMBA


def numba_available() -> bool:
    """True when the numba kernels can be used (numba imports and ``$PYG_DIST_BACKEND`` is not ``torch``)."""
    return bool(_load_numba())


def numba_unavailable_reason() -> Optional[str]:
    """Why the numba kernels cannot be used here, or None when they can.

    Example:
        >>> numba_unavailable_reason() in (None, "numba is not installed",
        ...                                "numba is switched off by PYG_DIST_BACKEND=torch")
        True
    """
    if env_backend() == "torch":
        return f"numba is switched off by {BACKEND_ENV}=torch"
    return None if numba_available() else "numba is not installed"


def native_available(name: str) -> bool:
    """True when the optional native sampler ``'pyg-lib'`` or ``'torch-sparse'`` is importable."""
    module = {"pyg-lib": "pyg_lib", "torch-sparse": "torch_sparse"}.get(name)
    if module is None:
        return False
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def available_backends() -> list:
    """Concrete backends usable here, e.g. ``['numba', 'torch']``."""
    out = ["numba"] if numba_available() else []
    out.append("torch")
    return out + [n for n in ("pyg-lib", "torch-sparse") if native_available(n)]


def resolve_backend(backend: str, device: Optional[torch.device] = None, where: str = "pyg_dist.ops",
                    choices=KERNEL_BACKENDS) -> str:
    """Turns ``backend`` (``'auto'`` included) into a concrete backend, or raises naming it."""
    if backend not in choices:
        raise InvalidArgumentError(where, "backend", backend, f"one of {list(choices)}")
    on_cpu = device is None or torch.device(device).type == "cpu"
    if backend == "auto":
        return "numba" if on_cpu and numba_available() else "torch"
    if backend == "numba":
        reason = numba_unavailable_reason()
        if reason is not None:
            raise InvalidArgumentError(where, "backend", backend, f"an available backend ({reason})")
        if not on_cpu:
            raise InvalidArgumentError(where, "backend", backend, f"'torch' or 'auto' for tensors on {device}")
    if backend in ("pyg-lib", "torch-sparse") and not native_available(backend):
        raise InvalidArgumentError(where, "backend", backend, f"one of {available_backends()} (not importable)")
    return backend


class numba_call:
    """Context manager around a numba sampling call: threads = torch's threads.

    With one thread it hands out the serial builds (``kernels.count_kernel`` / ``kernels.sample_kernel``)
    and takes no lock: RPC threads serving peers then sample while the trainer's loop does. With more
    threads it holds the kernel lock and hands out the parallel builds.

    Example:
        >>> with numba_call() as kernels:  # doctest: +SKIP
        ...     counts = kernels.count_kernel(...)
    """

    class _Kernels:
        def __init__(self, mods, parallel: bool):
            self.numba, self.sample, self.relabel = mods
            suffix = "" if parallel else "_serial"
            self.count_kernel = getattr(self.sample, "count_kernel" + suffix)
            self.sample_kernel = getattr(self.sample, "sample_kernel" + suffix)

    def __enter__(self):
        mods = _load_numba()
        numba = mods[0]
        threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
        self._lock = _KERNEL_LOCK if threads > 1 else None
        if self._lock is not None:
            self._lock.acquire()
            numba.set_num_threads(threads)
        return self._Kernels(mods, parallel=threads > 1)

    def __exit__(self, *exc):
        if self._lock is not None:
            self._lock.release()
        return False
