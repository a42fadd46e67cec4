"""Sampling kernels: pure functions over tensors, numba on CPU with a pure-torch fallback.

- :class:`CSC` — one edge type's in-edges grouped by destination.
- :func:`one_hop` — unfused one-hop sampling: per seed its sampled neighbour ids, edge ids, counts
  (uniform / weighted, with or without replacement, temporal by node or edge time).
- :func:`make_relabeler` — batch-local ids in first-seen order (per subgraph when disjoint).
- :func:`sample_hop` — sampling and relabelling fused, used by the multi-hop sampler, writing into
  the per-edge-type output buffer of :func:`make_edge_buffer`.
- :func:`resolve_backend`, :func:`available_backends` — the one place that picks numba or torch
  (``$PYG_DIST_BACKEND=torch`` switches numba off everywhere: see :mod:`pyg_dist.ops.backend`).
- :func:`warmup` — load / compile the numba kernels ahead of the first batch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.ops.backend import (
        BACKEND_ENV,
        KERNEL_BACKENDS,
        SAMPLER_BACKENDS,
        available_backends,
        env_backend,
        native_available,
        numba_available,
        numba_unavailable_reason,
        resolve_backend,
    )
    from pyg_dist.ops.csc import CSC, normalize_time
    from pyg_dist.ops.hop import (
        TEMPORAL_STRATEGIES,
        EdgeBuffer,
        Hop,
        OneHop,
        TensorBuffer,
        make_edge_buffer,
        one_hop,
        sample_hop,
        warmup,
    )
    from pyg_dist.ops.relabel import make_relabeler

_LAZY = {
    # public name: the module that defines it
    "BACKEND_ENV": "pyg_dist.ops.backend",
    "KERNEL_BACKENDS": "pyg_dist.ops.backend",
    "SAMPLER_BACKENDS": "pyg_dist.ops.backend",
    "available_backends": "pyg_dist.ops.backend",
    "env_backend": "pyg_dist.ops.backend",
    "native_available": "pyg_dist.ops.backend",
    "numba_available": "pyg_dist.ops.backend",
    "numba_unavailable_reason": "pyg_dist.ops.backend",
    "resolve_backend": "pyg_dist.ops.backend",
    "CSC": "pyg_dist.ops.csc",
    "normalize_time": "pyg_dist.ops.csc",
    "TEMPORAL_STRATEGIES": "pyg_dist.ops.hop",
    "EdgeBuffer": "pyg_dist.ops.hop",
    "Hop": "pyg_dist.ops.hop",
    "OneHop": "pyg_dist.ops.hop",
    "TensorBuffer": "pyg_dist.ops.hop",
    "make_edge_buffer": "pyg_dist.ops.hop",
    "one_hop": "pyg_dist.ops.hop",
    "sample_hop": "pyg_dist.ops.hop",
    "warmup": "pyg_dist.ops.hop",
    "make_relabeler": "pyg_dist.ops.relabel",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
