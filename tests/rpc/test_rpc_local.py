"""RPC runtime in one process: callee table, local answering, errors, event loop, port check.

No torch RPC agent starts here (one-partition worlds answer locally; the port check fails before).
"""
import asyncio
import socket
import threading
from dataclasses import dataclass

import pytest
import torch

from pyg_dist import rpc
from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError, NotInitializedError, PyGDistError, RemoteCallError, RpcTimeoutError

pytestmark = pytest.mark.timeout(60)


@dataclass
class Ids:
    ids: torch.Tensor


def _double(msg: Ids) -> Ids:
    return Ids(msg.ids * 2)


def _fail(msg: Ids) -> Ids:
    raise KeyError(f"no row for ids {msg.ids.tolist()}")


def _whoami(msg):
    ctx = rpc.current_context()
    return (ctx.partition, ctx.rpc_rank)


@pytest.fixture(autouse=True)
def clean_world():
    for name, fn in [("t_double", _double), ("t_fail", _fail), ("t_whoami", _whoami)]:
        rpc.register_callee(name, fn, replace=True)
    yield
    rpc.shutdown_rpc(graceful=False)
    for name in ("t_double", "t_fail", "t_whoami"):
        rpc.unregister_callee(name)


def solo(world_size=1, rank=0):
    return DistContext(rank=rank, world_size=world_size, num_partitions=1)


def test_callee_table_validation():
    assert rpc.register_callee("t_double", _double) is _double  # same fn again: no-op
    with pytest.raises(InvalidArgumentError, match="t_double"):
        rpc.register_callee("t_double", _fail)
    for bad_name in ("", "has space", 3, "1abc"):
        with pytest.raises(InvalidArgumentError) as info:
            rpc.register_callee(bad_name, _double)
        assert info.value.name == "name"
    with pytest.raises(InvalidArgumentError) as info:
        rpc.register_callee("t_x", 42)
    assert info.value.name == "fn"

    async def coro(msg):
        return msg
    with pytest.raises(InvalidArgumentError, match="synchronous"):
        rpc.register_callee("t_async", coro)

    @rpc.register_callee("t_decorated")
    def decorated(msg):
        return msg
    assert "t_decorated" in rpc.registered_callees() and "t_async" not in rpc.registered_callees()
    rpc.unregister_callee("t_decorated")
    assert "t_decorated" not in rpc.registered_callees()


def test_calls_before_init_raise_not_initialized():
    assert not rpc.is_initialized()
    with pytest.raises(NotInitializedError, match="init_rpc"):
        rpc.call(0, "t_double", Ids(torch.arange(3)))
    with pytest.raises(NotInitializedError):
        rpc.current_context()


def test_one_partition_world_answers_locally_and_errors_carry_op_partition_rank():
    ctx = DistContext(rank=1, world_size=2, num_partitions=1)  # 2 ranks, 1 partition: no RPC needed
    rpc.init_rpc(ctx)
    rpc.init_rpc(ctx)  # idempotent
    assert rpc.is_initialized() and rpc.current_context() == ctx
    out = rpc.call(0, "t_double", Ids(torch.tensor([1, 5])))
    assert torch.equal(out.ids, torch.tensor([2, 10]))
    assert rpc.call(0, "t_whoami") == (0, 1)
    with pytest.raises(RemoteCallError) as info:
        rpc.call(0, "t_fail", Ids(torch.tensor([7])))
    err = info.value
    assert (err.op, err.partition, err.rank) == ("t_fail", 0, 1)
    assert "KeyError" in err.remote_traceback and "no row for ids [7]" in err.remote_traceback
    assert "_fail" in err.remote_traceback  # the callee's frame is in the traceback


def test_call_argument_errors_are_typed():
    rpc.init_rpc(solo())
    with pytest.raises(InvalidArgumentError) as info:
        rpc.call(1, "t_double", Ids(torch.arange(2)))
    assert info.value.name == "partition"
    with pytest.raises(InvalidArgumentError) as info:
        rpc.call(0, "t_nope", Ids(torch.arange(2)))
    assert info.value.name == "op" and "t_double" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        rpc.call(0, "t_double", torch.arange(2))
    assert info.value.name == "payload"
    with pytest.raises(InvalidArgumentError) as info:
        rpc.call(0, "t_double", Ids(torch.arange(2)), timeout=0)
    assert info.value.name == "timeout"


def test_init_rejects_other_context_and_non_members():
    with pytest.raises(InvalidArgumentError, match="for_worker"):
        rpc.init_rpc(DistContext(rank=0, world_size=1, num_partitions=1, num_workers=2))
    with pytest.raises(InvalidArgumentError) as info:
        rpc.init_rpc("ctx")
    assert info.value.name == "ctx"
    rpc.init_rpc(solo())
    with pytest.raises(InvalidArgumentError, match="shutdown_rpc"):
        rpc.init_rpc(solo(world_size=2, rank=1))


