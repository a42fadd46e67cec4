"""The owner's side of a feature lookup: answers a peer's :class:`~pyg_dist.store.lookup.LookupRequest`
within bounds, whatever the peer asks.

* **Distinct ids.** A request names each id once, in increasing order, when a lookup plan built it (one
  pass checks that). Any other request is de-duplicated here before gathering, and the reply's ``index``
  says which answer row each requested id takes: the gather, the reply and the bytes held are bounded by
  the distinct ids (plus 8 bytes per requested id for the index), never by the repeats.
* **Reply cap.** (The same settings and the store's budget bound one-hop replies too:
  :func:`pyg_dist.sampler.hops.serve_one_hop`.) A reply over ``$PYG_DIST_REPLY_MAX_MB`` is refused
  (:class:`~pyg_dist.errors.ServingLimitError`, which the requester raises as ``RemoteCallError``);
  requesters split their requests by the same setting, so no legitimate one is refused.
* **Budget.** The reply's bytes wait for room under ``$PYG_DIST_SERVE_BUDGET_MB`` before the gather and
  count until the RPC layer has sent them (:class:`~pyg_dist.store.limits.ByteBudget`).
* **Wire format.** ``req.remote_rows="int8"`` (opt-in) sends each quantised attribute's rows as int8 codes
  plus a float32 scale and offset per row, gathered from the column's codes (encoded once per column by the
  store's :class:`~pyg_dist.store.quant.RowCodes`; per request without one: :mod:`pyg_dist.store.quant`);
  the cap, the budget and the chunks count those wire bytes. A row that cannot be encoded (NaN / inf)
  is refused with :class:`~pyg_dist.errors.QuantisationError`.
* **Chunks.** Rows go out as chunks of at most :data:`CHUNK_BYTES`, gathered into buffers the store's
  reply pool recycles once sent (a :class:`~pyg_dist.store.buffers.BufferPool` bounded by the budget,
  plus an eighth). Without it the heap itself grows: with ``dist_session``'s allocator tuning (one arena,
  no trimming) freed chunks are split by the small allocations of the requests in between, and the
  next chunks come from the top of the heap. Measured (2 ranks, 4 MiB budget, 4 x 40 MiB asked at once,
  three rounds): the owner's live heap stayed within 9 MiB of its start, while its heap (and RSS) grew
  by 59, 69, 111 MiB without the pool and by 7, 20, 24 MiB with it.

Example (no budget: a unit call; a store serves with its own):
    >>> import torch
    >>> from pyg_dist.format import PartitionBook
    >>> from pyg_dist.store.lookup import FeatureQuery, LookupRequest
    >>> book, x1 = PartitionBook({"_N": torch.tensor([0, 3, 5])}), torch.tensor([[30.], [40.]])
    >>> reply = serve_request(book, 1, lambda g, n: x1, LookupRequest(1, (FeatureQuery("_N", ("x",),
    ...                                                                   torch.tensor([4, 3, 4, 4])),)))
    >>> reply.values[0]["x"][0].view(-1).tolist(), reply.index[0].tolist()
    ([30.0, 40.0], [1, 0, 1, 1])
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError
from pyg_dist.store import quant
from pyg_dist.store.buffers import BufferPool, gather_rows
from pyg_dist.store.limits import ByteBudget, check_reply_size, serve_budget_bytes, wait_bound
from pyg_dist.store.lookup import FeatureQuery, Group, LookupReply, LookupRequest
from pyg_dist.store.routing import owned_rows

#: Largest tensor of a reply. TensorPipe receives every tensor into a fresh allocation; above ~32 MB
#: the C allocator maps it anew each time and the receiver pays a page fault per 4 KiB. Measured on
#: loopback, 51 MB of rows: one tensor 64 ms, four chunks of 12.8 MB 18.5 ms.
CHUNK_BYTES = 8 << 20


def serve_request(book, part: int, column: Callable[[Group, str], Tensor], req: LookupRequest,
                  budget: Optional[ByteBudget] = None, pool: Optional[BufferPool] = None,
                  codes: Optional[quant.RowCodes] = None) -> LookupReply:
    """Answers a request for rows this partition owns (runs on the callee's process).

    Args:
        book: The folder's partition book.
        part: This process's partition.
        column: ``column(group, attr_name)`` -> this partition's local tensor of that attribute.
        req: The peer's request.
        budget: This process's :class:`~pyg_dist.store.limits.ByteBudget` (``None``: no waiting).
        pool: The reply buffers to recycle (its limit follows the budget), or ``None`` (fresh tensors).
        codes: The store's int8 codes of its columns (``remote_rows="int8"``), or ``None``: encode per request.

    Raises:
        PyGDistError: the request was routed to the wrong partition, is malformed, or names ids this
            partition does not own (the two processes disagree about the folder).
        ServingLimitError: the reply would be over ``$PYG_DIST_REPLY_MAX_MB``, or found no room under
            ``$PYG_DIST_SERVE_BUDGET_MB`` within the request's timeout.
        QuantisationError: ``remote_rows="int8"`` and a row holds NaN / inf (names the attribute and global id).
    """
    if not isinstance(req, LookupRequest) or req.partition != part:
        raise PyGDistError(f"lookup request for partition {getattr(req, 'partition', req)!r} reached the store "
                           f"of partition {part} (is every process serving the partition its context names?)")
    mode = _remote_rows(req, part)
    asked = [_distinct_rows(book, part, q) for q in req.queries]
    rows = sum(r.numel() for r, _ in asked)
    nbytes = sum(r.numel() * quant.wire_row_bytes(column(q.group, name), name, mode)
                 for q, (r, _) in zip(req.queries, asked) for name in q.attr_names) + \
        sum(8 * i.numel() for _, i in asked if i is not None)
    check_reply_size(part, nbytes, rows)
    hold, limit = None, serve_budget_bytes()
    if pool is not None:
        pool.limit_bytes = limit + limit // 8
    if budget is not None and nbytes:
        hold = budget.acquire(nbytes, limit, wait_bound(req), f"partition {part}'s lookup reply ({rows} rows)")
    try:
        values = [{name: _chunks(book, part, q.group, name, column(q.group, name), r, pool, mode, codes)
                   for name in q.attr_names} for q, (r, _) in zip(req.queries, asked)]
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    index = [i for _, i in asked]
    if hold is not None:  # in flight until the RPC layer has sent (and dropped) every tensor of the reply
        hold.release_when_freed([t for v in values for chunks in v.values() for c in chunks
                                 for t in quant.chunk_tensors(c)] + [i for i in index if i is not None])
    return LookupReply(part, values, index if any(i is not None for i in index) else None)


def _distinct_rows(book, part: int, q: FeatureQuery) -> Tuple[Tensor, Optional[Tensor]]:
    """The local rows of ``q``'s distinct ids in increasing order, and (when ``q`` repeats ids or is out of
    order) the answer row of each requested id."""
    ids = getattr(q, "ids", None)
    if not isinstance(q, FeatureQuery) or not isinstance(ids, Tensor) or ids.dim() != 1 or ids.dtype != torch.int64:
        raise PyGDistError(f"partition {part} got a lookup query that is no FeatureQuery of 1-D int64 ids: "
                           f"{type(q).__name__} with ids {getattr(ids, 'dtype', type(ids))} "
                           f"{tuple(getattr(ids, 'shape', ()))}")
    arr = ids.contiguous().numpy()  # numpy: single-threaded passes
    index = None
    if arr.shape[0] > 1 and not bool((arr[1:] > arr[:-1]).all()):
        uniq, inverse = np.unique(arr, return_inverse=True)
        ids, index = torch.from_numpy(uniq), torch.from_numpy(inverse.reshape(-1).astype(np.int64, copy=False))
    rows = owned_rows(book, part, q.group, ids)
    if rows is None:
        if ids.numel() and not bool((book.owner(q.group, ids) == part).all()):
            raise PyGDistError(f"lookup request names ids of {q.group!r} that partition {part} does "
                               "not own (do all processes read the same partition folder?)")
        rows = book.to_local(q.group, ids)
    return rows, index


def _remote_rows(req: LookupRequest, part: int) -> str:
    """The wire format a request asks for (``"exact"`` for requests that name none)."""
    mode = getattr(req, "remote_rows", "exact")
    if not isinstance(mode, str) or mode not in quant.REMOTE_ROWS:
        raise PyGDistError(f"partition {part} got a lookup request for rows in the wire format {mode!r}; it "
                           f"serves {list(quant.REMOTE_ROWS)} (do all processes run the same pyg_dist?)")
    return mode


def _chunks(book, part: int, group: Group, name: str, col: Tensor, rows: Tensor, pool: Optional[BufferPool],
            mode: str, codes: Optional[quant.RowCodes] = None) -> List[Any]:
    """``col[rows]`` (attribute ``name``) in wire format ``mode``, as consecutive chunks of at most
    :data:`CHUNK_BYTES` of wire bytes, each on its own storage: tensors of rows, or (int8, quantised attributes)
    :class:`~pyg_dist.store.quant.QuantRows` from ``codes`` (or encoded from ``col``), whose refusals name this
    partition, the attribute and the row's global id."""
    step = max(1, CHUNK_BYTES // max(1, quant.wire_row_bytes(col, name, mode)))
    spans = [rows[i:i + step] for i in range(0, max(rows.numel(), 1), step)]
    if mode == "exact" or not quant.quantised(name, col.dtype, col.shape[1:]):
        return [gather_rows(col, r, pool) for r in spans]
    what = f"partition {part} cannot send {name!r} of {group!r} as int8 rows"

    def name_row(row: int) -> str:
        return f"global id {int(book.owned_ids(group, part)[row])}"

    if codes is not None:
        return [codes.encode((group, name), col, r, what, pool, name_row) for r in spans]
    return [quant.encode_rows(col, r, what, None if pool is None else
                              pool.empty((r.numel(),) + tuple(col.shape[1:]), torch.int8), name_row) for r in spans]


def reply_pool() -> BufferPool:
    """A pool for one serving store's reply chunks: every chunk from 256 KiB up (the gathers that
    :func:`~pyg_dist.store.buffers.gather_rows` writes into a buffer), its limit set by each request."""
    return BufferPool(0, min_bytes=256 << 10)


__all__ = ["CHUNK_BYTES", "serve_request", "reply_pool"]
