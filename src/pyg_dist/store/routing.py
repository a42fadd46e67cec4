"""Routing ids by owner: the one module that splits typed global ids into the part answered here and
one share per remote partition, and puts the answers back in input order.

Used by the hop loop (which destinations this partition samples), the feature lookups (which rows it
reads) and layer-wise inference. Planning is pure (only the partition book translates ids); callers
issue every remote request first, do their local share, then put the replies back with
:func:`segment_pieces` (variable-length answers: sampled neighbours) or :func:`scatter_row_chunks`
(fixed-width rows: features).

Example:
    >>> import torch
    >>> from pyg_dist.format.book import PartitionBook
    >>> book = PartitionBook({"_N": torch.tensor([0, 3, 5])})
    >>> route = route_ids(book, 1, "_N", torch.tensor([4, 0, 3]))
    >>> route.local_pos.tolist(), route.local_rows.tolist(), {p: v.tolist() for p, v in route.remote.items()}
    ([0, 2], [1, 0], {0: [1]})
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import torch
from torch import Tensor

from pyg_dist.errors import PyGDistError

if TYPE_CHECKING:
    from pyg_dist.ops import OneHop
    from pyg_dist.store.quant import Chunk

T = TypeVar("T")


@dataclass(frozen=True)
class Route:
    """Where the answers for one id tensor come from.

    Attributes:
        size: Number of ids.
        local_pos: Positions answered here (ascending), or ``None`` when all of them are (fast path).
        local_rows: Their rows in the local block: ``id - local_range[0]`` when routed by a local range,
            else the book's row of the id in this partition.
        remote: Remote partition -> positions it answers (ascending).
    """
    size: int
    local_pos: Optional[Tensor]
    local_rows: Tensor
    remote: Dict[int, Tensor] = field(default_factory=dict)

    @property
    def num_local(self) -> int:
        return self.local_rows.numel()

    @property
    def num_remote(self) -> int:
        return self.size - self.num_local


def owned_rows(book, part: int, group, ids: Tensor, id_range: Optional[Tuple[int, int]] = None) -> Optional[Tensor]:
    """Fast path: the rows of ``ids`` when ALL of them lie in ``part``'s range of a range book, else None
    (one min/max pass, skipped when ``id_range`` is known, and one subtraction)."""
    from pyg_dist.format.book import PartitionBook
    if not isinstance(book, PartitionBook) or not ids.numel():
        return None
    start, end = book.owned_range(group, part)
    return _rows_in(ids, (start, end), id_range)


def _rows_in(ids: Tensor, local_range: Tuple[int, int], id_range: Optional[Tuple[int, int]]) -> Optional[Tensor]:
    arr = ids.numpy()  # numpy: single-threaded passes, no OpenMP regions on a busy machine
    lo, hi = id_range if id_range is not None else (int(arr.min()), int(arr.max()))
    start, end = local_range
    if not (start <= lo and hi < end):
        return None
    return torch.from_numpy(arr - start) if start else ids


def route_ids(book, part: int, group, ids: Tensor, *, local_range: Optional[Tuple[int, int]] = None,
              id_range: Optional[Tuple[int, int]] = None) -> Route:
    """Splits 1-D int64 global ``ids`` of ``group`` into those answered by ``part`` and, per owner, the rest.

    Args:
        book: The folder's partition book (the only translator of ids).
        part: The partition answering locally.
        group: Node type or edge type of the ids.
        ids: 1-D int64 global ids to split.
        local_range: ``(start, end)``: ids answered here regardless of their owner (e.g. the
            destinations whose in-edges a hybrid partition stores); default: the ids ``part`` owns.
        id_range: ``(min, max)`` of ``ids`` when the caller already knows it (saves a pass).
    """
    n = ids.numel()
    if n == 0:
        return Route(0, None, ids)
    if local_range is not None:
        return _route_by_range(book, group, ids, local_range, id_range)
    rows = owned_rows(book, part, group, ids, id_range)
    if rows is not None:
        return Route(n, None, rows)
    order, rows, ptr = book.split_by_owner(group, ids)
    lo, hi = ptr[part], ptr[part + 1]
    if hi - lo == n:  # all here: the stable order is the identity
        return Route(n, None, rows)
    remote = {p: order[ptr[p]:ptr[p + 1]] for p in range(book.num_parts) if p != part and ptr[p + 1] > ptr[p]}
    return Route(n, order[lo:hi], rows[lo:hi], remote)


def _route_by_range(book, group, ids: Tensor, local_range: Tuple[int, int], id_range) -> Route:
    rows = _rows_in(ids, local_range, id_range)
    if rows is not None:
        return Route(ids.numel(), None, rows)
    start, end = local_range
    here = (ids >= start) & (ids < end)
    local_pos = here.nonzero().view(-1)
    rest = (~here).nonzero().view(-1)
    order, _, ptr = book.split_by_owner(group, ids.index_select(0, rest))
    rest = rest.index_select(0, order)
    remote = {p: rest[ptr[p]:ptr[p + 1]] for p in range(book.num_parts) if ptr[p + 1] > ptr[p]}
    return Route(ids.numel(), local_pos, ids.index_select(0, local_pos) - start, remote)


def divert_remote(route: Route, taken: Callable[[Tensor], Tensor]) -> Tuple[Route, Optional[Tensor]]:
    """Takes the remote positions that ``taken(positions)`` (a bool mask, called once per remote partition)
    marks out of ``route.remote`` (a cache answers them here). Returns the route that asks for the rest,
    and the taken positions in partition order (``None`` when none was taken)."""
    remote, hits = {}, []
    for p, pos in route.remote.items():
        hit = taken(pos)
        if bool(hit.any()):
            hits.append(pos[hit])
            pos = pos[~hit]
        if pos.numel():
            remote[p] = pos
    if not hits:
        return route, None
    return dataclasses.replace(route, remote=remote), torch.cat(hits) if len(hits) > 1 else hits[0]


def group_by_partition(routes: Sequence[Route], share: Callable[[int, Tensor], T]
                       ) -> Tuple[Dict[int, List[T]], Dict[int, List[int]]]:
    """Per remote partition, ``share(i, positions)`` of every route ``i`` it answers, and those ``i``.

    Returns ``(shares, slots)``: ``shares[p][j]`` is the share of route ``slots[p][j]``; one request per
    partition is then built from ``shares[p]``.
    """
    shares: Dict[int, List[T]] = {}
    slots: Dict[int, List[int]] = {}
    for i, route in enumerate(routes):
        for p, pos in route.remote.items():
            shares.setdefault(p, []).append(share(i, pos))
            slots.setdefault(p, []).append(i)
    return shares, slots


def check_answers(partition: int, what: str, got: int, expected: int) -> None:
    """A reply must answer every share it was sent; else the processes disagree about the folder."""
    if got != expected:
        raise PyGDistError(f"partition {partition} answered {got} {what} of {expected} "
                           "(do all processes read the same partition folder?)")


def segment_pieces(route: Route, local: OneHop, remote: Mapping[int, OneHop]) -> List[Tuple[Tensor, OneHop]]:
    """Variable-length answers (:class:`~pyg_dist.ops.OneHop`: ``nbr``, ``edge``, ``count``) paired with
    the positions they answer: part ``i``-th seed's ``count[i]`` entries belong to position ``i`` of its
    share (``route.local_pos`` / ``route.remote[p]``). The edge buffer merges them in input order
    (``append_pieces``). Raises :class:`PyGDistError` when a part does not match its share (the processes
    disagree about the folder)."""
    if not route.remote:
        return [(torch.arange(route.size), local)]
    assert route.local_pos is not None  # None only on the all-local fast path (no remote shares)
    pieces = [(route.local_pos, local)] + [(route.remote[p], remote[p]) for p in sorted(route.remote)]
    for pos, part in pieces:
        if part.count.numel() != pos.numel() or int(part.count.sum()) != part.nbr.numel():
            raise PyGDistError(f"a one-hop reply with {part.count.numel()} counts and {part.nbr.numel()} "
                               f"neighbours for {pos.numel()} seeds")
    return pieces


def scatter_row_chunks(out: Tensor, pos: Tensor, chunks: Sequence[Chunk], index: Optional[Tensor] = None) -> Tensor:
    """Fixed-width rows back in input order: consecutive ``chunks`` of rows go to positions ``pos`` of
    ``out``; with ``index`` (nondecreasing, one per position) position ``pos[i]`` takes row ``index[i]`` of
    the chunks (an answer for distinct ids, see :func:`distinct_sorted`). A chunk is a tensor of rows or
    int8 rows (:class:`~pyg_dist.store.quant.QuantRows`, decoded on the way). Returns ``out`` (or the single
    tensor chunk itself when it covers every position in order)."""
    from pyg_dist.store.quant import chunk_rows, place_chunk
    if index is None and len(chunks) == 1 and isinstance(chunks[0], Tensor) and pos.numel() == out.size(0) \
            and _increasing(pos):
        return chunks[0]  # the whole answer, in order: no copy
    start = 0
    if index is None:
        for chunk in chunks:
            n = chunk_rows(chunk)
            place_chunk(out, pos[start:start + n], chunk)
            start += n
        return out
    sizes = [chunk_rows(c) for c in chunks]
    ends = torch.searchsorted(index, torch.tensor(sizes).cumsum(0)).tolist()
    cut = 0  # the positions each chunk fills: index is nondecreasing
    for chunk, n, end in zip(chunks, sizes, ends):
        place_chunk(out, pos[cut:end], chunk, index[cut:end] - start)
        cut, start = end, start + n
    return out


def _increasing(t: Tensor) -> bool:
    """Whether 1-D ``t`` is strictly increasing (one single-threaded numpy pass)."""
    arr = t.numpy()
    return arr.shape[0] < 2 or bool((arr[1:] > arr[:-1]).all())


@dataclass(frozen=True)
class Expansion:
    """How an answer for distinct ids fills positions: position ``pos[i]`` takes row ``index[i]`` of the
    answer (``index`` nondecreasing; ``None``: row ``i``). ``rows`` is the number of distinct ids asked."""
    pos: Tensor
    index: Optional[Tensor]
    rows: int

    def span(self, start: int, end: int) -> Tuple[Tensor, Optional[Tensor]]:
        """``(positions, index - start)`` of the answer's rows ``[start, end)``."""
        if self.index is None:
            return self.pos[start:end], None
        lo, hi = torch.searchsorted(self.index, torch.tensor([start, end])).tolist()
        return self.pos[lo:hi], self.index[lo:hi] - start


