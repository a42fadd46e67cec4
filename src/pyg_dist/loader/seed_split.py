"""Which seeds each trainer rank uses: co-located, equal batch counts, every seed exactly once.

Two steps, each a pure function plus a thin executor:

1. **Within a partition** (:func:`partition_share`): the ranks that serve one partition split its seeds;
   by the folder's two-level sub-part ranges when it has ``sub_parts == ranks_per_partition``, else in
   equal contiguous chunks.
2. **Across ranks** (:func:`plan_balance`, executed by :func:`balance_seeds`): every rank gets a quota
   so that all ranks run the same number of batches per epoch. A rank keeps as many of its own
   (co-located) seeds as its quota allows; surplus seeds move to ranks below quota. Nothing is
   dropped except what an equal split must leave out: in total, with ``drop_last=False`` fewer seeds
   than ranks, with ``drop_last=True`` less than one batch per rank. Drops are logged on the
   ``pyg_dist`` logger.

Agreement costs one ``all_reduce`` of the per-rank counts before the first epoch, plus one
``all_gather_object`` of the moving seeds only when some rank is above its quota.

Example:
    >>> plan = plan_balance([10, 2], batch_size=3, drop_last=False)
    >>> plan.num_batches, plan.quota, plan.moves
    (2, (6, 6), ((0, 1, 4),))
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_dist.errors import InvalidArgumentError, check_positive_int

LOG = logging.getLogger("pyg_dist")
_WHERE = "balance_seeds"


# ------------------------------------------------------------------------------------ within a partition
def partition_share(seeds: Tensor, share: int, num_shares: int,
                    sub_bounds: Optional[Tensor] = None) -> Tensor:
    """The part of a partition's ``seeds`` that its rank ``share`` (of ``num_shares``) takes.

    Args:
        seeds: 1-D global ids the partition owns (any order; the order is kept).
        share: Index of the rank within its partition, ``0 <= share < num_shares``.
        num_shares: Ranks serving the partition.
        sub_bounds: ``[num_shares + 1]`` id bounds of the partition's two-level sub-parts (from
            ``PartitionMeta.sub_node_bounds``); ``None``: equal contiguous chunks.

    Example:
        >>> partition_share(torch.arange(10), 1, 3).tolist()
        [3, 4, 5]
        >>> partition_share(torch.arange(10), 1, 2, torch.tensor([0, 3, 10])).tolist()
        [3, 4, 5, 6, 7, 8, 9]
    """
    return seeds[share_index(seeds, share, num_shares, sub_bounds)]


def share_index(seeds: Tensor, share: int, num_shares: int, sub_bounds: Optional[Tensor] = None) -> Tensor:
    """Positions in ``seeds`` of :func:`partition_share` (to carry aligned tensors along)."""
    check_positive_int("partition_share", "num_shares", num_shares)
    if isinstance(share, bool) or not isinstance(share, int) or not 0 <= share < num_shares:
        raise InvalidArgumentError("partition_share", "share", share, f"an int in [0, {num_shares})")
    if sub_bounds is not None:
        if sub_bounds.numel() != num_shares + 1:
            raise InvalidArgumentError("partition_share", "sub_bounds", tuple(sub_bounds.shape),
                                       f"{num_shares + 1} bounds (one sub-part per rank of the partition)")
        lo, hi = int(sub_bounds[share]), int(sub_bounds[share + 1])
        return ((seeds >= lo) & (seeds < hi)).nonzero().view(-1)
    n = seeds.numel()
    return torch.arange(share * n // num_shares, (share + 1) * n // num_shares)


# ------------------------------------------------------------------------------------ across ranks
@dataclass(frozen=True)
class BalancePlan:
    """How many seeds each rank uses and which surplus seeds move where (pure data).

    Attributes:
        num_batches: Batches per rank per epoch (equal on every rank).
        quota: Seeds each rank uses per epoch.
        keep: Own seeds each rank keeps (the first ``keep[r]`` of its list).
        moves: ``(giver, taker, count)``: the giver's surplus seeds, in order, go to the taker.
        dropped: Seeds of each rank that no rank uses (what an equal split must leave out; the total
            is below ``world`` without ``drop_last``, below ``world * batch_size`` with it).
    """
    num_batches: int
    quota: Tuple[int, ...]
    keep: Tuple[int, ...]
    moves: Tuple[Tuple[int, int, int], ...]
    dropped: Tuple[int, ...]


def _quotas(total: int, world: int, batch_size: int, drop_last: bool) -> Tuple[int, List[int]]:
    base = [total // world + (1 if r < total % world else 0) for r in range(world)]
    low = min(base)
    if drop_last:
        batches = low // batch_size
        return batches, [batches * batch_size] * world
    batches = -(-low // batch_size)  # ceil: every rank's share fits in this many batches
    return batches, [min(b, batches * batch_size) for b in base]


def plan_balance(counts: Sequence[int], batch_size: int, drop_last: bool = False) -> BalancePlan:
    """Plans equal batch counts over ranks holding ``counts[r]`` seeds each (pure, deterministic).

    Args:
        counts: Seeds each rank holds (its co-located share).
        batch_size: Seeds per batch.
        drop_last: Only full batches (then less than one batch per rank is left out); else at most
            one seed per rank is left out and the last batch of a rank may be partial.

    Raises:
        InvalidArgumentError: fewer seeds than one batch per rank (nothing to train on).

    Example:
        >>> plan_balance([0, 9], 4, drop_last=True).quota
        (4, 4)
    """
    check_positive_int("plan_balance", "batch_size", batch_size)
    counts = [check_positive_int("plan_balance", "counts", int(c), allow_zero=True) for c in counts]
    world = len(counts)
    check_positive_int("plan_balance", "len(counts)", world)
    total = sum(counts)
    batches, quota = _quotas(total, world, batch_size, drop_last)
    if batches == 0:
        need = world * batch_size if drop_last else world
        raise InvalidArgumentError(_WHERE, "seeds", total,
                                   f"at least {need} seeds over {world} ranks (batch_size={batch_size}, "
                                   f"drop_last={drop_last}) so every rank gets one batch")
    keep = [min(c, q) for c, q in zip(counts, quota)]
    surplus = [c - k for c, k in zip(counts, keep)]
    deficit = [q - k for q, k in zip(quota, keep)]
    moves, giver, taker = [], 0, 0
    while True:
        while giver < world and surplus[giver] == 0:
            giver += 1
        while taker < world and deficit[taker] == 0:
            taker += 1
        if giver == world or taker == world:
            break
        n = min(surplus[giver], deficit[taker])
        moves.append((giver, taker, n))
        surplus[giver] -= n
        deficit[taker] -= n
    return BalancePlan(batches, tuple(quota), tuple(keep), tuple(moves), tuple(surplus))


def _given_slices(plan: BalancePlan, rank: int) -> List[Tuple[int, int, int]]:
    """``(taker, start, end)`` positions in ``rank``'s own list that it gives away."""
    start, out = plan.keep[rank], []
    for giver, taker, n in plan.moves:
        if giver == rank:
            out.append((taker, start, start + n))
            start += n
    return out


