"""Oracles the test suite checks pyg_dist against (kept here so test files never import each other).

- :func:`first_occurrence` / :func:`check_repeats`: a batch with repeated seeds has PyG's layout
  and gives every repeat the neighbourhood of its first occurrence.
- :func:`typed_stores` / :func:`original_attrs`: the original graph's per-type stores and per-item
  attributes, homogeneous graphs under ``HOMO_NODE`` / ``HOMO_EDGE``.
- :func:`relabelled`: the original graph in a partition folder's global ids (what a one-process
  sampler must see to agree with a distributed one).
- :func:`typed_k_hop`: the k-hop in-neighbourhood per node type (PyG's ``k_hop_subgraph`` for
  homogeneous graphs, a typed BFS otherwise).
- :func:`check_edges_and_features`: every sampled edge exists in the original graph under its true id,
  and fetched features equal the original rows.

``torch_geometric`` is imported inside the functions, so importing this module stays cheap.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Set, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, as_typed

NODE_ATTRS = ("x", "y", "time")
EDGE_ATTRS = ("edge_attr", "edge_weight", "edge_time")


def first_occurrence(ids: Tensor) -> Tensor:
    """Per position, the position of the first occurrence of its value.

    Args:
        ids: A 1-D tensor of ids.

    Returns:
        A ``long`` tensor of the same length.

    Example:
        >>> first_occurrence(torch.tensor([4, 2, 4, 4, 2])).tolist()
        [0, 1, 0, 0, 1]
    """
    first: Dict[int, int] = {}
    return torch.tensor([first.setdefault(v, i) for i, v in enumerate(ids.tolist())], dtype=torch.long)


def in_edges(edge_index: Tensor, dst: int, src_ids: Tensor) -> list:
    """Sorted source ids of the in-edges of local node ``dst``.

    Args:
        edge_index: ``[2, E]`` local edges (positions into the batch's node lists).
        dst: Local position of the destination node.
        src_ids: The source node type's ``n_id`` (maps source positions to ids).

    Returns:
        The sources of ``dst``'s in-edges as ids (not positions), sorted.
    """
    return sorted(src_ids[edge_index[0, edge_index[1] == dst]].tolist())


def check_repeats(n_id: Tensor, edge_index: Tensor, batch_size: int, seeds: Tensor,
                  src_ids: Optional[Tensor] = None) -> Tuple[int, int]:
    """Asserts PyG's layout for seeds with repeats.

    The first ``batch_size`` rows of ``n_id`` are ``seeds`` as given, and every repeated seed has the
    same in-edges (by source id) as its first occurrence.

    Args:
        n_id: The batch's node ids (of the seeds' type).
        edge_index: ``[2, E]`` local edges into the seeds' type.
        batch_size: Number of seeds.
        seeds: The seeds as given to the loader, repeats included.
        src_ids: The source node type's ``n_id`` when it differs from the seeds' (heterogeneous edge
            types); default ``n_id``.

    Returns:
        ``(number of repeats, number of in-edges checked)``.

    Raises:
        AssertionError: the layout or a repeat's neighbourhood differs.
    """
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



def typed_stores(data) -> Tuple[Dict[str, Any], Dict[tuple, Any]]:
    """Per-type node and edge stores of a ``Data`` or ``HeteroData``.

    Args:
        data: The original graph.

    Returns:
        ``(nodes, edges)``: ``{node type: store}`` and ``{edge type: store}``; a homogeneous ``Data`` is
        its own store under ``HOMO_NODE`` and ``HOMO_EDGE``.
    """
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        return {t: data[t] for t in data.node_types}, {et: data[et] for et in data.edge_types}
    return {HOMO_NODE: data}, {HOMO_EDGE: data}


def original_attrs(data, group: Union[str, tuple]) -> Dict[str, Tensor]:
    """Original per-item attributes of one node or edge type, as a feature store serves them.

    Args:
        data: The original ``Data`` or ``HeteroData``.
        group: A node type (``str``) or an edge type (``tuple``); ``HOMO_NODE`` / ``HOMO_EDGE`` for a
            ``Data``.

    Returns:
        ``{name: tensor}`` in the store's key order: for node types ``x``, ``y``, ``time`` and every
        ``*_mask``; for edge types ``edge_attr``, ``edge_weight`` and ``edge_time`` (those present).
    """
    from torch_geometric.data import HeteroData
    store = data[group] if isinstance(data, HeteroData) else data
    if isinstance(group, str):
        keys = [k for k in store.keys() if k in NODE_ATTRS or k.endswith("_mask")]
    else:
        keys = [k for k in store.keys() if k in EDGE_ATTRS]
    return {k: store[k] for k in keys}


def relabelled(data, orig: Mapping[Any, Tensor]):
    """The original graph in a partition folder's global ids, edges in global edge-id order (CSC order).

    Args:
        data: The original ``Data`` or ``HeteroData`` the folder was written from.
        orig: ``load_original_ids(folder)``: per node and edge type, the original id of every global id.

    Returns:
        A graph of the same kind whose node ``i`` of type ``t`` is original node ``orig[t][i]`` and
        whose edge ``j`` of type ``et`` is original edge ``orig[et][j]``, with ``x``, ``y``, ``time``,
        ``edge_attr``, ``edge_weight`` and ``edge_time`` permuted alike.
    """
    from torch_geometric.data import Data, HeteroData
    nodes, edges = typed_stores(data)
    inv = {}
    for t in nodes:
        inv[t] = torch.empty_like(orig[t])
        inv[t][orig[t]] = torch.arange(orig[t].numel())
    out = HeteroData() if isinstance(data, HeteroData) else Data()
    for t, s in nodes.items():
        dst = out[t] if isinstance(out, HeteroData) else out
        dst.num_nodes = s.num_nodes
        for key in NODE_ATTRS:
            if key in s:
                dst[key] = s[key][orig[t]]
    for et, s in edges.items():
        dst = out[et] if isinstance(out, HeteroData) else out
        ei = s.edge_index[:, orig[et]]
        dst.edge_index = torch.stack([inv[et[0]][ei[0]], inv[et[2]][ei[1]]])
        for key in EDGE_ATTRS:
            if key in s:
                dst[key] = s[key][orig[et]]
    return out


def typed_k_hop(data, seed_type: str, seeds: Tensor, num_hops: int) -> Dict[str, Set[int]]:
    """Original ids per node type reachable from ``seeds`` within ``num_hops`` in-edges.

    Args:
        data: The original ``Data`` or ``HeteroData``.
        seed_type: The seeds' node type (ignored for a ``Data``).
        seeds: Original ids of the seeds.
        num_hops: Number of hops, following edges from destination to source.

    Returns:
        ``{node type: set of original ids}``, seeds included: PyG's ``k_hop_subgraph`` for a ``Data``
        (under ``HOMO_NODE``), a typed breadth-first search for a ``HeteroData``.

    Example:
        >>> from torch_geometric.data import Data
        >>> g = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
        >>> sorted(typed_k_hop(g, HOMO_NODE, torch.tensor([3]), 2)[HOMO_NODE])
        [1, 2, 3]
    """
    from torch_geometric.data import HeteroData
    from torch_geometric.utils import k_hop_subgraph
    nodes, edges = typed_stores(data)
    if not isinstance(data, HeteroData):
        subset, _, _, _ = k_hop_subgraph(seeds, num_hops, data.edge_index, num_nodes=data.num_nodes)
        return {HOMO_NODE: set(subset.tolist())}
    seen: Dict[str, Set[int]] = {t: set() for t in nodes}
    seen[seed_type] = set(seeds.tolist())
    frontier = {t: set(v) for t, v in seen.items()}
    for _ in range(num_hops):
        new: Dict[str, Set[int]] = {t: set() for t in nodes}
        for et, s in edges.items():
            if not frontier[et[2]]:
                continue
            mask = torch.isin(s.edge_index[1], torch.tensor(sorted(frontier[et[2]])))
            new[et[0]].update(s.edge_index[0, mask].tolist())
        frontier = {t: new[t] - seen[t] for t in nodes}
        for t in nodes:
            seen[t] |= new[t]
    return seen


def check_edges_and_features(out, data, orig: Mapping[Any, Tensor], is_hetero: bool) -> None:
    """Asserts that a distributed sampler's output agrees with the original graph.

    Every sampled edge ``(node[row[i]], node[col[i]])`` is the original edge ``edge[i]`` (in original
    ids), and the rows in ``out.metadata.features`` (``x``, ``y``, ``time``, ``edge_attr``,
    ``edge_time``, those the graph has) equal the original rows of the sampled nodes and edges.

    Args:
        out: A ``SamplerOutput`` / ``HeteroSamplerOutput`` in global ids, with a ``FeatureBatch`` as
            ``metadata.features``.
        data: The original ``Data`` or ``HeteroData``.
        orig: ``load_original_ids(folder)``.
        is_hetero: Whether ``out`` is typed.

    Raises:
        AssertionError: naming the edge or node type (and attribute) that differs.
    """
    nodes, edges = typed_stores(data)
    node, row = as_typed(out.node, HOMO_NODE, is_hetero), as_typed(out.row, HOMO_EDGE, is_hetero)
    col, edge = as_typed(out.col, HOMO_EDGE, is_hetero), as_typed(out.edge, HOMO_EDGE, is_hetero)
    fb = out.metadata.features
    for et, s in edges.items():
        oe = orig[et][edge[et]]
        assert torch.equal(s.edge_index[0, oe], orig[et[0]][node[et[0]][row[et]]]), et
        assert torch.equal(s.edge_index[1, oe], orig[et[2]][node[et[2]][col[et]]]), et
        for key in ("edge_attr", "edge_time"):
            if key in s:
                assert torch.equal(fb.edge[et][key], s[key][oe]), (et, key)
    for t, s in nodes.items():
        for key in NODE_ATTRS:
            if key in s:
                assert torch.equal(fb.node[t][key], s[key][orig[t][node[t]]]), (t, key)


def sorted_pairs(src: Tensor, dst: Tensor, n: int, kind: str) -> Tuple[Tensor, Tensor]:
    """``(src, dst)`` pairs sorted by (source, destination), deduplicated, then: ``"symmetric"`` with every
    reverse added, ``"loops"`` with every self loop added, ``"duplicates"`` with every pair twice, or
    anything else as they are (the partitioner kernels' input cases).

    Example:
        >>> sorted_pairs(torch.tensor([1, 0]), torch.tensor([0, 1]), 2, "duplicates")[0].tolist()
        [0, 0, 1, 1]
    """
    if kind == "symmetric":
        keep = src != dst
        src, dst = torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])
    key = torch.unique(src * n + dst)
    if kind == "loops":
        key = torch.unique(torch.cat([key, torch.arange(n) * (n + 1)]))
    if kind == "duplicates":
        key = torch.repeat_interleave(key, 2)
    return key // n, key % n


__all__ = ["sorted_pairs", "first_occurrence", "in_edges", "check_repeats", "typed_stores", "original_attrs",
           "relabelled", "typed_k_hop", "check_edges_and_features"]
