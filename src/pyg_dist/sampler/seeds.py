"""Node seeds: their checks, and repeated seeds with PyG's meaning.

A node batch may hold a seed more than once (``input_nodes`` with repeats, a sampler with replacement).
Without ``disjoint`` the hop loop samples each distinct seed once (:func:`dedupe`); :func:`expand` then
gives the batch PyG's layout: its first rows are the seeds in input order, repeats included (so
``out[:batch_size]`` lines up with ``y[:batch_size]`` and ``input_id``), and every repeat gets the
same in-edges as its first occurrence, hence the same neighbourhood and the same GNN output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from pyg_dist._types import NodeType
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops import normalize_time
from pyg_dist.sampler.output import TypedSample


def check_typed_seed(where: str, seed, num_nodes: Dict[NodeType, int]) -> Dict[NodeType, Tensor]:
    """``seed`` as ``{node type: contiguous int64 global ids}``, or InvalidArgumentError naming it."""
    if not isinstance(seed, dict) or not seed:
        raise InvalidArgumentError(where, "seed", seed, "a non-empty dict of tensors")
    out = {}
    for t, ids in seed.items():
        if t not in num_nodes:
            raise InvalidArgumentError(where, "seed", t, f"a node type in {list(num_nodes)}")
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise InvalidArgumentError(where, "seed", ids, "a 1-D integer tensor")
        ids = ids.to(torch.int64)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes[t]):
            raise InvalidArgumentError(where, "seed", ids, f"global ids of type {t!r} in [0, {num_nodes[t]})")
        out[t] = ids.contiguous()
    return out


def check_seed_time(where: str, seed: Dict[NodeType, Tensor], seed_time, is_temporal: bool,
                    node_time: Optional[Dict[NodeType, Tensor]]) -> Optional[Dict[NodeType, Tensor]]:
    """Seed times per type: ``seed_time`` checked (one per seed), or the seeds' node time when omitted;
    ``None`` for a sampler without time. InvalidArgumentError names ``seed_time`` otherwise."""
    if not is_temporal:
        if seed_time:
            raise InvalidArgumentError(where, "seed_time", seed_time, "None (the sampler has no time_attr)")
        return None
    if not seed_time:
        known = node_time or {}
        missing = [t for t in seed if known.get(t) is None]
        if missing:
            raise InvalidArgumentError(where, "seed_time", seed_time,
                                       f"seed times (no node time to default to for types {missing})")
        return {t: known[t][ids] for t, ids in seed.items()}
    out: Dict[NodeType, Tensor] = {}
    for t, ids in seed.items():
        time = seed_time.get(t)
        if not isinstance(time, Tensor) or time.shape != ids.shape:
            raise InvalidArgumentError(where, "seed_time", seed_time, f"one time per seed of type {t!r}")
        out[t] = normalize_time(time)
    return out


@dataclass(frozen=True)
class Repeats:
    """How the seeds of one node type map to their distinct ids.

    Attributes:
        seed: The seeds as given (repeats included).
        unique_of: Per seed, the index of its id among the distinct ids (first-seen order).
        first: Per distinct id, the position of its first occurrence among the seeds.
    """
    seed: Tensor
    unique_of: Tensor
    first: Tensor


def dedupe(seed: Dict[NodeType, Tensor]) -> Tuple[Dict[NodeType, Tensor], Dict[NodeType, Repeats]]:
    """The distinct seeds per type in first-seen order, and the :class:`Repeats` of types that repeat."""
    out, repeats = dict(seed), {}
    for t, ids in seed.items():
        uniq, inverse = torch.unique(ids, return_inverse=True)
        if uniq.numel() == ids.numel():
            continue
        first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
        order = torch.argsort(first)                  # distinct ids in first-seen order
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel())
        out[t] = uniq.index_select(0, order)
        repeats[t] = Repeats(ids, rank.index_select(0, inverse), first.index_select(0, order))
    return out, repeats


def _new_index(rep: Repeats, size: int) -> Tensor:
    """Old local index -> new one: distinct seed ``u`` -> its first occurrence, others shift by the repeats."""
    u, s = rep.first.numel(), rep.seed.numel()
    return torch.cat([rep.first, torch.arange(s, s + size - u)])


def _copied_edges(rep: Repeats, col0: Tensor) -> Tuple[Tensor, Tensor]:
    """For hop-0 edges with (old) destinations ``col0``: which edge to copy and its new destination, once
    per repeat (not first) occurrence of that destination."""
    pos = torch.arange(rep.seed.numel())
    is_repeat = rep.first.index_select(0, rep.unique_of) != pos
    rep_pos, rep_u = pos[is_repeat], rep.unique_of[is_repeat]
    order = torch.argsort(rep_u, stable=True)
    rep_pos, rep_u = rep_pos[order], rep_u[order]
    count = torch.bincount(rep_u, minlength=rep.first.numel())
    ptr = torch.cumsum(count, 0) - count
    per_edge = count.index_select(0, col0)
    edge = torch.repeat_interleave(torch.arange(col0.numel()), per_edge)
    within = torch.arange(edge.numel()) - torch.repeat_interleave(torch.cumsum(per_edge, 0) - per_edge, per_edge)
    return edge, rep_pos.index_select(0, ptr.index_select(0, col0.index_select(0, edge)) + within)


def expand(sample: TypedSample, repeats: Dict[NodeType, Repeats]) -> TypedSample:
    """The sample of the distinct seeds laid out for the seeds as given (see the module docstring)."""
    if not repeats:
        return sample
    node, row, col, edge = dict(sample.node), dict(sample.row), dict(sample.col), dict(sample.edge)
    n_nodes = {t: list(v) for t, v in sample.num_sampled_nodes.items()}
    n_edges = {et: list(v) for et, v in sample.num_sampled_edges.items()}
    for t, rep in repeats.items():
        new = _new_index(rep, node[t].numel())
        node[t] = torch.cat([rep.seed, node[t][rep.first.numel():]])
        n_nodes[t][0] = rep.seed.numel()
        for et in row:
            if et[0] == t:
                row[et] = new.index_select(0, row[et])
            if et[2] != t:
                continue
            hop0 = n_edges[et][0] if n_edges[et] else 0
            which, dst = _copied_edges(rep, col[et][:hop0])
            col[et] = new.index_select(0, col[et])
            row[et], col[et], edge[et] = (torch.cat([v[:hop0], add, v[hop0:]]) for v, add in
                                          ((row[et], row[et].index_select(0, which)), (col[et], dst),
                                           (edge[et], edge[et].index_select(0, which))))
            if n_edges[et]:
                n_edges[et][0] += which.numel()
    return TypedSample(node, row, col, edge, sample.batch, n_nodes, n_edges)


__all__ = ["check_typed_seed", "check_seed_time", "Repeats", "dedupe", "expand"]
