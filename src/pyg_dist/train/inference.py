"""Layer-wise full-neighbour inference over a partitioned graph (whole-graph evaluation), homo or hetero.

Sampling-based evaluation is noisy and recomputes shared neighbourhoods; layer-wise inference computes
layer ``l + 1`` for every node once, from layer ``l`` of ALL its in-neighbours over every edge type. Each rank
computes the nodes its partition owns, one node type and ``batch_size`` destinations at a time: their in-edges
are local (the partition stores the in-edges of its owned nodes), and the previous layer's rows of remote
neighbours are fetched from their owners, one request per remote partition and batch (every node type in it),
all issued before any is awaited (:mod:`pyg_dist.train.layer_table`). Between layers every rank meets at a
barrier, so nobody reads a layer that a peer is still writing. Memory per step is bounded by the batch: its
destinations, their in-edges and the rows of their in-neighbours.

A layer is called the way the model's layer is called:

- homogeneous folders: ``layer(x_src, x_dst, edge_index) -> out`` with a bipartite ``edge_index`` (row: index
  into ``x_src``, col: index into ``x_dst``), e.g. ``lambda xs, xd, ei: conv((xs, xd), ei).relu()``;
- heterogeneous folders: ``layer(x_dict, edge_index_dict) -> out_dict``, e.g. one ``HeteroConv`` or a
  ``to_hetero``-transformed one-layer module. The batch is laid out as PyG's neighbour loader lays out a
  one-hop batch: ``x_dict[t]`` starts with the batch's destinations of type ``t`` (their rows are the ones
  kept), then the in-neighbours; every node and edge type of the folder is present (empty where the batch
  has none), so modules traced by ``to_hetero`` find every key.

Needs the trainer in the RPC world (``TrainConfig(num_workers=0)``); with sampler workers it refuses with a
typed error. When several ranks serve one partition, each computes the whole partition (the work is
duplicated, the result identical).

Example:
    >>> convs = model.module.convs                                     # doctest: +SKIP
    >>> layers = [lambda xs, xd, ei, c=c: c((xs, xd), ei).relu() for c in convs[:-1]]  # doctest: +SKIP
    >>> layers.append(lambda xs, xd, ei: convs[-1]((xs, xd), ei))     # doctest: +SKIP
    >>> ids, out = layerwise_inference(layers, env)                   # doctest: +SKIP
    >>> ids, out = layerwise_inference(hetero_model.layers, env)      # hetero: dicts per node type  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import HOMO_NODE
from pyg_dist.errors import InvalidArgumentError, PyGDistError, check_positive_int
from pyg_dist.train.layer_table import ROWS_OP, LayerTable, RowsReply, RowsRequest, gather_rows

_WHERE = "layerwise_inference"
Layer = Callable[..., Union[Tensor, Dict[str, Tensor]]]


@dataclass(frozen=True)
class _Batch:
    """One step: destinations ``dst`` of type ``node_type``; per source type the unique in-neighbours; per edge
    type into ``node_type`` the edges as (index into its source type's ``uniq``, index into ``dst``)."""
    node_type: str
    dst: Tensor
    uniq: Dict[str, Tensor]
    edges: Dict[Tuple[str, str, str], Tuple[Tensor, Tensor]]


def _in_edges(gs, et, dst: Tensor) -> Tuple[Tensor, Tensor]:
    """Global sources and destination positions of the in-edges of ``dst`` (owned) over edge type ``et``."""
    csc = gs.local_csc(et)
    start, _ = gs.dst_range(et)
    pos = dst - start
    lo, hi = csc.colptr[pos], csc.colptr[pos + 1]
    deg = hi - lo
    edge_pos = torch.repeat_interleave(lo - torch.cumsum(deg, 0) + deg, deg) + torch.arange(int(deg.sum()))
    return csc.row[edge_pos].long(), torch.repeat_interleave(torch.arange(dst.numel()), deg)


def _batch(gs, edge_types, node_type: str, dst: Tensor) -> _Batch:
    into = [et for et in edge_types if et[2] == node_type]
    src = {et: _in_edges(gs, et, dst) for et in into}
    uniq, edges = {}, {}
    for s in dict.fromkeys(et[0] for et in into):
        mine = [et for et in into if et[0] == s]
        uniq[s], inverse = torch.unique(torch.cat([src[et][0] for et in mine]), return_inverse=True)
        for et, part in zip(mine, inverse.split([src[et][0].numel() for et in mine])):
            edges[et] = (part, src[et][1])
    return _Batch(node_type, dst, uniq, edges)


def _run_homo(layer: Layer, b: _Batch, rows: Dict[str, Tensor], x_dst: Tensor, device) -> Any:
    row, col = next(iter(b.edges.values()))                # the one edge type
    x_src = rows[b.node_type]
    return layer(x_src.to(device), x_dst.to(device), torch.stack([row, col]).to(device))


def _run_hetero(layer: Layer, b: _Batch, rows: Dict[str, Tensor], x_dst: Tensor, table: LayerTable,
                edge_types, device) -> Tensor:
    x_dict = {t: rows[t] if t in rows else x_dst.new_empty((0,) + table.width(t)) for t in table.rows}
    x_dict[b.node_type] = torch.cat([x_dst, x_dict[b.node_type].to(x_dst.dtype)])
    n_dst = b.dst.numel()
    empty = torch.empty(2, 0, dtype=torch.long)
    ei_dict = {}
    for et in edge_types:
        if et in b.edges:
            row, col = b.edges[et]
            ei_dict[et] = torch.stack([row + (n_dst if et[0] == b.node_type else 0), col])
        else:
            ei_dict[et] = empty
    out = layer({t: v.to(device) for t, v in x_dict.items()}, {et: v.to(device) for et, v in ei_dict.items()})
    got = out.get(b.node_type) if isinstance(out, dict) else None
    if not isinstance(got, Tensor):
        raise InvalidArgumentError(_WHERE, "layers", type(out).__name__,
                                   f"layers returning a dict with rows for node type {b.node_type!r} (a type "
                                   "with no incoming edge type gets none from HeteroConv: add reverse edges, e.g. "
                                   "T.ToUndirected(), before partitioning)")
    return got[:n_dst]


def _step(layer: Layer, table: LayerTable, depth: int, gs, b: _Batch, hetero: bool, device, timeout) -> Tensor:
    rows = gather_rows(table, depth, b.uniq, timeout)      # remote requests go out first
    x_dst = table.local_rows(depth, b.node_type, b.dst)
    if hetero:
        out = _run_hetero(layer, b, rows, x_dst, table, gs.partition_meta.edge_types, device)
    else:
        out = _run_homo(layer, b, rows, x_dst, device)
    if not isinstance(out, Tensor) or out.dim() < 1 or out.size(0) != b.dst.numel():
        shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise InvalidArgumentError(_WHERE, "layers", shape, f"layer {depth} returning one row per destination "
                                   f"({b.dst.numel()} of type {b.node_type!r})")
    return out.detach().cpu()


def _barrier() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _check(layers, env, batch_size) -> None:
    from pyg_dist import rpc

    if not isinstance(layers, (list, tuple, torch.nn.ModuleList)) or not layers or \
            not all(callable(f) for f in layers):
        raise InvalidArgumentError(_WHERE, "layers", layers, "a non-empty sequence of callables, one per layer")
    check_positive_int(_WHERE, "batch_size", batch_size)
    workers = getattr(getattr(env, "config", None), "num_workers", 0)
    if workers or not rpc.is_initialized():
        raise InvalidArgumentError(_WHERE, "env", f"num_workers={workers}", "a session whose trainers joined the "
                                   "RPC world (TrainConfig(num_workers=0)): layer-wise inference fetches rows "
                                   "from the trainers; open a session with num_workers=0 for inference")


def _layer_zero(fs, node_types: List[str], x_attr: str) -> Dict[str, Tensor]:
    rows = {}
    for t in node_types:
        group = None if t == HOMO_NODE else t
        try:
            rows[t] = fs.get_tensor(group_name=group, attr_name=x_attr).float()
        except (KeyError, PyGDistError) as e:
            raise InvalidArgumentError(_WHERE, "x_attr", x_attr, f"a feature of every node type (node type "
                                       f"{t!r}: {e})") from None
    return rows


@torch.no_grad()
def layerwise_inference(layers: Sequence[Layer], env, *, x_attr: str = "x", batch_size: int = 4096,
                        device=None, timeout: float = 60.0):
    """Runs ``layers`` over the whole graph, layer by layer. Collective: every rank of the world must call it.

    Returns:
        Homogeneous folders: ``(global ids, outputs)`` of the nodes this rank's partition owns (outputs: a
        tensor with one row per id, empty when it owns none). Heterogeneous: ``(ids_dict, out_dict)`` per node
        type.

    Args:
        layers: One callable per layer: ``layer(x_src, x_dst, edge_index)`` (homogeneous) or
            ``layer(x_dict, edge_index_dict) -> out_dict`` (heterogeneous); see the module docstring.
        env: The :class:`~pyg_dist.train.session.DistEnv` of a trainer world (``num_workers=0``).
        x_attr: Node attribute that is layer 0 (every node type must have it).
        batch_size: Destination nodes per step (memory per step grows with it and their in-degree).
        device: Where the layers run (default ``env.device``); rows travel on CPU.
        timeout: Seconds per remote request.
    """
    from pyg_dist import rpc

    _check(layers, env, batch_size)
    gs, fs = env.graph_store, env.feature_store
    meta = gs.partition_meta
    node_types, hetero = list(meta.node_types), bool(meta.is_hetero)
    device = env.device if device is None else device
    ids = {t: gs.book.owned_ids(t, gs.partition) for t in node_types}
    table = LayerTable(gs.book, gs.partition)
    rpc.register_callee(ROWS_OP, table.serve, replace=True)
    try:
        table.publish(0, _layer_zero(fs, node_types, x_attr))
        _barrier()
        for depth, layer in enumerate(layers):
            out = {t: torch.cat([_step(layer, table, depth, gs, _batch(gs, meta.edge_types, t, chunk), hetero,
                                       device, timeout)
                                 for chunk in (ids[t].split(batch_size) if ids[t].numel() else [ids[t]])])
                   for t in node_types}
            _barrier()                      # every rank is done reading layer `depth`
            table.publish(depth + 1, out)
            _barrier()                      # every rank serves layer `depth + 1`
        if hetero:
            return ids, dict(table.rows)
        return ids[HOMO_NODE], table.rows[HOMO_NODE]
    finally:
        rpc.unregister_callee(ROWS_OP)


__all__ = ["layerwise_inference", "LayerTable", "RowsRequest", "RowsReply", "ROWS_OP"]