def test_shutdown_is_idempotent_and_init_after_shutdown_works():
    rpc.shutdown_rpc()  # nothing to shut down
    for _ in range(2):
        rpc.init_rpc(solo())
        assert rpc.call(0, "t_double", Ids(torch.tensor([3]))).ids.item() == 6
        rpc.shutdown_rpc()
        rpc.shutdown_rpc()
        assert not rpc.is_initialized()
    with rpc.rpc_session(solo()) as ctx:
        assert rpc.is_initialized() and ctx.partition == 0
    assert not rpc.is_initialized()


def test_session_shuts_down_when_body_raises():
    with pytest.raises(ValueError):
        with rpc.rpc_session(solo()):
            raise ValueError("training failed")
    assert not rpc.is_initialized()


def test_asyncio_gather_of_calls_on_background_loop():
    rpc.init_rpc(solo())

    async def sample():
        futs = [rpc.call_async(0, "t_double", Ids(torch.tensor([i]))) for i in range(5)]
        failing = rpc.call_async(0, "t_fail", Ids(torch.tensor([9])))
        values = await asyncio.gather(*futs)
        try:
            await failing
        except RemoteCallError as exc:
            return [v.ids.item() for v in values], exc.op
    assert rpc.run_coroutine(sample(), timeout=10) == ([0, 2, 4, 6, 8], "t_fail")


def test_event_loop_timeouts_restart_and_deadlock_guard():
    async def forever():
        await asyncio.sleep(3600)
    with pytest.raises(RpcTimeoutError, match="0.2"):
        rpc.run_coroutine(forever(), timeout=0.2)
    loop = rpc.get_loop()
    assert rpc.get_loop() is loop and loop.is_running()

    async def nested():
        return rpc.run_coroutine(asyncio.sleep(0), timeout=1)
    with pytest.raises(PyGDistError, match="deadlock"):
        rpc.run_coroutine(nested(), timeout=5)
    rpc.stop_loop()
    assert not loop.is_running()
    assert rpc.run_coroutine(asyncio.sleep(0, result=7), timeout=5) == 7  # restarted lazily
    with pytest.raises(InvalidArgumentError):
        rpc.run_coroutine(asyncio.sleep(0), timeout=-1)


def test_a_remote_timeout_keeps_its_op_partition_and_rank():
    async def remote_call_timed_out():
        raise RpcTimeoutError("remote call 'pyg_dist.one_hop' to partition 1 (rpc rank 1) timed out after 60 s")
    with pytest.raises(RpcTimeoutError, match=r"one_hop.*partition 1 \(rpc rank 1\)"):
        rpc.run_coroutine(remote_call_timed_out(), timeout=30)      # not "coroutine did not finish"


def test_wrap_torch_future_completes_from_another_thread():
    fut = torch.futures.Future()

    async def wait_it():
        done = await asyncio.wait_for(rpc.wrap_torch_future(fut), 5)
        return done.wait()
    threading.Timer(0.1, lambda: fut.set_result(41)).start()
    assert rpc.run_coroutine(wait_it(), timeout=10) == 41


def test_port_in_use_gives_clear_error_naming_port():
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        ctx = DistContext(rank=0, world_size=2, num_partitions=2, master_port=port - 1 if port > 1 else 2,
                          rpc_port=port)
        with pytest.raises(InvalidArgumentError) as info:
            rpc.init_rpc(ctx, timeout=10)
        assert info.value.name == "rpc_port" and info.value.value == port and str(port) in str(info.value)
        assert "in use" in str(info.value)
        assert not rpc.is_initialized()
    finally:
        holder.close()


def _forked_child(queue):
    try:
        before = rpc.is_initialized()  # the parent's world is not inherited
        value = rpc.run_coroutine(asyncio.sleep(0, result="child loop"), timeout=10)
        rpc.init_rpc(solo())
        reply = rpc.call(0, "t_double", Ids(torch.tensor([21]))).ids.item()
        rpc.shutdown_rpc()
        queue.put((before, value, reply))
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent
        queue.put(repr(exc))


def test_forked_child_gets_its_own_world_and_loop():
    import multiprocessing as mp
    rpc.init_rpc(solo())
    parent_loop = rpc.get_loop()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_forked_child, args=(queue,))
    proc.start()
    try:
        assert queue.get(timeout=30) == (False, "child loop", 42)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    assert rpc.is_initialized() and rpc.get_loop() is parent_loop  # the parent is untouched
