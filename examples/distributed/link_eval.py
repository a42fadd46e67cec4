"""Held-out link evaluation for ``link_prediction.py``: MRR of every held-out edge against ``K`` random negatives,
scored twice: from sampled neighbourhoods (the loader, as in training) and from whole-graph embeddings computed by
layer-wise inference (every node's embedding from ALL its neighbours, each computed once).

Held-out edges: every edge whose global edge id is a multiple of ``HOLD_EVERY``; training never uses them as
supervision (they stay in the message-passing graph, as in a transductive split without edge removal).
"""
from __future__ import annotations

import time
from typing import Tuple

import torch
from torch import Tensor

from pyg_dist import DistLinkNeighborLoader, layerwise_inference

HOLD_EVERY = 20


def owned_edges(env) -> Tuple[Tensor, Tensor]:
    """``(edge_index, edge_id)``: the edges this rank's partition owns (global ids)."""
    gs = env.graph_store
    g = gs.graph_part(None)
    dst = torch.arange(g.dst_start, g.dst_end).repeat_interleave(g.colptr[1:] - g.colptr[:-1])
    keep = gs.book.owner(gs.partition_meta.edge_types[0], g.edge_id) == gs.partition
    return torch.stack([g.row[keep], dst[keep]]), g.edge_id[keep]


def split(env) -> Tuple[Tensor, Tensor]:
    """``(train edges, held-out edges of the WHOLE graph)``: this partition's supervision edges, and every
    partition's held-out edges (``[3, P]``: source, destination, edge id; the same list on every rank)."""
    edge_index, edge_id = owned_edges(env)
    held = edge_id % HOLD_EVERY == 0
    return edge_index[:, ~held], _everyones(env, torch.cat([edge_index[:, held], edge_id[held].view(1, -1)]))


def _everyones(env, mine: Tensor) -> Tensor:
    """The columns every rank holds, once each (ranks serving one partition hold the same ones), by edge id."""
    import torch.distributed as dist
    if not dist.is_initialized() or env.world_size == 1:
        return mine
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(env.world_size)]
    dist.all_gather(sizes, torch.tensor([mine.size(1)]))
    width = int(max(sizes))
    padded = torch.full((3, width), -1, dtype=torch.long)
    padded[:, :mine.size(1)] = mine
    parts = [torch.empty_like(padded) for _ in range(env.world_size)]
    dist.all_gather(parts, padded)
    cols = torch.cat([part[:, :int(n)] for part, n in zip(parts, sizes)], 1)
    order = torch.sort(cols[2], stable=True).indices
    ids = cols[2][order]
    first = torch.ones_like(ids, dtype=torch.bool)
    first[1:] = ids[1:] != ids[:-1]
    return cols[:, order[first]]


def candidates(pos: Tensor, k: int, num_nodes: int, seed: int) -> Tensor:
    """``[2, P * (k + 1)]``: each held-out edge followed by ``k`` corruptions of its SOURCE (the destination,
    and with it the partition that scores the pair, stays)."""
    gen = torch.Generator().manual_seed(seed)
    neg_src = torch.randint(0, num_nodes, (pos.size(1), k), generator=gen)
    src = torch.cat([pos[0].view(-1, 1), neg_src], 1).view(-1)
    return torch.stack([src, pos[1].repeat_interleave(k + 1)])


def mrr_sums(scores: Tensor, k: int) -> Tuple[float, int]:
    """Sum of reciprocal ranks of the positives (ties count half) and their number."""
    s = scores.view(-1, k + 1)
    pos, neg = s[:, :1], s[:, 1:]
    rank = 1 + (neg > pos).sum(1) + 0.5 * (neg == pos).sum(1)
    return float((1.0 / rank).sum()), s.size(0)


@torch.no_grad()
def sampled_scores(model, env, pairs: Tensor, args) -> Tensor:
    """One logit per pair from sampled neighbourhoods (``--num-neighbors``): each rank scores the pairs whose
    destination its partition owns; the scores are summed over ranks so that every rank holds them all."""
    import torch.distributed as dist
    model.eval()
    loader = DistLinkNeighborLoader(env, args.num_neighbors, edge_label_index=pairs, batch_size=args.batch_size,
                                    seed_split="partition", seed=args.seed + 2)
    scores, hits = torch.zeros(pairs.size(1), dtype=torch.float64), torch.zeros(pairs.size(1), dtype=torch.float64)
    try:
        for batch in loader:
            batch = batch.to(env.device)
            logits = model(batch.x, batch.edge_index, batch.edge_label_index).double().cpu()
            scores.index_add_(0, batch.input_id.cpu(), logits)
            hits.index_add_(0, batch.input_id.cpu(), torch.ones_like(logits))
    finally:
        loader.shutdown()
    if dist.is_initialized() and env.world_size > 1:
        dist.all_reduce(scores)
        dist.all_reduce(hits)
    if not bool((hits == 1).all()):
        raise RuntimeError(f"{int((hits != 1).sum())} of {hits.numel()} evaluation pairs were not scored once")
    return scores.float()


@torch.no_grad()
def layerwise_scores(model, env, pairs: Tensor) -> Tensor:
    """One logit per pair from whole-graph embeddings (layer-wise inference; then every rank holds all rows)."""
    import torch.distributed as dist
    model.eval()
    convs = getattr(model, "module", model).encoder.convs
    layers = [lambda xs, xd, ei, c=c: c((xs, xd), ei).relu() for c in convs[:-1]]
    layers.append(lambda xs, xd, ei: convs[-1]((xs, xd), ei))
    ids, out = layerwise_inference(layers, env)
    h = torch.zeros(env.meta.num_nodes[env.meta.node_types[0]], out.size(-1))
    h[ids] = out.float()
    if dist.is_initialized() and env.world_size > 1:
        if env.world_size != env.meta.num_parts:      # several ranks per partition sent the same rows
            h /= env.world_size // env.meta.num_parts
        dist.all_reduce(h)
    return (h[pairs[0]] * h[pairs[1]]).sum(-1)


def evaluate(model, env, held_out: Tensor, args, layerwise: bool = True) -> str:
    """The side-by-side line: MRR and seconds of both evaluations over the held-out edges of the whole graph
    (``layerwise=False``: sampled only, e.g. with sampler workers, where layer-wise inference is refused)."""
    pairs = candidates(held_out[:2], args.eval_negatives, env.meta.num_nodes[env.meta.node_types[0]], args.seed + 7)
    line = []
    runs = [("sampled", lambda: sampled_scores(model, env, pairs, args))]
    if layerwise:
        runs.append(("layerwise", lambda: layerwise_scores(model, env, pairs)))
    for name, score in runs:
        start = time.perf_counter()
        s = score()
        took = time.perf_counter() - start
        total, n = mrr_sums(s, args.eval_negatives)           # every rank holds every score
        line.append(f"mrr_{name}={total / max(n, 1):.4f} eval_{name}_s={took:.2f}")
    return f"held_out={held_out.size(1)} negatives={args.eval_negatives} " + " ".join(line)
