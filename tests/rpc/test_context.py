"""DistContext: environment parsing, validation, and the rank/partition/RPC layout (pure, one process)."""
import itertools

import pytest

from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError


def torchrun_env(rank, world, local_world=None, **extra):
    local_world = local_world or world
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % local_world),
           "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    env.update(extra)
    return env


def test_from_env_reads_torchrun_variables():
    ctx = DistContext.from_env(2, env=torchrun_env(3, 4, local_world=2))
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (3, 4, 1, 2)
    assert (ctx.master_addr, ctx.master_port, ctx.rpc_port) == ("10.0.0.1", 29400, 29401)
    assert ctx.use_agent_store and ctx.partition == 1 and ctx.machine == 1
    # Under torchrun the trainer world rendezvouses through torchrun's own store.
    assert ctx.rpc_init_method == "env://" and not ctx.hosts_rpc_store


def test_from_env_rpc_port_policy_and_one_process_default():
    assert DistContext.from_env(1, env=torchrun_env(0, 2, PYG_DIST_RPC_PORT="31000")).rpc_port == 31000
    assert DistContext.from_env(1, rpc_port=32000, env=torchrun_env(0, 2, PYG_DIST_RPC_PORT="31000")).rpc_port == 32000
    solo = DistContext.from_env(1, env={})
    assert (solo.rank, solo.world_size, solo.partition, solo.master_port, solo.rpc_port) == (0, 1, 0, 29500, 29501)
    assert solo.rpc_init_method == "tcp://127.0.0.1:29501" and solo.hosts_rpc_store


@pytest.mark.parametrize("env, name", [
    ({"RANK": "0"}, "RANK/WORLD_SIZE"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "p"}, "MASTER_PORT"),
])
def test_from_env_rejects_bad_environment(env, name):
    with pytest.raises(InvalidArgumentError) as info:
        DistContext.from_env(1, env=env)
    assert info.value.name == name


@pytest.mark.parametrize("kwargs, name", [
    (dict(rank=2, world_size=2, num_partitions=1), "rank"),
    (dict(rank=-1, world_size=2, num_partitions=1), "rank"),
    (dict(rank=0, world_size=0, num_partitions=1), "world_size"),
    (dict(rank=0, world_size=4, num_partitions=3), "num_partitions"),
    (dict(rank=0, world_size=2, num_partitions=4), "num_partitions"),
    (dict(rank=0, world_size=4, num_partitions=2, local_world_size=3), "local_world_size"),
    (dict(rank=3, world_size=4, num_partitions=2, local_world_size=2, local_rank=0), "local_rank"),
    (dict(rank=0, world_size=2, num_partitions=2, master_port=29500, rpc_port=29500), "rpc_port"),
    (dict(rank=0, world_size=2, num_partitions=2, rpc_port=70000), "rpc_port"),
    (dict(rank=0, world_size=2, num_partitions=2, master_addr=""), "master_addr"),
    (dict(rank=0, world_size=2, num_partitions=2, num_workers=-1), "num_workers"),
    (dict(rank=0, world_size=2, num_partitions=2, num_workers=2, worker_id=2), "worker_id"),
    (dict(rank=True, world_size=2, num_partitions=2), "rank"),
])
def test_constructor_validates_with_named_arguments(kwargs, name):
    with pytest.raises(InvalidArgumentError) as info:
        DistContext(**kwargs)
    assert info.value.name == name and info.value.value == kwargs[name]
    assert name in str(info.value) and repr(kwargs[name]) in str(info.value)


def test_trainer_world_layout_one_and_several_ranks_per_partition():
    one = [DistContext(rank=r, world_size=4, num_partitions=4) for r in range(4)]
    assert [c.partition for c in one] == [0, 1, 2, 3]
    assert [c.rpc_rank for c in one] == [0, 1, 2, 3] and one[0].rpc_world_size == 4
    several = [DistContext(rank=r, world_size=4, num_partitions=2) for r in range(4)]
    assert [c.partition for c in several] == [0, 0, 1, 1]
    assert list(several[0].rpc_ranks_of(1)) == [2, 3]
    names = {c.worker_name(c.rpc_rank) for c in several}
    assert len(names) == 4 and all(c.joins_rpc and not c.is_worker for c in several)


def test_worker_world_layout():
    trainer = DistContext(rank=1, world_size=2, num_partitions=2, num_workers=3)
    assert not trainer.joins_rpc and trainer.rpc_rank is None and trainer.rpc_world_size == 6
    workers = [trainer.for_worker(w) for w in range(3)]
    assert [w.rpc_rank for w in workers] == [3, 4, 5]
    assert all(w.joins_rpc and w.partition == 1 for w in workers)
    assert list(trainer.rpc_ranks_of(1)) == [3, 4, 5] and list(trainer.rpc_ranks_of(0)) == [0, 1, 2]
    assert [trainer.trainer_of_rpc_rank(r) for r in range(6)] == [0, 0, 0, 1, 1, 1]
    assert workers[0].worker_name(4) == "pyg_dist_sampler_4"
    with pytest.raises(InvalidArgumentError):
        workers[0].for_worker(1)
    with pytest.raises(InvalidArgumentError):
        DistContext(rank=0, world_size=2, num_partitions=2).for_worker(0)
    with pytest.raises(InvalidArgumentError):
        trainer.for_worker(3)


