"""RPC runtime in spawned worlds on 127.0.0.1 (2, 3 and 4 ranks) and under the real torchrun.

Each world groups several checks, because RPC start-up costs seconds on a loaded machine.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pytest
import torch

from pyg_dist import rpc
from pyg_dist.context import AGENT_STORE_ENV, DistContext
from pyg_dist.errors import InvalidArgumentError, PyGDistError, RemoteCallError, RpcTimeoutError
from pyg_dist.testing import RankFailedError, WorldTimeoutError, free_ports, spawn_world


@dataclass
class Ids:
    ids: torch.Tensor


@dataclass
class Info:
    partition: int
    rpc_rank: int
    pid: int
    ids: torch.Tensor


@dataclass
class Sleep:
    seconds: float


def _info(msg: Ids) -> Info:
    ctx = rpc.current_context()
    return Info(ctx.partition, ctx.rpc_rank, os.getpid(), msg.ids * 2)


def _boom(msg: Ids):
    return msg.ids.sum().item() // 0  # ZeroDivisionError on the callee


def _sleep(msg: Sleep):
    time.sleep(msg.seconds)
    return msg.seconds


def _echo(msg: Ids) -> Ids:
    if msg.ids.dtype != torch.int64:
        raise TypeError(f"the callee saw {msg.ids.dtype}")
    return Ids(msg.ids.clone())


def _check_wire(peer: int) -> list:
    """Ids cross as int32 where they fit (pyg_dist.rpc.wire) and arrive as the int64 that was sent."""
    sizes = []
    for ids in (torch.arange(1000) * 3 - 1500, torch.arange(1000) + 2 ** 40):
        fut = rpc.call_async(peer, "echo", Ids(ids))
        got = fut.wait()
        assert got.ids.dtype == torch.int64 and torch.equal(got.ids, ids)
        sizes.append(fut.reply_bytes)
    return sizes


def _die(msg):
    os.kill(os.getpid(), signal.SIGKILL)  # the serving process dies in the middle of the call


def _register():
    for name, fn in [("info", _info), ("boom", _boom), ("sleep", _sleep), ("die", _die), ("echo", _echo)]:
        rpc.register_callee(name, fn, replace=True)


def _gather_infos(num_partitions: int):
    async def go():
        futs = [rpc.call_async(p, "info", Ids(torch.tensor([p, 10 * p]))) for p in range(num_partitions)]
        return await __import__("asyncio").gather(*futs)
    return rpc.run_coroutine(go(), timeout=60)


def _check_infos(ctx: DistContext, infos):
    for p, info in enumerate(infos):
        assert info.partition == p and info.rpc_rank == ctx.pick_rpc_rank(p), (p, info)
        assert torch.equal(info.ids, torch.tensor([2 * p, 20 * p]))
        assert (info.pid == os.getpid()) == (p == ctx.partition)  # own partition answered locally


# ---------------------------------------------------------------------------------------- 2 ranks
def _two_rank_main(rank, world_size):
    _register()
    ctx = DistContext.from_env(num_partitions=2)
    peer, seen = 1 - rank, []
    for _ in range(2):  # the second round checks init after shutdown, on the same ports
        rpc.init_rpc(ctx, timeout=90, call_timeout=30)
        rpc.init_rpc(ctx)  # idempotent
        _check_infos(ctx, _gather_infos(2))
        seen.append(("wire", _check_wire(peer)))
        try:
            rpc.call(peer, "boom", Ids(torch.tensor([1, 2])))
            raise AssertionError("remote ZeroDivisionError did not arrive")
        except RemoteCallError as exc:
            assert "ZeroDivisionError" in exc.remote_traceback and "_boom" in exc.remote_traceback
            seen.append((exc.op, exc.partition, exc.rank))
        started = time.monotonic()
        try:
            rpc.call(peer, "sleep", Sleep(4.0), timeout=1.0)
            raise AssertionError("slow call did not time out")
        except RpcTimeoutError as exc:
            assert "sleep" in str(exc) and f"partition {peer}" in str(exc)
            seen.append(("timeout", round(time.monotonic() - started) < 4))
        rpc.shutdown_rpc(graceful=True, timeout=30)
        assert not rpc.is_initialized()
    return seen


@pytest.mark.timeout(240)
def test_two_ranks_remote_calls_errors_timeouts_and_reinit():
    results = spawn_world(2, _two_rank_main, timeout=200)
    for rank, seen in enumerate(results):
        peer = 1 - rank
        assert seen == [("wire", [4000, 8000]), ("boom", peer, peer), ("timeout", True)] * 2


# ---------------------------------------------------------------------------------------- 4 ranks
def _four_rank_main(rank, world_size):
    _register()
    env = os.environ
    ports = dict(master_port=int(env["MASTER_PORT"]), rpc_port=int(env["PYG_DIST_RPC_PORT"]))
    # Worker world: 2 trainers x 2 sampler workers that inherited torchrun's agent-store variable.
    trainer = DistContext(rank=rank // 2, world_size=2, num_partitions=2, num_workers=2,
                          use_agent_store=True, **ports)
    worker = trainer.for_worker(rank % 2)
    assert worker.rpc_rank == rank and env[AGENT_STORE_ENV] == "True"
    rpc.init_rpc(worker, timeout=90)
    assert env[AGENT_STORE_ENV] == "True"  # removed only while the tcp:// rendezvous ran
    _check_infos(worker, _gather_infos(2))
    rpc.shutdown_rpc(graceful=True, timeout=30)
    # Trainer world, several ranks per partition: ranks 0,1 serve partition 0; ranks 2,3 partition 1.
    ctx = DistContext(rank=rank, world_size=4, num_partitions=2, **ports)
    with rpc.rpc_session(ctx, timeout=90):
        infos = _gather_infos(2)
        _check_infos(ctx, infos)
        picked = infos[1 - ctx.partition].rpc_rank
    return picked


@pytest.mark.timeout(240)
def test_four_ranks_worker_world_and_several_ranks_per_partition():
    picked = spawn_world(4, _four_rank_main, timeout=200, env={AGENT_STORE_ENV: "True"})
    assert picked == [2, 3, 0, 1]  # callers spread over the two servers of the other partition


# ---------------------------------------------------------------------------------------- dead peer
def _dead_peer_main(rank, world_size):
    _register()
    ctx = DistContext.from_env(num_partitions=3)
    rpc.init_rpc(ctx, timeout=90, call_timeout=25)
    if rank == 1:
        time.sleep(120)  # killed by its own 'die' callee long before this ends
        return "survived"
    if rank == 0:
        time.sleep(1.0)  # let rank 2's call be in flight when rank 1 dies
    started = time.monotonic()
    fut = rpc.call_async(1, "die" if rank == 0 else "sleep", Ids(torch.arange(3)) if rank == 0 else Sleep(20))
    try:
        fut.wait()
        outcome = "no error"
    except (RemoteCallError, RpcTimeoutError) as exc:
        outcome = (type(exc).__name__, exc.op if isinstance(exc, RemoteCallError) else None,
                   getattr(exc, "partition", None), getattr(exc, "rank", None))
    failed_after = time.monotonic() - started
    try:
        rpc.shutdown_rpc(graceful=True)  # default timeout (minutes): a dead member must not cost it
        shutdown = "ok"
    except PyGDistError as exc:
        shutdown = (type(exc).__name__, "pyg_dist_trainer_1" in str(exc) or "rpc rank 1" in str(exc))
    return outcome, failed_after, shutdown, time.monotonic() - started


@pytest.mark.timeout(240)
def test_peer_killed_mid_call_fails_every_other_rank_quickly():
    results = spawn_world(3, _dead_peer_main, timeout=200, may_die={1})
    assert results[1] is None  # rank 1 really died
    for rank in (0, 2):
        outcome, failed_after, shutdown, total = results[rank]
        op = "die" if rank == 0 else "sleep"
        assert outcome == ("RemoteCallError", op, 1, 1), (rank, outcome)
        assert failed_after < 30 and total < 30, (rank, failed_after, total)
        assert shutdown == ("PyGDistError", True), (rank, shutdown)  # names the dead member


# ---------------------------------------------------------------------------------------- harness
def _harness_main(rank, world_size, pid_dir):
    with open(os.path.join(pid_dir, f"{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    if rank == 1:
        raise ValueError("rank one exploded")
    time.sleep(300)


def _sleeper(rank, world_size, pid_dir):
    with open(os.path.join(pid_dir, f"{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(300)


def _pids_gone(pid_dir):
    pids = [int(open(os.path.join(pid_dir, f)).read()) for f in os.listdir(pid_dir) if f.endswith(".pid")]
    return pids and all(not os.path.exists(f"/proc/{pid}") for pid in pids)


@pytest.mark.timeout(120)
def test_spawn_world_reports_failure_and_kills_every_rank(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    with pytest.raises(RankFailedError) as info:
        spawn_world(2, _harness_main, str(pid_dir), timeout=90, log_dir=str(tmp_path / "logs"))
    assert info.value.rank == 1 and "rank one exploded" in str(info.value)
    assert os.path.exists(info.value.log_path)
    assert _pids_gone(str(pid_dir))
    for f in pid_dir.iterdir():
        f.unlink()
    with pytest.raises(WorldTimeoutError) as info:
        spawn_world(2, _sleeper, str(pid_dir), timeout=8, log_dir=str(tmp_path / "logs2"))
    assert info.value.pending == [0, 1]
    assert _pids_gone(str(pid_dir))
    with pytest.raises(InvalidArgumentError) as info:
        spawn_world(1, lambda rank, world_size: rank)
    assert info.value.name == "fn/args"


# ---------------------------------------------------------------------------------------- torchrun
_TORCHRUN_SCRIPT = textwrap.dedent('''
    import multiprocessing as mp
    import os
    import sys
    import torch
    import torch.distributed as dist
    from dataclasses import dataclass
    from pyg_dist import rpc
    from pyg_dist.context import DistContext

    @dataclass
    class Ask:
        x: torch.Tensor

    def where(msg):
        return (rpc.current_context().partition, rpc.current_context().rpc_rank, msg.x + 1)

    def ask_other(ctx):
        part, rpc_rank, y = rpc.call(1 - ctx.partition, "where", Ask(torch.tensor([ctx.rank])))
        assert part == 1 - ctx.partition and rpc_rank == ctx.pick_rpc_rank(part), (part, rpc_rank)
        assert y.item() == ctx.rank + 1

    def sampler_worker(trainer_ctx, worker_id):
        # A DataLoader-like worker: it inherited TORCHELASTIC_USE_AGENT_STORE from torchrun.
        assert os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        rpc.register_callee("where", where)
        ctx = trainer_ctx.for_worker(worker_id)
        with rpc.rpc_session(ctx, timeout=90):
            ask_other(ctx)

    def main():
        rpc.register_callee("where", where)
        ctx = DistContext.from_env(num_partitions=2)
        assert ctx.rpc_init_method == "env://", ctx
        dist.init_process_group("gloo")
        try:
            with rpc.rpc_session(ctx, timeout=90):  # trainer world, through torchrun's store
                ask_other(ctx)
                t = torch.tensor([1.0])
                dist.all_reduce(t)
                assert t.item() == 2.0
            workers = DistContext.from_env(num_partitions=2, num_workers=1)
            assert workers.for_worker(0).rpc_init_method.startswith("tcp://")
            proc = mp.get_context("spawn").Process(target=sampler_worker, args=(workers, 0))
            proc.start()
            proc.join(150)
            assert proc.exitcode == 0, f"sampler worker exit code {proc.exitcode}"
            dist.barrier()
        finally:
            dist.destroy_process_group()
        sys.stdout.write(f"RANK_OK {ctx.rank}\\n")  # one write: both ranks share the pipe
        sys.stdout.flush()

    if __name__ == "__main__":
        main()
''')


@pytest.mark.timeout(240)
def test_trainer_and_worker_worlds_under_real_torchrun(tmp_path):
    script = tmp_path / "train_rpc.py"
    script.write_text(_TORCHRUN_SCRIPT)
    master_port, = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={master_port}", str(script)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=200)
    finally:  # torchrun, its ranks and their sampler workers share one session: no orphans
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    assert proc.returncode == 0, out[-4000:]
    assert "RANK_OK 0" in out and "RANK_OK 1" in out
