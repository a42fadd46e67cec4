"""Argument checks shared by the loaders: every user input is validated before PyG sees it.

PyG's loader helpers ``assert`` on malformed inputs; these checks raise
:class:`~pyg_dist.errors.InvalidArgumentError` naming the loader, the argument and the value instead.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist._types import HOMO_EDGE, HOMO_NODE, EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, check_positive_int
from pyg_dist.sampler.store_pair import check_pair, is_store_pair, pair_coo, pair_view


def check_data(where: str, data: Any, has_sampler: bool) -> None:
    """``data`` must be a ``Data``/``HeteroData`` or a ``(FeatureStore, GraphStore)`` pair unless the
    caller brings its own sampler."""
    if has_sampler or isinstance(data, (Data, HeteroData)) or is_store_pair(data):
        return
    check_pair(where, data)
    raise InvalidArgumentError(where, "data", type(data).__name__, "a torch_geometric Data, HeteroData or "
                               "(FeatureStore, GraphStore) pair (or pass neighbor_sampler=); Expected a 'Data', "
                               "'HeteroData', or a tuple of 'FeatureStore' and 'GraphStore'")


def is_hetero(where: str, data: Any) -> bool:
    """Whether ``data`` (a ``Data``, ``HeteroData`` or store pair) is heterogeneous."""
    if is_store_pair(data):
        return pair_view(where, data).is_hetero
    return isinstance(data, HeteroData)


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
    """Number of nodes per (typed) node type of an in-memory graph or store pair; ``{}`` for other inputs."""
    if is_store_pair(data):
        return dict(pair_view("loader", data).num_nodes)
    if isinstance(data, HeteroData):
        counts = {t: data[t].num_nodes for t in data.node_types}
        for t, n in counts.items():
            if n is None:
                raise InvalidArgumentError("loader", "data", f"node type {t!r} without num_nodes",
                                           f"data[{t!r}].num_nodes set (or a feature that tells it)")
        return {t: int(n) for t, n in counts.items()}
    if isinstance(data, Data):
        return {HOMO_NODE: int(data.num_nodes)}
    return {}


def _check_ids(where: str, name: str, ids: Any, num_nodes: Optional[int], what: str) -> int:
    """Validates an index tensor (bool mask or int ids, 1-D); returns the number of selected ids."""
    ids = as_index(where, name, ids, what)
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


def as_index(where: str, name: str, ids: Any, what: str) -> Any:
    """An index sequence (``range``, list, tuple, numpy array) as an int64 tensor; tensors unchanged."""
    if isinstance(ids, Tensor) or ids is None or isinstance(ids, str):
        return ids
    if isinstance(ids, (range, list, tuple)) or hasattr(ids, "__array__"):
        try:
            out = torch.as_tensor(list(ids) if isinstance(ids, range) else ids)
        except (TypeError, ValueError, RuntimeError):
            raise InvalidArgumentError(where, name, ids, f"a 1-D tensor or sequence of {what} ids") from None
        if out.numel() == 0:
            return out.long()
        if out.dtype == torch.bool or (not out.is_floating_point() and not out.is_complex()):
            return out if out.dtype == torch.bool else out.long()
        raise InvalidArgumentError(where, name, ids, f"a 1-D tensor or sequence of integer {what} ids")
    return ids


def normalize_input_nodes(where: str, data: Any, input_nodes: Any) -> Any:
    """``input_nodes`` with index sequences as tensors and, for a store pair, ``None`` / a node type as
    every node (PyG reads a pair's seeds only as tensors)."""
    hetero = is_hetero(where, data)
    if hetero and isinstance(input_nodes, (list, tuple)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        input_nodes = (input_nodes[0], as_index(where, "input_nodes", input_nodes[1], repr(input_nodes[0])))
    elif not hetero:
        input_nodes = as_index(where, "input_nodes", input_nodes, "node")
    if not is_store_pair(data):
        return input_nodes
    counts = node_counts(data)
    if not hetero and input_nodes is None:
        return torch.arange(counts[HOMO_NODE])
    if hetero and isinstance(input_nodes, str) and input_nodes in counts:
        return input_nodes, torch.arange(counts[input_nodes])
    if hetero and isinstance(input_nodes, tuple) and input_nodes[1] is None and input_nodes[0] in counts:
        return input_nodes[0], torch.arange(counts[input_nodes[0]])
    return input_nodes


def check_input_nodes(where: str, data: Any, input_nodes: Any) -> int:
    """Validates ``input_nodes`` the way PyG's ``NeighborLoader`` reads it; returns the seed count.

    Homogeneous: ``None`` (all nodes), an int64 id tensor, a bool mask, or a list of ids.
    Heterogeneous: a node type, or ``(node_type, ids_or_mask_or_None)``.
    """
    counts = node_counts(data)
    if not is_hetero(where, data):
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
    """Validates ``edge_label_index``; returns the typed edge type and the ``[2, E]`` tensor (a store
    pair's edges are read through its graph store). ``None`` as the tensor: ``data`` is neither in
    memory nor a store pair (a user's sampler reads it)."""
    if not is_hetero(where, data):
        edge_type, index = HOMO_EDGE, edge_label_index
        if index is None and isinstance(data, Data):
            index = data.edge_index
        elif index is None and is_store_pair(data):
            index = pair_coo(data, HOMO_EDGE, pair_view(where, data))[0]
    else:
        edge_type, index = _hetero_edge_input(where, data, edge_label_index)
    if index is None and not (isinstance(data, (Data, HeteroData)) or is_store_pair(data)):
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


def _canonical(data: Any, edge_type: Any, existing: List[EdgeType]) -> EdgeType:
    """``(src, dst)`` or ``(src, rel, dst)`` as a stored edge type, or as PyG names a new one."""
    edge_type = tuple(edge_type)
    if len(edge_type) == 3:
        return edge_type
    found = [et for et in existing if (et[0], et[2]) == edge_type]
    if len(found) == 1:
        return found[0]
    if isinstance(data, HeteroData):
        try:
            return tuple(data._to_canonical(*edge_type))
        except (TypeError, ValueError, AssertionError):
            return edge_type
    return (edge_type[0], "to", edge_type[-1])


def _hetero_edge_input(where: str, data: Any, value: Any) -> Tuple[EdgeType, Optional[Tensor]]:
    if isinstance(value, (list, tuple)) and len(value) in (2, 3) and all(isinstance(v, str) for v in value):
        value = (tuple(value), None)
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], (list, tuple))
            and len(value[0]) in (2, 3) and all(isinstance(v, str) for v in value[0])):
        raise InvalidArgumentError(where, "edge_label_index", value,
                                   "an edge type or an (edge_type, [2, E] tensor) pair for heterogeneous data")
    pair = is_store_pair(data)
    existing = pair_view(where, data).edge_types if pair else list(data.edge_types)
    edge_type = _canonical(data, value[0], existing)
    if value[1] is not None:  # label edges of a type the graph need not hold (e.g. a graph without edges)
        counts = node_counts(data)
        missing = [t for t in (edge_type[0], edge_type[-1]) if t not in counts]
        if missing:
            raise InvalidArgumentError(where, "edge_label_index", value[0], f"node types in {sorted(counts)}")
        return edge_type, value[1]
    if edge_type not in existing:
        raise InvalidArgumentError(where, "edge_label_index", value[0],
                                   f"an edge type in {existing} (or pass its [2, E] label edges)")
    if pair:
        return edge_type, pair_coo(data, edge_type, pair_view(where, data))[0]
    return edge_type, data[edge_type].edge_index


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
    """``time_attr`` must be a string; seed times need it (and, for links, it needs them). Messages keep
    PyG's phrase ("Received conflicting '<seed times>' and 'time_attr' arguments")."""
    if time_attr is not None and not isinstance(time_attr, str):
        raise InvalidArgumentError(where, "time_attr", time_attr, "None or an attribute name")
    given = seed_time is not None
    if given == (time_attr is not None) or (not both and not given):
        return
    pyg = (f"Received conflicting '{seed_time_name}' and 'time_attr' arguments: '{seed_time_name}' is "
           f"{'set' if given else 'not set'} while 'time_attr' is {'not set' if given else 'set'}.")
    if given:
        raise InvalidArgumentError(where, seed_time_name, "<tensor>",
                                   f"None unless time_attr is set (temporal sampling). {pyg}")
    raise InvalidArgumentError(where, seed_time_name, None,
                               f"a tensor of seed edge times when time_attr is set ({time_attr!r}). {pyg}")
