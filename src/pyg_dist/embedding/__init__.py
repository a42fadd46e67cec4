"""Learnable node embeddings, partitioned like the features, with sparse optimizers applied at the owner.

Example::

    emb = DistEmbedding(env, 64)                  # rows of this partition's nodes (shared memory)
    opt = SparseAdam([emb], lr=0.01)              # state per row, at the owner
    x = emb(batch.n_id)                           # local rows directly, remote rows one request per owner
    loss.backward(); opt.step(); opt.zero_grad()  # gradient rows pushed to their owners
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.embedding.module import DistEmbedding, normal_init
    from pyg_dist.embedding.optim import SparseAdagrad, SparseAdam, SparseOptimizer

_LAZY = {
    "DistEmbedding": "pyg_dist.embedding.module",
    "normal_init": "pyg_dist.embedding.module",
    "SparseOptimizer": "pyg_dist.embedding.optim",
    "SparseAdagrad": "pyg_dist.embedding.optim",
    "SparseAdam": "pyg_dist.embedding.optim",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
