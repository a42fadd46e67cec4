#!/usr/bin/env python
"""Partition a graph into a pyg_dist / PyG partition folder (same as the ``pyg-dist-partition`` command).

    python scripts/partition_graph.py --dataset cora --root "$PYG_DIST_DATA/planetoid" --num-parts 2 \
        --method metis --out /tmp/cora-2

Run with ``--help`` for every option.
"""
import sys

from pyg_dist.partition.cli import main

if __name__ == "__main__":
    sys.exit(main())
