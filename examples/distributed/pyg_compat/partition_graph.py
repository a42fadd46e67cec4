"""Partitions a graph for the PyG-style training script (the workflow of PyG's deleted example).

Writes, under ``--root_dir``, what ``node_ogb_cpu.py`` reads, in the layout PyG's example used:

    <dataset>-partitions/            pyg_dist.distributed.Partitioner (PyG's folder layout, input ids kept)
    <dataset>-label/label.pt         the label of every node (of the target type)
    <dataset>-train-partitions/partition<i>.pt   rank i's training node ids
    <dataset>-test-partitions/partition<i>.pt    rank i's test node ids

``--dataset`` is an OGB node dataset already unpacked under ``--ogb_root`` (read without the ``ogb``
package, no download), or ``synthetic`` / ``synthetic-hetero`` (pyg_dist's generator, the default).
Unlike PyG's example, the id lists are cut into exactly ``--num_partitions`` slices (``tensor_split``),
so no seed is lost to a remainder slice.
"""
from __future__ import annotations

import argparse
import os.path as osp
from pathlib import Path

import torch

import pyg_dist
from pyg_dist.distributed import Partitioner

TARGET = "paper"  # the node type that carries labels in the hetero generator (as in ogbn-mag)


def load(args):
    if args.dataset == "synthetic":
        return pyg_dist.synthetic_graph(args.num_nodes, 10, seed=0)
    if args.dataset == "synthetic-hetero":
        return pyg_dist.synthetic_graph(args.num_nodes, 10, hetero=True, node_types=(TARGET, "author", "field"),
                                        seed=0)
    if args.ogb_root is None:
        raise SystemExit(f"--dataset {args.dataset} needs --ogb_root (the folder the OGB zip unpacked to)")
    from pyg_dist.datasets.ogb import load_ogb_node
    return load_ogb_node(args.dataset, args.ogb_root)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic")
    p.add_argument("--ogb_root", default=None, help="folder holding an unpacked OGB node dataset")
    p.add_argument("--root_dir", required=True, help="where the partitions, labels and id lists go")
    p.add_argument("--num_partitions", type=int, default=2)
    p.add_argument("--recursive", action="store_true", help="METIS recursive bisection instead of k-way")
    p.add_argument("--num_nodes", type=int, default=20000, help="size of the synthetic graphs")
    args = p.parse_args()

    data = load(args)
    target = data[TARGET] if "synthetic-hetero" == args.dataset else data
    root = Path(args.root_dir)
    print(f"-- Partitioning {args.dataset} into {args.num_partitions} parts ...")
    Partitioner(data, args.num_partitions, osp.join(root, f"{args.dataset}-partitions"),
                args.recursive).generate_partition()
    print("-- Saving label ...")
    (root / f"{args.dataset}-label").mkdir(parents=True, exist_ok=True)
    torch.save(target.y.view(-1), root / f"{args.dataset}-label" / "label.pt")
    for split in ("train", "test"):
        print(f"-- Partitioning {split} indices ...")
        ids = target[f"{split}_mask"].nonzero().view(-1)
        folder = root / f"{args.dataset}-{split}-partitions"
        folder.mkdir(parents=True, exist_ok=True)
        for i, part in enumerate(ids.tensor_split(args.num_partitions)):
            torch.save(part.clone(), folder / f"partition{i}.pt")


if __name__ == "__main__":
    main()
