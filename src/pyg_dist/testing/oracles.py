"""Oracles the test suite checks pyg_dist against (kept here so test files never import each other).

- :func:`first_occurrence` / :func:`check_repeats`: a batch with repeated seeds has PyG's layout
  and gives every repeat the neighbourhood of its first occurrence.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor


def first_occurrence(ids: Tensor) -> Tensor:
    """Per position, the position of the first occurrence of its value.

    Example:
        >>> first_occurrence(torch.tensor([4, 2, 4, 4, 2])).tolist()
        [0, 1, 0, 0, 1]
    """
    first: Dict[int, int] = {}
    return torch.tensor([first.setdefault(v, i) for i, v in enumerate(ids.tolist())], dtype=torch.long)


def in_edges(edge_index: Tensor, dst: int, src_ids: Tensor) -> list:
    """Sorted (source id, ...) of the in-edges of local node ``dst`` (sources as ids, not positions)."""
    return sorted(src_ids[edge_index[0, edge_index[1] == dst]].tolist())


def check_repeats(n_id: Tensor, edge_index: Tensor, batch_size: int, seeds: Tensor,
                  src_ids: Optional[Tensor] = None) -> Tuple[int, int]:
    """Asserts PyG's layout for seeds with repeats: the first ``batch_size`` rows are ``seeds`` as given,
    and every repeat has the same in-edges (by source id) as its first occurrence. ``src_ids``: the
    source node type's ``n_id`` when it differs from the seeds' (heterogeneous edge types). Returns
    ``(repeats, in-edges checked)``."""
    assert torch.equal(n_id[:batch_size], seeds), (n_id[:batch_size], seeds)
    first = first_occurrence(seeds)
    repeats = (first != torch.arange(seeds.numel())).nonzero().view(-1).tolist()
    checked = 0
    for q in repeats:
        src = n_id if src_ids is None else src_ids
        mine, theirs = in_edges(edge_index, q, src), in_edges(edge_index, int(first[q]), src)
        assert mine == theirs, (q, mine, theirs)
        checked += len(mine)
    return len(repeats), checked


__all__ = ["first_occurrence", "in_edges", "check_repeats"]
