"""Partitions a MovieLens-shaped rating graph for ``temporal_link_movielens_cpu.py`` (PyG's workflow).

The graph is generated (seeded, no download): users without features, movies with 16-dim features, and
``('user', 'rates', 'movie')`` edges carrying a rating (1-5, decided by whether the movie's genre is the user's
taste) and a timestamp stored as the edge attribute ``time``, as in PyG's ``MovieLens`` (PyG's ``Partitioner``, and
pyg_dist's, take it as edge time); the reverse ``('movie', 'rev_rates', 'user')`` edges carry the same times.
Written under ``--root_dir`` in the layout PyG's example reads::

    <dataset>-partitions/                 pyg_dist.distributed.Partitioner (PyG's folder layout)
    <dataset>-label/label.pt              the rating of every ('user', 'rates', 'movie') edge, by edge id
    <dataset>-train-partitions/partition<i>.pt   rank i's training edges (the earlier 80 % by time), [2, n]
    <dataset>-train-partitions/label<i>.pt, time<i>.pt   their ratings and times
    <dataset>-test-partitions/...         the same for the test edges (the later 20 %)

Each rank's edges are the ones whose user it owns.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp

import torch
from torch_geometric.data import HeteroData

from pyg_dist.distributed import Partitioner

RATES = ("user", "rates", "movie")


def movielens_like(num_users: int, num_movies: int, per_user: int, seed: int = 0) -> HeteroData:
    """A rating graph: 4 genres of falling quality, every user a taste; users pick their taste's movies two times
    in three (what they watched tells their taste), and fans of the two better genres rate one star higher."""
    gen = torch.Generator().manual_seed(seed)
    genre = torch.arange(num_movies) % 4
    taste = torch.randint(0, 4, (num_users,), generator=gen)
    x = torch.nn.functional.one_hot(genre, 16).float() + 0.1 * torch.randn(num_movies, 16, generator=gen)
    users = torch.arange(num_users).repeat_interleave(per_user)
    movies = torch.randint(0, num_movies // 4, (users.numel(),), generator=gen) * 4      # a movie of genre 0 ...
    pick = torch.where(torch.rand(users.numel(), generator=gen) < 2 / 3, taste[users],
                       torch.randint(0, 4, (users.numel(),), generator=gen))
    movies = (movies + pick).clamp(max=num_movies - 1)                                  # ... moved to its genre
    quality = torch.tensor([4.0, 3.0, 2.5, 1.5])[genre[movies]]
    generous = torch.where(taste[users] < 2, 0.5, -0.5)
    rating = (quality + generous + 0.3 * torch.randn(users.numel(), generator=gen)).round().clamp(1, 5)
    time = torch.randperm(users.numel(), generator=gen)          # distinct timestamps, in no particular order
    data = HeteroData()
    data["user"].num_nodes = num_users                           # no features: the script adds them
    data["movie"].x = x
    data[RATES].edge_index = torch.stack([users, movies])
    data[RATES].time = time
    data[RATES].edge_label = rating.float()
    data["movie", "rev_rates", "user"].edge_index = torch.stack([movies, users])
    data["movie", "rev_rates", "user"].time = time
    return data


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="MovieLens")
    p.add_argument("--root_dir", required=True)
    p.add_argument("--num_partitions", type=int, default=2)
    p.add_argument("--num_users", type=int, default=800)
    p.add_argument("--num_movies", type=int, default=400)
    p.add_argument("--per_user", type=int, default=20)
    args = p.parse_args()
    data = movielens_like(args.num_users, args.num_movies, args.per_user)
    base = lambda what: osp.join(args.root_dir, f"{args.dataset}-{what}")  # noqa: E731
    Partitioner(data, args.num_partitions, base("partitions")).generate_partition(progress=False)
    os.makedirs(base("label"), exist_ok=True)
    edges, time, label = data[RATES].edge_index, data[RATES].time, data[RATES].edge_label
    torch.save(label, osp.join(base("label"), "label.pt"))
    cut = torch.quantile(time.float(), 0.8)
    owner = torch.load(osp.join(base("partitions"), "node_map", "user.pt"), weights_only=True)
    for split, keep in (("train", time <= cut), ("test", time > cut)):
        folder = base(f"{split}-partitions")
        os.makedirs(folder, exist_ok=True)
        for i in range(args.num_partitions):
            ids = (keep & (owner[edges[0]] == i)).nonzero().view(-1)
            torch.save(edges[:, ids], osp.join(folder, f"partition{i}.pt"))
            torch.save(label[ids], osp.join(folder, f"label{i}.pt"))
            torch.save(time[ids], osp.join(folder, f"time{i}.pt"))
    print(f"partitioned {args.dataset}: {data[RATES].num_edges} ratings, {args.num_partitions} parts -> "
          f"{args.root_dir}")


if __name__ == "__main__":
    main()