def test_worker_world_under_torchrun_uses_tcp_on_rpc_port():
    trainer = DistContext.from_env(2, num_workers=2, env=torchrun_env(0, 2))
    assert trainer.for_worker(0).rpc_init_method == "tcp://10.0.0.1:29401"
    assert trainer.for_worker(0).hosts_rpc_store and not trainer.for_worker(1).hosts_rpc_store


@pytest.mark.parametrize("world, parts, local, workers", [
    (w, p, lw, nw) for w, p, lw, nw in itertools.product([1, 2, 4, 6, 8], [1, 2, 3, 4], [1, 2, 3], [0, 1, 2])
    if w % p == 0 and w % lw == 0
])
def test_layout_is_a_consistent_partition_of_rpc_ranks(world, parts, local, workers):
    base = DistContext(rank=0, world_size=world, num_partitions=parts, local_world_size=local, num_workers=workers)
    owner = {}
    for p in range(parts):
        for r in base.rpc_ranks_of(p):
            assert r not in owner
            owner[r] = p
    assert sorted(owner) == list(range(base.rpc_world_size))
    assert all(base.partition_of_rpc_rank(r) == p for r, p in owner.items())
    names = {base.worker_name(r) for r in owner}
    assert len(names) == base.rpc_world_size
    for rank in range(world):
        trainer = DistContext(rank=rank, world_size=world, num_partitions=parts, local_world_size=local,
                              num_workers=workers)
        members = [trainer.for_worker(w) for w in range(workers)] if workers else [trainer]
        for ctx in members:
            assert owner[ctx.rpc_rank] == ctx.partition
            for p in range(parts):
                pick = ctx.pick_rpc_rank(p)
                assert owner[pick] == p
                if p == ctx.partition:
                    assert pick == ctx.rpc_rank  # own partition: served locally


def test_pick_prefers_same_machine_and_spreads_load():
    # 2 machines x 3 ranks, 3 partitions of 2 ranks: partition 1 = ranks 2 (machine 0) and 3 (machine 1).
    def ctx(r):
        return DistContext(rank=r, world_size=6, num_partitions=3, local_world_size=3)
    assert ctx(0).pick_rpc_rank(1) == 2 and ctx(1).pick_rpc_rank(1) == 2
    assert ctx(4).pick_rpc_rank(1) == 3 and ctx(5).pick_rpc_rank(1) == 3
    # One machine, partition 1 served by ranks 4..7: the four callers of partition 0 use all four.
    callers = [DistContext(rank=r, world_size=8, num_partitions=2) for r in range(4)]
    assert sorted(c.pick_rpc_rank(1) for c in callers) == [4, 5, 6, 7]
    # Same in the worker world: 2 trainers x 2 workers, the two workers of trainer 0 use both servers.
    t0 = DistContext(rank=0, world_size=2, num_partitions=2, num_workers=2)
    assert sorted(t0.for_worker(w).pick_rpc_rank(1) for w in range(2)) == [2, 3]


def test_index_arguments_are_checked():
    ctx = DistContext(rank=0, world_size=2, num_partitions=2)
    for bad in (-1, 2, "0", 1.0):
        with pytest.raises(InvalidArgumentError):
            ctx.rpc_ranks_of(bad)
    with pytest.raises(InvalidArgumentError):
        ctx.worker_name(2)
    with pytest.raises(InvalidArgumentError):
        ctx.partition_of_rank(5)


def test_for_loader_gives_each_worker_loader_its_own_world():
    t = DistContext(rank=1, world_size=2, num_partitions=2, master_port=29500, num_workers=2)
    first, second = t.for_loader(0, 2), t.for_loader(1, 3)
    assert (first.rpc_port, second.rpc_port) == (29501, 29502)
    assert second.rpc_world_size == 6 and second.for_worker(2).rpc_rank == 5
    assert first.for_worker(0).partition == second.for_worker(2).partition == 1
    for kwargs, name in ((dict(index=-1, num_workers=1), "index"), (dict(index=0, num_workers=0), "num_workers")):
        with pytest.raises(InvalidArgumentError, match=name):
            t.for_loader(**kwargs)
    with pytest.raises(InvalidArgumentError, match="ctx"):      # trainers of a trainer world are in RPC
        DistContext(rank=0, world_size=2, num_partitions=2).for_loader(0, 2)
    with pytest.raises(InvalidArgumentError, match="index"):    # would land on DDP's port
        DistContext(rank=0, world_size=2, num_partitions=2, master_port=29500, rpc_port=29498,
                    num_workers=1).for_loader(2, 1)
    with pytest.raises(InvalidArgumentError, match="index"):    # past the last port
        DistContext(rank=0, world_size=2, num_partitions=2, rpc_port=65535, num_workers=1).for_loader(1, 1)
