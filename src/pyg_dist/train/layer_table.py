"""The rows of one layer that a partition serves during layer-wise inference, and how a rank gathers rows.

Every node type has its own rows (homogeneous folders: one type). A rank asks each remote partition once per
batch for the rows of every node type it needs there (:class:`RowsRequest`), issues every request before it
awaits any, and fills its own rows in the meantime. What a peer sends is checked before it is used: a request
names only types and ids this partition owns; a reply holds one row per id asked, of the layer's width.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError
from pyg_dist.store.routing import route_ids

#: Callee that returns rows of the current layer for global ids this partition owns.
ROWS_OP = "pyg_dist.train.inference.rows"


@dataclass(frozen=True)
class RowsRequest:
    """Rows of layer ``layer`` for global node ids ``ids[node_type]`` (owned by the receiving partition)."""
    layer: int
    ids: Dict[str, Tensor]


@dataclass(frozen=True)
class RowsReply:
    """The rows a :class:`RowsRequest` asked for, per node type, in request order."""
    rows: Dict[str, Tensor]


class LayerTable:
    """This partition's rows of the current layer, per node type; serves :data:`ROWS_OP`."""

    def __init__(self, book, partition: int):
        self.book, self.partition = book, partition
        self.layer: int = -1
        self.rows: Dict[str, Tensor] = {}
        self._lock = threading.Lock()

    def publish(self, layer: int, rows: Dict[str, Tensor]) -> None:
        """Make ``rows`` (this partition's output of layer ``layer``, per node type) the rows served from now on."""
        with self._lock:
            self.layer, self.rows = layer, dict(rows)

    def width(self, node_type: str) -> tuple:
        """Shape of one row of ``node_type`` in the current layer."""
        return tuple(self.rows[node_type].shape[1:])

    def rows_at(self, layer: int, node_type: str, rows: Tensor) -> Tensor:
        """Rows at local positions ``rows`` of ``node_type`` in layer ``layer``."""
        with self._lock:
            if layer != self.layer:
                raise PyGDistError(f"partition {self.partition} holds layer {self.layer}, asked for layer {layer}")
            return self.rows[node_type][rows]

    def local_rows(self, layer: int, node_type: str, ids: Tensor) -> Tensor:
        """Rows of global ``ids`` of ``node_type`` this partition owns."""
        return self.rows_at(layer, node_type, self.book.to_local(node_type, ids))

    def serve(self, req: RowsRequest) -> RowsReply:
        """Answer a remote :class:`RowsRequest` (the :data:`ROWS_OP` callee); ids this partition does not own,
        or node types it does not know, are refused."""
        if not isinstance(req, RowsRequest) or not isinstance(req.ids, dict):
            raise PyGDistError(f"partition {self.partition}: a layer-rows request must be a RowsRequest, got "
                               f"{type(req).__name__}")
        out = {}
        for node_type, ids in req.ids.items():
            if node_type not in self.rows:
                raise PyGDistError(f"partition {self.partition}: unknown node type {node_type!r} in a layer-rows "
                                   f"request (types: {sorted(self.rows)})")
            if not isinstance(ids, Tensor) or ids.dtype != torch.int64 or ids.dim() != 1:
                raise PyGDistError(f"partition {self.partition}: layer-rows ids of {node_type!r} must be a 1-D "
                                   f"int64 tensor, got {getattr(ids, 'dtype', type(ids).__name__)}")
            if ids.numel() and not bool((self.book.owner(node_type, ids) == self.partition).all()):
                raise PyGDistError(f"partition {self.partition}: a layer-rows request for {node_type!r} names ids "
                                   "this partition does not own")
            out[node_type] = self.local_rows(req.layer, node_type, ids)
        return RowsReply(out)


def gather_rows(table: LayerTable, layer: int, ids: Dict[str, Tensor], timeout: float) -> Dict[str, Tensor]:
    """Rows of layer ``layer`` for global ``ids[node_type]`` (any owner), in order: one request per remote
    partition (every node type in it), all issued before the local rows are read and before any is awaited."""
    from pyg_dist import rpc

    routes = {t: route_ids(table.book, table.partition, t, v) for t, v in ids.items()}
    asks: Dict[int, Dict[str, Tensor]] = {}
    for t, route in routes.items():
        for p, pos in route.remote.items():
            asks.setdefault(p, {})[t] = ids[t].index_select(0, pos)
    futures = {p: rpc.call_async(p, ROWS_OP, RowsRequest(layer, ask), timeout=timeout) for p, ask in asks.items()}
    out: Dict[str, Tensor] = {}
    for t, route in routes.items():
        local = table.rows_at(layer, t, route.local_rows)
        if not route.remote:
            out[t] = local
            continue
        out[t] = local.new_empty((ids[t].numel(),) + table.width(t))
        out[t][route.local_pos] = local
    for p, fut in futures.items():
        reply = fut.wait()
        for t, asked in asks[p].items():
            out[t][routes[t].remote[p]] = _checked(reply, p, t, asked.numel(), table.width(t)).to(out[t].dtype)
    return out


def _checked(reply, peer: int, node_type: str, n: int, width: tuple) -> Tensor:
    rows: Optional[Tensor] = reply.rows.get(node_type) if isinstance(reply, RowsReply) else None
    if not isinstance(rows, Tensor) or tuple(rows.shape) != (n,) + width or not rows.is_floating_point():
        got = tuple(rows.shape) if isinstance(rows, Tensor) else type(rows).__name__
        raise PyGDistError(f"partition {peer} answered layer rows of {node_type!r} with {got}; expected "
                          f"{(n,) + width} floating rows")
    return rows


__all__ = ["LayerTable", "RowsRequest", "RowsReply", "ROWS_OP", "gather_rows"]
