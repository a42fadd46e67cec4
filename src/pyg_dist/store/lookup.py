"""Feature lookup across partitions: typed messages, a pure routing plan, and its execution.

A lookup asks for rows of one or more groups (a node type or an edge type) by GLOBAL id. The plan
(:func:`plan_lookup`, a pure function of the partition book) splits every query into the positions
this partition answers and, per remote partition, the positions and ids it must ask for. Execution
(:func:`start_lookup`) issues every remote call first (one :class:`LookupRequest` per remote
partition, all queries in it, split in pieces of at most ``$PYG_DIST_REPLY_MAX_MB`` of reply), gathers
the local rows meanwhile, and returns a :class:`LookupFuture` that scatters the replies into the output
in the requested order.

A request asks each distinct id once, in increasing order (:func:`~pyg_dist.store.routing.distinct_sorted`):
the wire and the owner's gather are bounded by the distinct ids; the plan's :class:`Expansion` puts each
answer row at every position that asked for it. The owner's side is :mod:`pyg_dist.store.serving`.

Wire format: ``remote_rows="exact"`` (default) or ``"int8"`` (opt-in: floating feature rows of other partitions
as int8 codes plus a scale and offset per row, decoded into the output on arrival; within
``scale / 2`` plus float32 rounding per element; :mod:`pyg_dist.store.quant`). Local and cached rows are exact.

Example (one partition: everything is local, no RPC needed):
    >>> import torch
    >>> from pyg_dist.format import PartitionBook
    >>> book = PartitionBook({"_N": torch.tensor([0, 3, 5])})
    >>> plan = plan_lookup(book, 1, [FeatureQuery("_N", ("x",), torch.tensor([4, 0, 3]))])
    >>> plan.routes[0].local_pos.tolist(), plan.routes[0].local_rows.tolist(), list(plan.requests)
    ([0, 2], [1, 0], [0])
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from pyg_dist._types import EdgeType, NodeType
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.ops.rows import copy_rows
from pyg_dist.store import quant
from pyg_dist.store.buffers import empty_rows, gather_rows
from pyg_dist.store.limits import reply_max_bytes
from pyg_dist.store.routing import (
    Expansion,
    Route,
    check_answers,
    distinct_sorted,
    group_by_partition,
    route_ids,
    scatter_row_chunks,
)

Group = Union[NodeType, EdgeType]
#: Name of the callee that serves remote lookups (registered by ``LocalFeatureStore.serve``).
LOOKUP_OP = "pyg_dist.lookup_features"


# ------------------------------------------------------------------------------------ typed messages
@dataclass(frozen=True)
class FeatureQuery:
    """Rows of one group to fetch.

    Attributes:
        group: Node type (``str``) or edge type (``(src, rel, dst)``), typed (homogeneous: ``"_N"`` /
            ``("_N", "_E", "_N")``).
        attr_names: Attributes to fetch for every id (``"x"``, ``"y"``, ``"time"``, ``"edge_attr"``...).
        ids: 1-D int64 global ids (any order, repeats allowed).
        id_range: ``(min, max)`` of ``ids`` when the caller already knows it (saves a pass).
    """
    group: Group
    attr_names: Tuple[str, ...]
    ids: Tensor
    id_range: Optional[Tuple[int, int]] = None


@dataclass(frozen=True)
class LookupRequest:
    """What one partition asks another: the queries (only ids that partition owns; each id once, in
    increasing order, when a :class:`LookupPlan` built it), the seconds the caller waits (``None``:
    the owner's call timeout), which bound the owner's wait for room to serve it, and the wire format of
    the reply's rows (``remote_rows``: ``"exact"``, or ``"int8"``: :mod:`pyg_dist.store.quant`)."""
    partition: int
    queries: Tuple[FeatureQuery, ...]
    timeout: Optional[float] = None
    remote_rows: str = "exact"


@dataclass(frozen=True)
class LookupReply:
    """The answer to a :class:`LookupRequest`: per query and attribute, the rows of its DISTINCT ids in
    increasing id order, as a list of consecutive chunks of at most ``CHUNK_BYTES`` each (see
    :func:`pyg_dist.store.serving.serve_request`). ``index[i]`` is ``None`` when query ``i`` named each id
    once in increasing order; else (the owner de-duplicated it) the answer row of each requested id:
    ``torch.cat(values[i][name])[index[i]]`` are the rows in the requested order. With ``remote_rows="int8"``
    the chunks of quantised attributes are :class:`~pyg_dist.store.quant.QuantRows`."""
    partition: int
    values: List[Dict[str, List[Any]]]
    index: Optional[List[Optional[Tensor]]] = None


# ------------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class LookupPlan:
    """Routing of a whole lookup: per query its route, per remote partition one request.

    ``slots[p]`` lists, aligned with ``requests[p].queries``, the query index each sub-query answers;
    ``expand[p][i]`` how partition ``p``'s answer for query ``i`` (its distinct ids) fills the positions.
    ``cached[i]`` is ``(positions, cache rows)`` of query ``i``'s remote-owned ids the cache answers
    (``None`` without a cache hit); ``routes[i].remote`` then holds only the misses.
    """
    part: int
    routes: List[Route]
    requests: Dict[int, LookupRequest]
    slots: Dict[int, List[int]]
    cached: List[Optional[Tuple[Tensor, Tensor]]]
    expand: Dict[int, Dict[int, Expansion]] = dataclasses.field(default_factory=dict)

    def remote_rows(self, i: int) -> int:
        """Rows of query ``i`` fetched from other partitions."""
        return self.routes[i].num_remote - self.cached_rows(i)

    def asked_rows(self, i: int) -> int:
        """Ids of query ``i`` asked from other partitions: its remote rows, each distinct id once."""
        return sum(e[i].rows for e in self.expand.values() if i in e)

    def cached_rows(self, i: int) -> int:
        """Rows of query ``i`` read from the cache."""
        hit = self.cached[i]
        return 0 if hit is None else hit[0].numel()


def plan_lookup(book, part: int, queries: Sequence[FeatureQuery], cache=None, remote_rows: str = "exact"
                ) -> LookupPlan:
    """Routes every query; builds one :class:`LookupRequest` per remote partition (pure but for the
    cache's hit counters).

    Args:
        book: The folder's partition book.
        part: The partition answering locally (the store's partition).
        queries: The queries, ids already validated as 1-D int64.
        cache: A :class:`~pyg_dist.cache.rows.FeatureCache`: remote-owned ids it holds (for every
            attribute of the query) are answered from it and never requested.
        remote_rows: The wire format every request asks for (``"exact"`` or ``"int8"``).
    """
    routes = [route_ids(book, part, q.group, q.ids, id_range=q.id_range) for q in queries]
    cached: List[Optional[Tuple[Tensor, Tensor]]] = [None] * len(routes)
    if cache is not None:
        for i, q in enumerate(queries):
            if routes[i].remote and cache.covers(q.group, q.attr_names):
                routes[i], cached[i] = _split_cached(cache, q, routes[i])
    shares, slots = group_by_partition(routes, lambda qi, pos: _share(queries[qi], pos))
    requests = {p: LookupRequest(p, tuple(q for q, _ in qs), remote_rows=remote_rows) for p, qs in shares.items()}
    expand = {p: {qi: e for qi, (_, e) in zip(slots[p], qs)} for p, qs in shares.items()}
    return LookupPlan(part, routes, requests, slots, cached, expand)


def _share(q: FeatureQuery, pos: Tensor) -> Tuple[FeatureQuery, Expansion]:
    """The sub-query of positions ``pos`` of ``q`` (each id once, increasing) and how its answer fills them."""
    ids, expansion = distinct_sorted(q.ids.index_select(0, pos), pos)
    return FeatureQuery(q.group, q.attr_names, ids), expansion


def split_request(req: LookupRequest, row_bytes: Sequence[int], max_bytes: int, timeout: Optional[float] = None
                  ) -> List[Tuple[LookupRequest, List[int], List[Tuple[int, int]]]]:
    """``req`` in pieces whose replies hold at most ``max_bytes`` each (a row larger than that alone).

    Args:
        req: A plan's request.
        row_bytes: Reply bytes per id of each query (all its attributes, in the request's wire format).
        max_bytes: The reply limit.
        timeout: Written into every piece.

    Returns:
        ``(piece, queries, spans)``: the piece, the index in ``req.queries`` of each of its sub-queries,
        and the ``[start, end)`` of that query's ids it asks.
    """
    total = sum(q.ids.numel() * max(b, 1) for q, b in zip(req.queries, row_bytes))
    if total <= max_bytes:
        return [(dataclasses.replace(req, timeout=timeout), list(range(len(req.queries))),
                 [(0, q.ids.numel()) for q in req.queries])]
    pieces: List[Tuple[LookupRequest, List[int], List[Tuple[int, int]]]] = []
    subs: List[FeatureQuery] = []
    where: List[int] = []
    spans: List[Tuple[int, int]] = []
    left = max_bytes
    for k, (q, b) in enumerate(zip(req.queries, row_bytes)):
        b, start, n = max(b, 1), 0, q.ids.numel()
        while start < n:
            fit = left // b if subs else max(1, left // b)
            if fit <= 0:  # full: the next piece
                pieces.append((LookupRequest(req.partition, tuple(subs), timeout, req.remote_rows), where, spans))
                subs, where, spans, left = [], [], [], max_bytes
                continue
            end = min(n, start + fit)
            subs.append(FeatureQuery(q.group, q.attr_names, q.ids[start:end]))
            where.append(k)
            spans.append((start, end))
            left -= (end - start) * b
            start = end
    if subs:
        pieces.append((LookupRequest(req.partition, tuple(subs), timeout, req.remote_rows), where, spans))
    return pieces


def _split_cached(cache, q: FeatureQuery, route: Route) -> Tuple[Route, Optional[Tuple[Tensor, Tensor]]]:
    """The route without the positions the cache answers, and those positions with their cache rows
    (in partition order)."""
    remote: Dict[int, Tensor] = {}
    hits: List[Tuple[Tensor, Tensor]] = []
    for p, pos in route.remote.items():
        hit_pos, hit_slot, miss = cache.split_positions(q.group, q.ids, pos)
        if hit_pos.numel():
            hits.append((hit_pos, hit_slot))
        if miss.numel():
            remote[p] = miss
    cache.count(q.group, sum(h.numel() for h, _ in hits), sum(v.numel() for v in remote.values()))
    if not hits:
        return route, None
    route = dataclasses.replace(route, remote=remote)
    if len(hits) == 1:
        return route, hits[0]
    return route, (torch.cat([h for h, _ in hits]), torch.cat([s for _, s in hits]))


# ------------------------------------------------------------------------------------------ execution
@dataclass
class _Pending:
    """One call in flight: it answers queries ``slots`` (query indices) of ``partition``'s request, rows
    ``spans[j]`` of the distinct ids of ``slots[j]`` (``None``: all of them)."""
    partition: int
    future: Any  # pyg_dist.rpc.RpcFuture
    slots: List[int]
    spans: Optional[List[Tuple[int, int]]] = None
    remote_rows: str = "exact"


class LookupFuture:
    """A started lookup: local rows are in place, remote replies are pending.

    ``wait(timeout)`` blocks; ``await`` it inside a coroutine (e.g. on pyg_dist's event loop).
    Failures raise :class:`~pyg_dist.errors.RemoteCallError` / :class:`~pyg_dist.errors.RpcTimeoutError`
    naming the op, partition and rank.
    """

    def __init__(self, plan: LookupPlan, out: List[Dict[str, Tensor]], pending: List[_Pending],
                 finish: Callable[[List[Dict[str, Tensor]]], Any]):
        # plan and finish are None in a completed() future, which never completes again
        self._plan: Optional[LookupPlan] = plan
        self._finish: Optional[Callable[[List[Dict[str, Tensor]]], Any]] = finish
        self._out, self._pending = out, pending
        self._result: Any = None
        self._received = 0
        self._done = not pending
        if self._done:
            self._result = finish(out)

    @classmethod
    def completed(cls, result: Any) -> "LookupFuture":
        """A lookup answered entirely from local rows."""
        fut = cls.__new__(cls)
        fut._plan, fut._out, fut._pending, fut._finish = None, [], [], None
        fut._result, fut._done, fut._received = result, True, 0
        return fut

    @property
    def plan(self) -> Optional[LookupPlan]:
        """The routing of this lookup (``None`` for one answered on the local fast path)."""
        return self._plan

    @property
    def received_bytes(self) -> int:
        """Tensor bytes of the replies received (as they travelled: int8 rows count their codes, scales and
        offsets, ids and integers that fit int32 4 bytes each: :mod:`pyg_dist.rpc.wire`); 0 until complete."""
        return self._received

    def done(self) -> bool:
        """True when every remote reply has arrived."""
        return self._done or all(p.future.done() for p in self._pending)

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Waits for the remote replies (at most ``timeout`` s overall; default: each call's timeout)."""
        if not self._done:
            deadline = None if timeout is None else time.monotonic() + timeout
            replies = []
            for p in self._pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                replies.append(p.future.wait(left))
            self._complete(replies)
        return self._result

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> Any:
        if not self._done:
            self._complete(await asyncio.gather(*(p.future for p in self._pending)))
        return self._result

    def _complete(self, replies: List[LookupReply]) -> None:
        assert self._plan is not None and self._finish is not None  # a pending future has both
        for p, reply in zip(self._pending, replies):
            _scatter(self._plan, self._out, p, reply)
            self._received += getattr(p.future, "reply_bytes", 0) or quant.reply_bytes(reply)
        self._pending, self._done = [], True
        self._result = self._finish(self._out)


def _scatter(plan: LookupPlan, out: List[Dict[str, Tensor]], p: _Pending, reply: LookupReply) -> None:
    check_answers(p.partition, "lookup queries", len(reply.values), len(p.slots))
    if any(i is not None for i in (getattr(reply, "index", None) or ())):
        raise PyGDistError(f"partition {p.partition} answered distinct ids as if they repeated "
                           "(do all processes run the same pyg_dist?)")
    for j, (qi, values) in enumerate(zip(p.slots, reply.values)):
        expansion = plan.expand[p.partition][qi]
        start, end = p.spans[j] if p.spans is not None else (0, expansion.rows)
        pos, index = expansion.span(start, end)
        for name, dst in list(out[qi].items()):
            chunks = quant.check_chunks(p.partition, name, values.get(name), dst, end - start, p.remote_rows)
            out[qi][name] = scatter_row_chunks(dst, pos, chunks, index)


def gather_local(route: Route, col: Tensor) -> Tensor:
    """The output tensor of one attribute: local rows in place, remote rows still to be filled."""
    if route.local_pos is None:
        return gather_rows(col, route.local_rows)
    out = empty_rows(route.size, col)
    copy_rows(out, route.local_pos, col, route.local_rows)  # one pass: each local row to its position
    return out


def start_lookup(book, part: int, column: Callable[[Group, str], Tensor], queries: Sequence[FeatureQuery],
                 finish: Callable[[List[Dict[str, Tensor]]], Any], timeout: Optional[float] = None,
                 cache=None, remote_rows: str = "exact") -> LookupFuture:
    """Plans, issues every remote request, gathers local rows, and returns the pending lookup.

    Args:
        book: Partition book.
        part: This store's partition.
        column: ``column(group, attr_name)`` -> this partition's full local tensor of that attribute.
        queries: Validated queries.
        finish: Turns the per-query dicts into the caller's result (runs once, when complete).
        timeout: Seconds per remote call (default: ``init_rpc``'s ``call_timeout``).
        cache: The store's :class:`~pyg_dist.cache.rows.FeatureCache`, or ``None``.
        remote_rows: Wire format of the remote rows: ``"exact"`` or ``"int8"`` (:mod:`pyg_dist.store.quant`;
            local and cached rows stay exact).
    """
    from pyg_dist import rpc  # local import: the store module stays importable without an RPC world

    plan = plan_lookup(book, part, queries, cache, quant.check_remote_rows("lookup", remote_rows))
    pending = []
    for p, req in plan.requests.items():  # every remote call first ...
        for piece, where, spans in _pieces(req, column, timeout):
            pending.append(_Pending(p, rpc.call_async(p, LOOKUP_OP, piece, timeout=timeout),
                                    [plan.slots[p][k] for k in where], spans, remote_rows))
    out = [{name: _gather_here(route, column(q.group, name), hit, cache, q.group, name) for name in q.attr_names}
           for q, route, hit in zip(queries, plan.routes, plan.cached)]  # ... local and cached rows meanwhile
    return LookupFuture(plan, out, pending, finish)


def _pieces(req: LookupRequest, column: Callable[[Group, str], Tensor], timeout: Optional[float]):
    """``req`` split by the reply limit (:func:`split_request`); row sizes (in the request's wire format) from
    the local columns."""
    row_bytes = [sum(quant.wire_row_bytes(column(q.group, name), name, req.remote_rows) for name in q.attr_names)
                 for q in req.queries]
    return split_request(req, row_bytes, reply_max_bytes(), timeout)


def _gather_here(route: Route, col: Tensor, hit, cache, group, name: str) -> Tensor:
    out = gather_local(route, col)
    if hit is not None:
        copy_rows(out, hit[0], cache.column(group, name), hit[1])
    return out


def check_timeout(where: str, timeout: Any) -> Optional[float]:
    """``None`` or a positive number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgumentError(where, "timeout", timeout, "None or a positive number of seconds")
    return float(timeout)


__all__ = ["LOOKUP_OP", "FeatureQuery", "LookupRequest", "LookupReply", "LookupPlan", "plan_lookup", "split_request",
           "start_lookup", "LookupFuture", "gather_local", "check_timeout"]
