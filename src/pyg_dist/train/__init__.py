"""The training stage: the one front door and what a training job needs around it.

- :mod:`.session`: :func:`dist_session` (torchrun's environment -> process group, stores, RPC world, teardown
  in ``finally``), :class:`TrainConfig`, :func:`wrap_ddp`.
- :mod:`.checkpoint`: :class:`Checkpointer` (atomic per-rank files, exact resume).
- :mod:`.inference`: :func:`layerwise_inference` (full-neighbourhood, layer by layer).
- :mod:`.entry`: :func:`run_main` (a script's ``main`` under torchrun, failures as one typed line).

Example (every rank, under ``torchrun``):
    >>> from pyg_dist.train import TrainConfig, dist_session
    >>> with dist_session(TrainConfig(partition_dir="/data/products-2")) as env:   # doctest: +SKIP
    ...     loader = DistNeighborLoader(env, [15, 10, 5], input_nodes="train_mask", batch_size=1024)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.train.checkpoint import Checkpointer
    from pyg_dist.train.entry import run_main
    from pyg_dist.train.inference import layerwise_inference
    from pyg_dist.train.session import DistEnv, TrainConfig, dist_session, wrap_ddp

_LAZY = {
    # public name: the module that defines it
    "TrainConfig": "pyg_dist.train.session",
    "DistEnv": "pyg_dist.train.session",
    "dist_session": "pyg_dist.train.session",
    "wrap_ddp": "pyg_dist.train.session",
    "Checkpointer": "pyg_dist.train.checkpoint",
    "layerwise_inference": "pyg_dist.train.inference",
    "run_main": "pyg_dist.train.entry",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