# ------------------------------------------------------------------------------------ executor
@dataclass
class SeedShare:
    """This rank's seeds for every epoch.

    Attributes:
        items: Aligned tensors (first dimension = seeds), e.g. ``{"seed": ids}`` or, for links,
            ``{"src": ..., "dst": ..., "label": ...}``; own seeds first, then received ones.
        num_batches: Batches per epoch, equal on every rank (when ``agreed``).
        plan: The agreed plan (the same object on every rank).
        agreed: Whether the ranks agreed on the batch count (``False``: a ``seed_split="partition"`` share,
            this rank's own count, possibly none).
    """
    items: Dict[str, Tensor]
    num_batches: int
    plan: BalancePlan
    agreed: bool = True

    @property
    def num_seeds(self) -> int:
        return next(iter(self.items.values())).size(0)


def _check_items(items: Dict[str, Tensor]) -> int:
    if not isinstance(items, dict) or not items:
        raise InvalidArgumentError(_WHERE, "items", items, "a non-empty dict of aligned tensors")
    sizes = {k: v.size(0) if isinstance(v, Tensor) and v.dim() else None for k, v in items.items()}
    if None in sizes.values() or len(set(sizes.values())) != 1:
        raise InvalidArgumentError(_WHERE, "items", sizes, "tensors with the same first dimension")
    return next(iter(items.values())).size(0)


