"""How local can a 2-way partition of the reference graph be? Partitions it by its TRUE communities.

``../shared/bench/products_like.py`` draws 85 % of its edges inside communities of 1,200 nodes and the
rest between uniformly chosen nodes, then relabels the nodes randomly. This script replays the
generator's random stream (same seed, same draws, same order) to recover each node's community, puts
the even communities in partition 0 and the odd ones in partition 1 (no intra-community edge is cut:
the best any partitioner can do on this graph), and runs ``bench_dist``'s 2-rank measurement on that
folder. Its "local nodes" is the locality ceiling to compare METIS' figure with.

    python scripts/locality_ceiling.py --graph /tmp/products_like.pt     # ~3 min, ~8 GB peak

Prints one line: intra-community edge fraction (must be ~0.85, else the replay does not match the
generator), edge cut, and the 2-rank row of ``bench_dist.py``.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dist  # noqa: E402  (sibling script)

N, PAIRS, COMM, INTRA, CHUNK = 2449029, 32400000, 1200, 0.85, 8_000_000


def true_communities() -> torch.Tensor:
    """Community of every node id of the generated graph (replays products_like.py's random stream)."""
    torch.manual_seed(0)
    rank = torch.randperm(N, dtype=torch.int64).double() + 1.0
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(rank.pow(-0.5), 0)])
    total = cdf[-1].item()

    def draw(lo, hi):
        u = lo + (hi - lo) * torch.rand(lo.numel(), dtype=torch.float64)
        return (torch.searchsorted(cdf, u, right=True) - 1).clamp_(0, N - 1)

    done = 0
    while done < PAIRS:  # the same draws in the same order, only to advance the stream
        m = min(CHUNK, PAIRS - done)
        zeros = torch.zeros(m, dtype=torch.float64)
        src = draw(zeros, zeros + total)
        inside = torch.rand(m) < INTRA
        comm = src // COMM
        draw(torch.where(inside, cdf[comm * COMM], zeros),
             torch.where(inside, cdf[torch.clamp((comm + 1) * COMM, max=N)], zeros + total))
        done += m
    perm = torch.randperm(N)  # original id o is node perm[o]
    out = torch.empty(N, dtype=torch.long)
    out[perm] = torch.arange(N) // COMM
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", required=True, help="products_like.py output (2,449,029 nodes, default args)")
    p.add_argument("--cache-dir", default="/tmp/pyg_dist_bench")
    p.add_argument("--batches", type=int, default=100)
    args = p.parse_args()
    g = torch.load(args.graph)
    if g["N"] != N:
        raise SystemExit(f"--graph has {g['N']} nodes; the replay needs the default graph ({N})")
    comm = true_communities()
    parts = comm % 2
    dst = torch.repeat_interleave(torch.arange(N), g["rowptr"][1:] - g["rowptr"][:-1])
    intra = float((comm[dst] == comm[g["col"]]).float().mean())
    cut = float((parts[dst] != parts[g["col"]]).float().mean())
    root = os.path.join(args.cache_dir, "dist_products_like_communities2")
    if not os.path.exists(os.path.join(root, "META.json")):
        from torch_geometric.data import Data

        import pyg_dist.partition.assign
        from pyg_dist.partition import Partitioner
        # our assignment
        pyg_dist.partition.assign.random_assign = lambda num_nodes, k, seed: {t: parts.clone() for t in num_nodes}
        gen = torch.Generator().manual_seed(0)
        data = Data(edge_index=torch.stack([g["col"], dst]), num_nodes=N, x=torch.rand(N, 100, generator=gen),
                    y=torch.randint(0, 47, (N,), generator=gen))
        Partitioner(data, 2, method="random", balance=False).save(root, overwrite=True, progress=False)
    del g, dst
    opts = argparse.Namespace(graph=args.graph, scale=1.0, cache_dir=args.cache_dir, fanouts=[15, 10, 5],
                              batch_size=1024, batches=args.batches, warmup=10, dim=100, concurrency=2,
                              mmap=False, transport="uv")
    r = bench_dist.run_config(opts, "communities", 2)
    print(f"intra-community edges {intra:.3f}, edge cut {cut:.3f}: 2 ranks {r['bps']:.2f} batches/s, local nodes "
          f"{100 * r['local_nodes']:.1f}%, local feature rows {100 * r['local_feats']:.1f}%, "
          f"remote sampling rounds/batch {r['rounds']:.2f}, MB/batch {r['mb']:.2f}")


if __name__ == "__main__":
    main()
