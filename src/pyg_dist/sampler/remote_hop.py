"""The requester's side of a remote hop: one partition's request sent in pieces whose replies fit the owners'
``$PYG_DIST_REPLY_MAX_MB`` (:func:`~.plan.split_request`), each reply checked before anything indexes with it
(:func:`check_reply`), and the pieces merged back into the reply of the whole request (:func:`merge_replies`).

A task of fanout ``-1`` (every in-edge) cannot be bounded here (only the owner knows the degrees): it is sent
whole, and when its owner refuses it as over the cap (``ServingLimitError``) it is sent again as two halves of
its seeds, and so on (one seed is always served). So no legitimate request fails; the sample is the same.

Example:
    >>> issued = issue(1, request, limit, timeout=60.0)                      # doctest: +SKIP
    >>> reply, sent, got = await collect(1, request, issued, num_nodes, 60.0)  # doctest: +SKIP
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist._types import NodeType
from pyg_dist.errors import RemoteCallError
from pyg_dist.ops import OneHop
from pyg_dist.sampler.messages import ONE_HOP_OP, OneHopReply, OneHopRequest, tensor_bytes
from pyg_dist.sampler.plan import Piece, split_request
from pyg_dist.store.limits import REPLY_MAX_ENV
from pyg_dist.store.routing import check_answers

#: A piece sent and its future: :func:`issue` returns them, :func:`collect` awaits them.
Issued = List[Tuple[Piece, Any]]


def issue(p: int, req: OneHopRequest, limit: int, timeout: float) -> Issued:
    """Sends ``req`` to partition ``p`` as pieces within ``limit`` bytes of reply; returns at once."""
    from pyg_dist import rpc
    return [(piece, rpc.call_async(p, ONE_HOP_OP, piece.request, timeout=timeout))
            for piece in split_request(req, limit)]


async def collect(p: int, req: OneHopRequest, issued: Issued, num_nodes: Dict[NodeType, int],
                  timeout: float) -> Tuple[OneHopReply, int, int]:
    """Awaits the pieces of ``req`` (halving a fanout ``-1`` piece its owner refuses as over the cap); returns
    the merged reply and the bytes of the requests and replies as they crossed (:mod:`pyg_dist.rpc.wire`)."""
    from pyg_dist.rpc import wire
    parts = await asyncio.gather(*(_answer(p, piece, fut, timeout) for piece, fut in issued))
    done = [one for part in parts for one in part]
    reply = merge_replies(p, req, [piece for piece, _, _ in done], [r for _, r, _ in done], num_nodes)
    return reply, sum(wire.nbytes(piece.request) for piece, _, _ in done), sum(n for _, _, n in done)


async def _answer(p: int, piece: Piece, fut, timeout: float) -> List[Tuple[Piece, OneHopReply, int]]:
    try:
        reply = await fut
        return [(piece, reply, getattr(fut, "reply_bytes", 0) or tensor_bytes(reply))]
    except RemoteCallError as exc:
        halves = _halves(piece) if REPLY_MAX_ENV in exc.remote_traceback and \
            "ServingLimitError" in exc.remote_traceback else None
        if not halves:
            raise
        from pyg_dist import rpc
        again = [(h, rpc.call_async(p, ONE_HOP_OP, h.request, timeout=timeout)) for h in halves]
        parts = await asyncio.gather(*(_answer(p, h, f, timeout) for h, f in again))
        return [one for part in parts for one in part]


def _halves(piece: Piece) -> Optional[List[Piece]]:
    """A fanout ``-1`` piece of several seeds as two pieces of half its seeds each; else ``None``."""
    if len(piece.request.tasks) != 1 or piece.request.tasks[0].num_neighbors >= 0:
        return None
    (task,), ((ti, first),) = piece.request.tasks, piece.origin
    n = task.seeds.numel()
    if n < 2:
        return None
    m = n // 2
    return [Piece(dataclasses.replace(piece.request, tasks=(task.span(a, b),)), ((ti, first + a),))
            for a, b in ((0, m), (m, n))]


def check_reply(p: int, et, res: OneHop, num_seeds: int, num_nodes: Dict[NodeType, int]) -> None:
    """A peer's one-hop answer before any kernel indexes with it: int64 vectors, one count per seed sent,
    counts summing to the neighbours, neighbour ids within the source type, edge ids not negative; else a
    :class:`RemoteCallError` naming the partition."""
    n = num_nodes[et[0]]
    problem = None
    parts = (res.nbr, res.edge, res.count)
    if not all(isinstance(t, Tensor) and t.dtype == torch.int64 and t.dim() == 1 for t in parts):
        problem = "tensors that are not 1-D int64"
    elif res.count.numel() != num_seeds or res.nbr.numel() != res.edge.numel():
        problem = (f"{res.count.numel()} counts for {num_seeds} seeds, {res.nbr.numel()} neighbours, "
                   f"{res.edge.numel()} edges")
    elif res.count.numel() and (int(res.count.min()) < 0 or int(res.count.sum()) != res.nbr.numel()):
        problem = f"counts that do not sum to its {res.nbr.numel()} neighbours"
    elif res.nbr.numel():
        lo, hi = torch.aminmax(res.nbr)
        if int(lo) < 0 or int(hi) >= n or int(res.edge.min()) < 0:
            problem = f"neighbour ids in [{int(lo)}, {int(hi)}] outside [0, {n}) of {et[0]!r}, or negative edge ids"
    if problem is not None:
        raise RemoteCallError(ONE_HOP_OP, p, None, f"its reply for edge type {et} holds {problem}; refused before "
                              "any kernel used it (do all processes read the same partition folder?)")


def merge_replies(p: int, req: OneHopRequest, pieces: Sequence[Piece], replies: Sequence[OneHopReply],
                  num_nodes: Dict[NodeType, int]) -> OneHopReply:
    """The reply to ``req`` from the replies to its ``pieces`` (:func:`~.plan.split_request`), each checked
    against the piece it answers (:func:`check_reply`) before anything indexes with it: per task, the
    pieces' samples in order (by seed, then by draw) and each seed's count summed over its pieces."""
    parts: List[List[Tuple[int, OneHop]]] = [[] for _ in req.tasks]
    for piece, reply in zip(pieces, replies):
        check_answers(p, "one-hop tasks", len(getattr(reply, "results", ())), len(piece.request.tasks))
        for (ti, first), sent, res in zip(piece.origin, piece.request.tasks, reply.results):
            check_reply(p, sent.edge_type, res, sent.seeds.numel(), num_nodes)
            parts[ti].append((first, res))
    if len(pieces) == 1:
        return OneHopReply(p, tuple(got[0][1] for got in parts))
    return OneHopReply(p, tuple(_merge_task(task.seeds.numel(), got) for task, got in zip(req.tasks, parts)))


def _merge_task(num_seeds: int, got: List[Tuple[int, OneHop]]) -> OneHop:
    if len(got) == 1:
        return got[0][1]
    count = torch.zeros(num_seeds, dtype=torch.int64)
    for first, res in got:
        count[first:first + res.count.numel()] += res.count
    return OneHop(torch.cat([res.nbr for _, res in got]), torch.cat([res.edge for _, res in got]), count)


__all__ = ["issue", "collect", "check_reply", "merge_replies"]
