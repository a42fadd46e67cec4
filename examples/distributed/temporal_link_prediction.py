"""Distributed temporal link prediction on a partitioned graph with edge times (launch with torchrun).

GraphSAGE link prediction where every seed edge samples only neighbours whose edge time is not newer
than its own (``time_attr="edge_time"``: no future leakage); the loop is ``link_prediction.py``'s.
The folder must be homogeneous with ``edge_time`` (checked before any process group starts).
Partition a graph with edge times first, then launch with torchrun::

    pyg-dist-partition --dataset synthetic --edge-time --num-parts 2 --out /tmp/temporal-2
    torchrun --standalone --nproc-per-node 2 examples/distributed/temporal_link_prediction.py \\
        --partition-dir /tmp/temporal-2 --epochs 3

Rank 0 prints per-epoch loss and link accuracy and, last, ``test_acc=<float>``.
"""
from __future__ import annotations

import functools
import sys

from link_prediction import main
from pyg_dist.train.entry import run_main

if __name__ == "__main__":
    run_main(functools.partial(main, temporal=True, doc=__doc__), sys.argv[1:])
