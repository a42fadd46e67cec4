"""Seed split and balance: pure plans (exactly once, equal batch counts) and the collective executor."""
from __future__ import annotations

import random

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader.seed_split import balance_seeds, partition_share, plan_balance
from pyg_dist.testing import spawn_world


def _simulate(counts, batch_size, drop_last):
    """Applies a plan to per-rank id lists; returns (per-rank seeds, plan)."""
    plan = plan_balance(counts, batch_size, drop_last)
    start = 0
    owned = []
    for c in counts:
        owned.append(list(range(start, start + c)))
        start += c
    mine = [o[:k] for o, k in zip(owned, plan.keep)]
    cursor = list(plan.keep)
    for giver, taker, n in plan.moves:
        mine[taker] += owned[giver][cursor[giver]:cursor[giver] + n]
        cursor[giver] += n
    return mine, plan


@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_exactly_once_equal_batches(drop_last):
    rng = random.Random(0)
    for _ in range(400):
        world = rng.randint(1, 6)
        bs = rng.randint(1, 9)
        counts = [rng.choice([0, rng.randint(0, 60)]) for _ in range(world)]
        if sum(counts) < (world * bs if drop_last else world):
            with pytest.raises(InvalidArgumentError):
                plan_balance(counts, bs, drop_last)
            continue
        mine, plan = _simulate(counts, bs, drop_last)
        used = [s for m in mine for s in m]
        assert len(used) == len(set(used))                       # no seed twice
        batches = [-(-len(m) // bs) if not drop_last else len(m) // bs for m in mine]
        assert set(batches) == {plan.num_batches}                # equal batch counts
        if drop_last:
            assert all(len(m) == plan.num_batches * bs for m in mine)
        lost = sum(counts) - len(used)
        assert lost == sum(plan.dropped)
        # an equal split leaves out less than one batch per rank (drop_last) or one seed per rank
        assert lost < world * bs if drop_last else lost < world
        # co-location: a rank keeps min(own, quota) of its own seeds
        assert all(k == min(c, q) for k, c, q in zip(plan.keep, counts, plan.quota))


def test_plan_all_seeds_on_one_rank():
    mine, plan = _simulate([0, 0, 37, 0], 4, False)
    assert [len(m) for m in mine] == [10, 9, 9, 9] and plan.num_batches == 3
    assert sorted(s for m in mine for s in m) == list(range(37))


def test_partition_share_chunks_and_sub_bounds():
    seeds = torch.tensor([1, 4, 5, 9, 12, 13, 20])
    parts = [partition_share(seeds, i, 3) for i in range(3)]
    assert torch.equal(torch.cat(parts), seeds)
    bounds = torch.tensor([0, 6, 25])
    assert partition_share(seeds, 0, 2, bounds).tolist() == [1, 4, 5]
    assert partition_share(seeds, 1, 2, bounds).tolist() == [9, 12, 13, 20]
    with pytest.raises(InvalidArgumentError, match="share"):
        partition_share(seeds, 3, 3)
    with pytest.raises(InvalidArgumentError, match="sub_bounds"):
        partition_share(seeds, 0, 3, bounds)


def test_bad_arguments_name_themselves():
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        plan_balance([3, 3], 0)
    with pytest.raises(InvalidArgumentError, match="items"):
        balance_seeds({"a": torch.arange(3), "b": torch.arange(4)}, 2)
    with pytest.raises(InvalidArgumentError, match="drop_last"):
        balance_seeds({"a": torch.arange(3)}, 2, drop_last="yes")


def _balance_rank(rank, world_size, counts, bs, drop_last):
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        start = sum(counts[:rank])
        own = torch.arange(start, start + counts[rank])
        share = balance_seeds({"seed": own, "twice": own * 2}, bs, drop_last, shuffle_seed=rank)
        assert torch.equal(share.items["twice"], share.items["seed"] * 2)   # aligned items travel together
        return share.items["seed"].tolist(), share.num_batches
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_balance_seeds_in_a_world_of_four():
    counts, bs = [0, 50, 3, 11], 4
    results = spawn_world(4, _balance_rank, counts, bs, False, timeout=90)
    used = [s for seeds, _ in results for s in seeds]
    assert sorted(used) == list(range(sum(counts)))             # 64 seeds / 4 ranks: none lost
    assert {b for _, b in results} == {4}
    assert all(len(seeds) == 16 for seeds, _ in results)


def test_the_dropped_line_says_why(caplog):
    """Equal shares with drop_last: only the last partial batch is dropped, and the line says so; unequal shares:
    what equal batch counts cost, with drop_last's part of it (the issue's 762 of 5882 seeds read as balancing)."""
    import logging

    from pyg_dist.loader.seed_split import _say_dropped
    with caplog.at_level(logging.WARNING, logger="pyg_dist"):
        _say_dropped(plan_balance([5882, 5882], 1024, True), [5882, 5882], 0, 1024, True, "seeds")
    assert caplog.records[-1].getMessage() == ("balance_seeds: rank 0 drops its last partial batch, 762 of its 5882 "
                                               "seeds per epoch (drop_last=True)")
    with caplog.at_level(logging.WARNING, logger="pyg_dist"):
        _say_dropped(plan_balance([9000, 3000], 1024, True), [9000, 3000], 0, 1024, True, "seeds")
    line = caplog.records[-1].getMessage()
    assert "so that every rank runs 5 batches: the ranks hold unequal shares (9000/3000)" in line, line
    assert "808 of them drop_last's last partial batch" in line, line
