"""Argument checks shared by the loaders: every user input is validated before PyG sees it.

PyG's loader helpers ``assert`` on malformed inputs; these checks raise
:class:`~pyg_dist.errors.InvalidArgumentError` naming the loader, the argument and the value instead.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, check_positive_int


def check_data(where: str, data: Any, has_sampler: bool) -> None:
    """``data`` must be a ``Data``/``HeteroData`` unless the caller brings its own sampler."""
    if not has_sampler and not isinstance(data, (Data, HeteroData)):
        raise InvalidArgumentError(where, "data", type(data).__name__,
                                   "a torch_geometric Data or HeteroData (or pass neighbor_sampler=)")


def default_filter_per_worker(data: Any, filter_per_worker: Optional[bool]) -> Optional[bool]:
    """``False`` for an in-memory CPU graph when the user left it unset (see the loaders' docstrings)."""
    if filter_per_worker is None and isinstance(data, (Data, HeteroData)) and not data.is_cuda:
        return False
    return filter_per_worker


def check_seed(where: str, seed: Any) -> Optional[int]:
    """A loader's ``seed``: ``None`` or an int."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise InvalidArgumentError(where, "seed", seed, "None or an int")
    return seed


def check_num_neighbors(where: str, num_neighbors: Any) -> None:
    """The container of ``num_neighbors`` (its values are checked by the sampler)."""
    from torch_geometric.sampler.base import NumNeighbors
    if not isinstance(num_neighbors, (list, tuple, dict, NumNeighbors)):
        raise InvalidArgumentError(where, "num_neighbors", num_neighbors,
                                   "a list of ints per hop (e.g. [10, 5]) or a dict per edge type")


def node_counts(data: Any) -> Dict[NodeType, int]:
    """Number of nodes per (typed) node type of an in-memory graph; ``{}`` for other inputs."""
    if isinstance(data, HeteroData):
        return {t: int(data[t].num_nodes) for t in data.node_types}
    if isinstance(data, Data):
        return {HOMO_NODE: int(data.num_nodes)}
    return {}


def _check_ids(where: str, name: str, ids: Any, num_nodes: Optional[int], what: str) -> int:
    """Validates an index tensor (bool mask or int ids, 1-D); returns the number of selected ids."""
    if isinstance(ids, (list, tuple)):
        try:
            ids = torch.tensor(ids, dtype=torch.long)
        except (TypeError, ValueError, RuntimeError):
            raise InvalidArgumentError(where, name, ids, f"a 1-D tensor or list of {what} ids") from None
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        raise InvalidArgumentError(where, name, ids, f"a 1-D bool mask or int64 tensor of {what} ids")
    if ids.dtype == torch.bool:
        if num_nodes is not None and ids.numel() != num_nodes:
            raise InvalidArgumentError(where, name, f"bool mask of length {ids.numel()}",
                                       f"a mask of length {num_nodes} (one per {what} node)")
        return int(ids.sum())
    if ids.is_floating_point() or ids.is_complex():
        raise InvalidArgumentError(where, name, f"tensor of dtype {ids.dtype}", "an integer or bool tensor")
    if num_nodes is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise InvalidArgumentError(where, name, ids, f"{what} ids in [0, {num_nodes})")
    return ids.numel()


def check_input_nodes(where: str, data: Any, input_nodes: Any) -> int:
    """Validates ``input_nodes`` the way PyG's ``NeighborLoader`` reads it; returns the seed count.

    Homogeneous: ``None`` (all nodes), an int64 id tensor, a bool mask, or a list of ids.
    Heterogeneous: a node type, or ``(node_type, ids_or_mask_or_None)``.
    """
    counts = node_counts(data)
    if not isinstance(data, HeteroData):
        if input_nodes is None:
            return counts.get(HOMO_NODE, 0)
        return _check_ids(where, "input_nodes", input_nodes, counts.get(HOMO_NODE), "node")
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if not (isinstance(input_nodes, (list, tuple)) and len(input_nodes) == 2
            and isinstance(input_nodes[0], str)):
        raise InvalidArgumentError(where, "input_nodes", input_nodes,
                                   "a node type or a (node_type, ids) pair for a HeteroData")
    ntype, ids = input_nodes
    if ntype not in counts:
        raise InvalidArgumentError(where, "input_nodes", ntype, f"a node type in {sorted(counts)}")
    if ids is None:
        return counts[ntype]
    return _check_ids(where, "input_nodes", ids, counts[ntype], repr(ntype))


def edge_label_input(where: str, data: Any, edge_label_index: Any) -> Tuple[EdgeType, Optional[Tensor]]:
    """Validates ``edge_label_index``; returns the typed edge type and the ``[2, E]`` tensor.

    The tensor is ``None`` when ``data`` is not in memory and the edges come from its graph store.
    """
    if not isinstance(data, HeteroData):
        edge_type = HOMO_EDGE
        index = data.edge_index if edge_label_index is None and isinstance(data, Data) else edge_label_index
    else:
        edge_type, index = _hetero_edge_input(where, data, edge_label_index)
    if index is None and not isinstance(data, (Data, HeteroData)):
        return edge_type, None
    if not isinstance(index, Tensor) or index.dim() != 2 or index.size(0) != 2 or index.is_floating_point():
        raise InvalidArgumentError(where, "edge_label_index", index, "an integer tensor of shape [2, E]")
    counts = node_counts(data)
    for row, ntype in ((index[0], edge_type[0]), (index[1], edge_type[-1])):
        num = counts.get(ntype)
        if num is not None and row.numel() and (int(row.min()) < 0 or int(row.max()) >= num):
            raise InvalidArgumentError(where, "edge_label_index", index,
                                       f"{ntype!r} node ids in [0, {num}) in row {0 if row is index[0] else 1}")
    return edge_type, index


def _hetero_edge_input(where: str, data: HeteroData, value: Any) -> Tuple[EdgeType, Optional[Tensor]]:
    if isinstance(value, (list, tuple)) and len(value) in (2, 3) and all(isinstance(v, str) for v in value):
        value = (tuple(value), None)
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], (list, tuple))):
        raise InvalidArgumentError(where, "edge_label_index", value,
                                   "an edge type or an (edge_type, [2, E] tensor) pair for a HeteroData")
    try:
        edge_type = data._to_canonical(*value[0])
    except (TypeError, ValueError, AssertionError):
        edge_type = tuple(value[0])
    if edge_type not in data.edge_types:
        raise InvalidArgumentError(where, "edge_label_index", value[0],
                                   f"an edge type in {data.edge_types}")
    index = value[1] if value[1] is not None else data[edge_type].edge_index
    return tuple(edge_type), index


def check_aligned(where: str, name: str, value: Any, length: int) -> None:
    """``value`` must be ``None`` or a tensor whose first dimension is ``length``."""
    if value is None:
        return
    if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != length:
        shown = tuple(value.shape) if isinstance(value, Tensor) else value
        raise InvalidArgumentError(where, name, shown, f"a tensor with {length} rows (one per seed)")


def check_loader_kwargs(where: str, kwargs: Dict[str, Any]) -> None:
    """Checks the ``DataLoader`` keyword arguments users get wrong most often."""
    if "batch_size" in kwargs and kwargs["batch_size"] is not None:
        check_positive_int(where, "batch_size", kwargs["batch_size"])
    if "num_workers" in kwargs:
        check_positive_int(where, "num_workers", kwargs["num_workers"], allow_zero=True)


def check_time_args(where: str, seed_time_name: str, seed_time: Any, time_attr: Any, both: bool) -> None:
    """``time_attr`` must be a string; seed times need it (and, for links, it needs them)."""
    if time_attr is not None and not isinstance(time_attr, str):
        raise InvalidArgumentError(where, "time_attr", time_attr, "None or an attribute name")
    if seed_time is not None and time_attr is None:
        raise InvalidArgumentError(where, seed_time_name, "<tensor>",
                                   "None unless time_attr is set (temporal sampling)")
    if both and time_attr is not None and seed_time is None:
        raise InvalidArgumentError(where, seed_time_name, None,
                                   "a tensor of seed edge times when time_attr is set")
