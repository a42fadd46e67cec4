"""Edge direction, shared by every graph source's reader: :func:`symmetrize` (add each missing reverse edge)
and :func:`edge_direction_report` (which the loaded graph is).
"""
from __future__ import annotations

import torch


def symmetrize(data):
    """Adds the reverse of every edge of ``data`` whose reverse is missing; per-edge attributes
    (``edge_attr``, ``edge_weight``, ``edge_time``, ...) of a reverse edge copy its forward edge's.

    Idempotent; duplicates and self loops of the input are kept as they are (never dropped).

    Example:
        >>> from torch_geometric.data import Data
        >>> d = symmetrize(Data(edge_index=torch.tensor([[0, 1, 2], [1, 0, 0]]), num_nodes=3))
        >>> d.edge_index.tolist()
        [[0, 1, 2, 0], [1, 0, 0, 2]]
    """
    missing = _missing_reverse(data.edge_index, data.num_nodes)
    if not bool(missing.any()):
        return data
    n_edges = data.edge_index.size(1)
    per_edge = [k for k in data.keys() if k != "edge_index" and data.is_edge_attr(k)
                and isinstance(data[k], torch.Tensor) and data[k].size(0) == n_edges]
    data.edge_index = torch.cat([data.edge_index, data.edge_index[:, missing].flip(0)], 1)
    for key in per_edge:
        data[key] = torch.cat([data[key], data[key][missing]])
    return data


def _missing_reverse(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Mask of the edges whose reverse edge is not in ``edge_index``."""
    n = max(int(num_nodes), 1)
    keys = edge_index[0] * n + edge_index[1]
    return ~torch.isin(edge_index[1] * n + edge_index[0], keys)


def edge_direction_report(data) -> str:
    """One line saying whether every edge of a homogeneous ``data`` has its reverse.

    Example:
        >>> from torch_geometric.data import Data
        >>> edge_direction_report(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
        'edges: directed (1 of 1 edges lack their reverse; --undirected adds them)'
    """
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        return "edges: heterogeneous graph (per edge type, as loaded)"
    missing = int(_missing_reverse(data.edge_index, data.num_nodes).sum())
    if missing == 0:
        return "edges: symmetric (every edge has its reverse)"
    return (f"edges: directed ({missing} of {data.edge_index.size(1)} edges lack their reverse; "
            "--undirected adds them)")
