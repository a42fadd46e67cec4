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

__all__ = ["CSC", "normalize_time", "one_hop", "OneHop", "sample_hop", "Hop", "make_relabeler",
           "resolve_backend", "available_backends", "numba_available", "numba_unavailable_reason",
           "env_backend", "BACKEND_ENV", "native_available", "KERNEL_BACKENDS", "SAMPLER_BACKENDS",
           "TEMPORAL_STRATEGIES", "warmup", "make_edge_buffer", "EdgeBuffer", "TensorBuffer"]