def balance_seeds(items: Dict[str, Tensor], batch_size: int, drop_last: bool = False, *,
                  shuffle_seed: Optional[int] = 0, group=None, what: str = "seeds") -> SeedShare:
    """Agrees on equal batch counts with every rank and moves surplus seeds (collective).

    Every rank of ``group`` (default: the whole process group; without one, a world of one) must call
    it with its own co-located ``items``. Before planning, each rank permutes its items with
    ``shuffle_seed`` (``None``: keep the order) so that moved and dropped seeds are a random sample
    rather than one end of an id range.

    Example:
        >>> share = balance_seeds({"seed": torch.arange(10)}, batch_size=4)   # one process
        >>> share.num_batches, share.num_seeds
        (3, 10)
    """
    import torch.distributed as dist

    n = _check_items(items)
    check_positive_int(_WHERE, "batch_size", batch_size)
    if not isinstance(drop_last, bool):
        raise InvalidArgumentError(_WHERE, "drop_last", drop_last, "a bool")
    if shuffle_seed is not None:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(shuffle_seed)))
        items = {k: v[perm] for k, v in items.items()}
    on = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size(group) if on else 1
    rank = dist.get_rank(group) if on else 0
    counts = torch.zeros(world, dtype=torch.long)
    counts[rank] = n
    if on and world > 1:
        dist.all_reduce(counts, group=group)  # the one agreement before the first epoch
    plan = plan_balance(counts.tolist(), batch_size, drop_last)
    mine = {k: v[:plan.keep[rank]] for k, v in items.items()}
    if plan.moves:
        outgoing = {taker: {k: v[s:e] for k, v in items.items()} for taker, s, e in _given_slices(plan, rank)}
        gathered: List[Optional[dict]] = [None] * world
        dist.all_gather_object(gathered, outgoing, group=group)
        received = [g[rank] for g in gathered if g and rank in g]
        mine = {k: torch.cat([mine[k]] + [r[k] for r in received]) for k in mine}
    _say_dropped(plan, counts.tolist(), rank, batch_size, drop_last, what)
    return SeedShare(mine, plan.num_batches, plan)


def _say_dropped(plan: BalancePlan, counts: List[int], rank: int, batch_size: int, drop_last: bool,
                 what: str) -> None:
    """One line on what this rank leaves out per epoch, and why: only ``drop_last``'s last partial batch, or
    (ranks holding unequal shares) what equal batch counts cost beyond it."""
    dropped, n = plan.dropped[rank], counts[rank]
    if not dropped:
        return
    partial = n % batch_size if drop_last else 0  # what drop_last alone cuts from this rank's own seeds
    if dropped <= partial:
        LOG.warning("%s: rank %d drops its last partial batch, %d of its %d %s per epoch (drop_last=True)", _WHERE,
                    rank, dropped, n, what)
        return
    LOG.warning("%s: rank %d leaves out %d of its %d %s per epoch so that every rank runs %d batches: the ranks hold "
                "unequal shares (%s)%s; %d left out over all ranks", _WHERE, rank, dropped, n, what,
                plan.num_batches, "/".join(map(str, counts)),
                f", {partial} of them drop_last's last partial batch" if partial else "", sum(plan.dropped))
