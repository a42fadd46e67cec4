"""The planner: how many machines a job needs, and how long its epoch takes on them, from a short run on one.

``pyg-dist-plan`` (:mod:`.cli`) puts together what the product measures separately:

- :mod:`.replay` — what a batch sends elsewhere on N partitions (remote sampled edges, remote rows, calls),
  by sampling a few batches offline over the graph split the partitioner's way into N parts;
- :mod:`.calibrate` — the unit costs of each stage, from four short runs of :mod:`.job` (the product's own
  loader and DDP, timed by the epoch clock) on this machine: 1 rank at 1 and 2 threads, 2 ranks, and 4 ranks
  (the memory with several peers);
- :mod:`.model` — per-batch stage seconds, epoch seconds, the bounding stage and RSS per rank for N ranks on M
  machines (the dozen lines of its docstring);
- ``--check`` — the job run for the rank counts this machine holds, predicted against measured, each row beside
  a run of the calibration's batch (how much this machine drifted since its calibration).

Example:
    >>> from pyg_dist.plan import Costs, Machines, predict
    >>> from pyg_dist.plan.replay import Counts
    >>> costs = Costs(u_edge=1e-6, u_row=2e-6, u_asm=0.0, u_step=4e-6, u_other=0.0, train_seeds=4096)
    >>> c = Counts(1, edges=100_000, rows=50_000, remote_edge_frac=0.0, remote_row_frac=0.0, hop_calls=0,
    ...            row_calls=0, max_nodes_frac=1.0, max_edges_frac=1.0)
    >>> p = predict(costs, c, Machines(1, cores=1), batch_size=1024)
    >>> p.batches, round(p.epoch_s, 3), p.bound       # 4 x (0.1 + 0.1 + 0.2) s
    (4, 1.6, 'step')
"""
from __future__ import annotations

from pyg_dist.plan.model import Costs, Machines, Prediction, predict

__all__ = ["Costs", "Machines", "Prediction", "predict"]
