"""Distributed temporal link prediction: ``link_prediction.py`` with ``time_attr="edge_time"``.

Every seed edge samples only neighbours whose edge time is not newer than its own (no future
leakage). Partition a graph with edge times first, then launch with torchrun::

    pyg-dist-partition --dataset synthetic --edge-time --num-parts 2 --out /tmp/temporal-2
    torchrun --standalone --nproc-per-node 2 examples/distributed/temporal_link_prediction.py \\
        --partition-dir /tmp/temporal-2 --epochs 3

Rank 0 prints per-epoch loss and link accuracy and, last, ``test_acc=<float>``.
"""
from __future__ import annotations

import sys

from link_prediction import main

if __name__ == "__main__":
    main(sys.argv[1:], temporal=True)
