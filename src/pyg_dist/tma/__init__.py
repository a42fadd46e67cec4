"""Time-based model aggregation (RandomTMA / SuperTMA): local-only trainers, periodic averaging.

Each trainer samples only from its own partition (:func:`local_subgraph`: owned nodes and the edges
among them, through the one-machine ``NeighborLoader`` / ``LinkNeighborLoader``; no RPC world) and
trains at its own pace; every ``interval`` seconds (or ``interval_steps`` steps) the trainers replace
their weights by the mean over all trainers (:func:`run_tma`). Partition with ``method="random"``
(RandomTMA) or ``"supernode"`` (SuperTMA)::

    with dist_session(TrainConfig("/data/g-random-2", rpc=False)) as env:   # under torchrun; no RPC world
        data = local_subgraph("/data/g-random-2", env.rank)
        loader = NeighborLoader(data, [10, 5], input_nodes=data.train_mask, batch_size=512, shuffle=True)
        result = run_tma(model, optimizer, loader, step, TMAConfig(interval=2.0, total_time=60.0),
                         evaluate=lambda m: val_accuracy(m))    # rank 0 scores every aggregated model
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.tma.schedule import TMAAbortedError, TMAConfig
    from pyg_dist.tma.subgraph import local_subgraph, whole_graph
    from pyg_dist.tma.trainer import AggregationError, TMAResult, average_parameters, run_tma

_LAZY = {
    "TMAConfig": "pyg_dist.tma.schedule",
    "TMAAbortedError": "pyg_dist.tma.schedule",
    "local_subgraph": "pyg_dist.tma.subgraph",
    "whole_graph": "pyg_dist.tma.subgraph",
    "run_tma": "pyg_dist.tma.trainer",
    "average_parameters": "pyg_dist.tma.trainer",
    "TMAResult": "pyg_dist.tma.trainer",
    "AggregationError": "pyg_dist.tma.trainer",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
