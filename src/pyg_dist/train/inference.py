"""Layer-wise full-neighbour inference over a partitioned graph (whole-graph evaluation).

Sampling-based evaluation is noisy and recomputes shared neighbourhoods; layer-wise inference computes
layer ``l + 1`` for every node once, from layer ``l`` of ALL its in-neighbours. Each rank computes the
nodes its partition owns: their in-edges are local (the partition stores the in-edges of its owned
nodes), and the previous layer's rows of remote neighbours are fetched from their owners, one request
per remote partition and batch, all issued before any is awaited. Between layers every rank meets at a
barrier, so nobody reads a layer that a peer is still writing.

Homogeneous graphs (the typed loop covers one node and one edge type); trainer RPC world
(``num_workers=0``). When several ranks serve one partition, each computes the whole partition (the
work is duplicated, the result identical).

Example:
    >>> convs = model.module.convs                                     # doctest: +SKIP
    >>> layers = [lambda xs, xd, ei, c=c: c((xs, xd), ei).relu() for c in convs[:-1]]  # doctest: +SKIP
    >>> layers.append(lambda xs, xd, ei: convs[-1]((xs, xd), ei))     # doctest: +SKIP
    >>> ids, out = layerwise_inference(layers, env)                   # doctest: +SKIP
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist._types import HOMO_NODE
from pyg_dist.errors import InvalidArgumentError, PyGDistError, check_positive_int
from pyg_dist.store.routing import route_ids

#: Callee that returns rows of the current layer for global ids this partition owns.
ROWS_OP = "pyg_dist.train.inference.rows"

Layer = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class RowsRequest:
    """Rows of layer ``layer`` for global node ids ``ids`` (owned by the receiving partition)."""
    layer: int
    ids: Tensor


@dataclass(frozen=True)
class RowsReply:
    """The rows a :class:`RowsRequest` asked for, in request order."""
    rows: Tensor


class LayerTable:
    """This partition's rows of the current layer; serves :data:`ROWS_OP`."""

    def __init__(self, book, partition: int):
        self.book, self.partition = book, partition
        self.layer: int = -1
        self.rows: Optional[Tensor] = None  # None also when this partition owns no node
        self._lock = threading.Lock()

    def publish(self, layer: int, rows: Optional[Tensor]) -> None:
        """Make ``rows`` (this partition's output of layer ``layer``) the rows served from now on."""
        with self._lock:
            self.layer, self.rows = layer, rows

    def local_rows(self, layer: int, ids: Tensor) -> Tensor:
        """Rows of global ``ids`` this partition owns."""
        return self.rows_at(layer, self.book.to_local(HOMO_NODE, ids))

    def rows_at(self, layer: int, rows: Tensor) -> Tensor:
        """Rows at local positions ``rows`` of layer ``layer``."""
        with self._lock:
            if layer != self.layer:
                raise PyGDistError(f"partition {self.partition} holds layer {self.layer}, asked for layer {layer}")
            assert self.rows is not None  # published, and this partition owns the rows asked for
            return self.rows[rows]

    def serve(self, req: RowsRequest) -> RowsReply:
        """Answer a remote :class:`RowsRequest` (the :data:`ROWS_OP` callee)."""
        return RowsReply(self.local_rows(req.layer, req.ids))


def _gather_rows(table: LayerTable, layer: int, ids: Tensor, timeout: float) -> Tensor:
    """Rows of ``ids`` (any owner), in order: every remote request first, then local rows, then the
    replies in place (routing by :func:`pyg_dist.store.routing.route_ids`)."""
    from pyg_dist import rpc

    route = route_ids(table.book, table.partition, HOMO_NODE, ids)
    futures = {p: rpc.call_async(p, ROWS_OP, RowsRequest(layer, ids.index_select(0, pos)), timeout=timeout)
               for p, pos in route.remote.items()}
    local = table.rows_at(layer, route.local_rows)
    if not futures:
        return local
    out = local.new_empty((ids.numel(),) + tuple(local.shape[1:]))
    out[route.local_pos] = local
    for p, fut in futures.items():
        out[route.remote[p]] = fut.wait().rows.to(out.dtype)
    return out


def _barrier() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


@torch.no_grad()
def layerwise_inference(layers: Sequence[Layer], env, *, x_attr: str = "x", batch_size: int = 4096,
                        device=None, timeout: float = 60.0) -> Tuple[Tensor, Optional[Tensor]]:
    """Runs ``layers`` over the whole graph, layer by layer; returns ``(global ids, outputs)`` of the
    nodes this rank's partition owns (outputs ``None`` when it owns none). Collective: every rank of the
    world must call it.

    Args:
        layers: One callable per layer, ``layer(x_src, x_dst, edge_index) -> out_dst`` where
            ``edge_index`` is bipartite (row: index into ``x_src``, col: index into ``x_dst``),
            e.g. ``lambda xs, xd, ei: conv((xs, xd), ei).relu()`` for a ``SAGEConv``.
        env: The :class:`~pyg_dist.train.session.DistEnv` of a trainer world (``num_workers=0``).
        x_attr: Node attribute that is layer 0.
        batch_size: Destination nodes per step.
        device: Where the layers run (default ``env.device``); rows travel on CPU.
        timeout: Seconds per remote request.
    """
    from pyg_dist import rpc

    if not layers or not all(callable(f) for f in layers):
        raise InvalidArgumentError("layerwise_inference", "layers", layers, "a non-empty list of callables")
    check_positive_int("layerwise_inference", "batch_size", batch_size)
    gs, fs = env.graph_store, env.feature_store
    if gs.partition_meta.is_hetero or not rpc.is_initialized():
        raise InvalidArgumentError("layerwise_inference", "env", env,
                                   "a homogeneous folder in a trainer RPC world (num_workers=0)")
    device = env.device if device is None else device
    ids = fs.get_global_id(None)
    table = LayerTable(gs.book, gs.partition)
    rpc.register_callee(ROWS_OP, table.serve, replace=True)
    try:
        table.publish(0, fs.get_tensor(group_name=None, attr_name=x_attr).float())
        _barrier()
        for depth, layer in enumerate(layers):
            out = torch.cat([_layer_batch(layer, table, depth, gs, chunk, device, timeout).cpu()
                             for chunk in ids.split(batch_size)]) if ids.numel() else None
            _barrier()                      # every rank is done reading layer `depth`
            table.publish(depth + 1, out)
            _barrier()                      # every rank serves layer `depth + 1`
        return ids, table.rows
    finally:
        rpc.unregister_callee(ROWS_OP)


def _layer_batch(layer: Layer, table: LayerTable, depth: int, gs, dst: Tensor, device, timeout: float) -> Tensor:
    """One batch of destinations: their in-edges (local), neighbours' rows (any owner), the layer."""
    csc = gs.local_csc(None)
    start, _ = gs.dst_range(None)
    pos = dst - start
    lo, hi = csc.colptr[pos], csc.colptr[pos + 1]
    deg = hi - lo
    edge_pos = torch.repeat_interleave(lo - torch.cumsum(deg, 0) + deg, deg) + torch.arange(int(deg.sum()))
    src = csc.row[edge_pos].long()
    uniq, src_local = torch.unique(src, return_inverse=True)
    col = torch.repeat_interleave(torch.arange(dst.numel()), deg)
    x_src = _gather_rows(table, depth, uniq, timeout).to(device)
    x_dst = table.local_rows(depth, dst).to(device)
    edge_index = torch.stack([src_local, col]).to(device)
    return layer(x_src, x_dst, edge_index)


__all__ = ["layerwise_inference", "LayerTable", "RowsRequest", "RowsReply", "ROWS_OP"]