def distinct_sorted(ids: Tensor, pos: Tensor) -> Tuple[Tensor, Expansion]:
    """The distinct values of ``ids`` in increasing order (what a request asks), and how their answer fills
    the positions ``pos`` of ``ids``. One pass when ``ids`` is strictly increasing already, else one sort.

    Example:
        >>> ids, exp = distinct_sorted(torch.tensor([7, 3, 7, 7]), torch.tensor([0, 2, 5, 6]))
        >>> ids.tolist(), exp.pos.tolist(), exp.index.tolist()
        ([3, 7], [2, 0, 5, 6], [0, 1, 1, 1])
    """
    n = ids.numel()
    if _increasing(ids):
        return ids, Expansion(pos, None, n)
    order = torch.from_numpy(ids.numpy().argsort())  # numpy: single-threaded (torch.sort's threads cost more)
    ids, pos = ids.index_select(0, order), pos.index_select(0, order)
    new = torch.ones(n, dtype=torch.bool)
    torch.ne(ids[1:], ids[:-1], out=new[1:])
    if bool(new.all()):
        return ids, Expansion(pos, None, n)
    uniq = ids[new]
    return uniq, Expansion(pos, new.cumsum(0) - 1, uniq.numel())


__all__ = ["Route", "owned_rows", "route_ids", "divert_remote", "group_by_partition", "check_answers", "segment_pieces",
           "scatter_row_chunks", "Expansion", "distinct_sorted"]
