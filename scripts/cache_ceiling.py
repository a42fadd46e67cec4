"""How much of a partition's remote feature traffic a cache of a given size can remove, at best.

Samples ``--batches`` batches of partition 0's own nodes on the whole graph (one process, the same
fanouts and batch size as ``bench_dist.py``), counts how often each remote node's row is needed, then
reports, per cache budget, the share of remote rows covered by:

* ``oracle``: the budget's most frequent rows of THOSE batches (an upper bound no policy can beat);
* ``presample N``: the most frequent rows of N other warm-up batches (the ``"presample"`` policy);
* ``degree``: the remote nodes with most edges into the partition (the ``"degree"`` policy).

``local or cached`` = owned share + remote share x coverage. Prints one table.

    python scripts/cache_ceiling.py --folder /tmp/pyg_dist_bench/dist_products_like_metis2
"""
from __future__ import annotations

import argparse

import torch


def whole_graph(folder: str):
    """The partitioned graph as one ``Data`` (global ids), and partition 0's stores."""
    from torch_geometric.data import Data

    from pyg_dist.format import read_meta
    from pyg_dist.store import load_stores
    meta = read_meta(folder)
    rows, cols, first = [], [], None
    for p in range(meta.num_parts):
        gs, fs = load_stores(folder, p)
        first = first or (gs, fs)
        g = gs.graph_part(("_N", "_E", "_N"))
        rows.append(g.row)
        cols.append(torch.repeat_interleave(torch.arange(g.dst_start, g.dst_end), g.colptr.diff()))
    n = first[1].book.num_items("_N")
    return Data(edge_index=torch.stack([torch.cat(rows), torch.cat(cols)]), num_nodes=n), first


def access_counts(sampler, own: torch.Tensor, batches: int, batch_size: int, seed: int, n: int):
    """Per node, how many of ``batches`` sampled batches contain it; and the total of rows fetched."""
    from torch_geometric.sampler import NodeSamplerInput
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(n, dtype=torch.int64)
    for _ in range(batches):
        seeds = own[torch.randint(0, own.numel(), (batch_size,), generator=gen)].unique()
        counts += torch.bincount(sampler.sample_from_nodes(NodeSamplerInput(None, seeds)).node, minlength=n)
    return counts


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True, help="a pyg_dist partition folder (homogeneous)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=60, help="batches whose rows are counted")
    p.add_argument("--presample", type=int, nargs="+", default=[20, 100])
    p.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.25, 0.5, 1.0])
    args = p.parse_args(argv)

    from pyg_dist.cache.fill import budget_rows, cached_attrs
    from pyg_dist.cache.ranking import degree_ranking
    from pyg_dist.sampler.neighbor import NeighborSampler
    data, (gs, fs) = whole_graph(args.folder)
    sampler = NeighborSampler(data, args.fanouts)
    own, n = fs.get_global_id(), data.num_nodes
    owned = torch.zeros(n, dtype=torch.bool)
    owned[own] = True
    test = access_counts(sampler, own, args.batches, args.batch_size, 1, n)
    local_share = float(test[owned].sum()) / float(test.sum())
    test[owned] = 0
    total = float(test.sum())
    ranks = {"oracle": torch.sort(test, descending=True, stable=True).indices}
    for i, b in enumerate(args.presample):
        c = access_counts(sampler, own, b, args.batch_size, 100 + i, n)
        c[owned] = 0
        ranks[f"presample {b}"] = torch.sort(c, descending=True, stable=True).indices
    ranks["degree"] = degree_ranking(gs, "_N")
    print(f"cache coverage of partition 0 of {args.folder}: {args.batches} batches of {args.batch_size}, fanouts "
          f"{args.fanouts}; owned share of feature rows {100 * local_share:.1f}%; distinct remote rows needed "
          f"{int((test > 0).sum())}")
    head = ["cache ratio", "cached rows"] + [f"{k}: remote covered / local or cached" for k in ranks]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in args.ratios:
        k = budget_rows(fs, cached_attrs(fs, None), r, None)["_N"]
        cells = []
        for rank in ranks.values():
            cov = float(test[rank[:k]].sum()) / max(total, 1.0)
            cells.append(f"{100 * cov:.1f}% / {100 * (local_share + (1 - local_share) * cov):.1f}%")
        print(f"| {r:g} | {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
