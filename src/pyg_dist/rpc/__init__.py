"""pyg_dist's RPC runtime: world lifecycle, the named callee table, calls, and the event loop.

Typical use in every process of the world::

    from pyg_dist.context import DistContext
    from pyg_dist import rpc

    rpc.register_callee("one_hop", serve_one_hop)          # before init: peers may call at once
    ctx = DistContext.from_env(num_partitions=2)
    with rpc.rpc_session(ctx):                              # init_rpc ... shutdown_rpc in finally
        reply = rpc.call(1, "one_hop", request)             # blocking
        futs = [rpc.call_async(p, "one_hop", req) for p, req in plan]   # or: issue all, then
        replies = rpc.run_coroutine(gather_them(futs), timeout=60)      # await on the loop
"""
from .aio import get_loop, run_coroutine, stop_loop, submit_coroutine, wrap_torch_future
from .callees import CallReply, register_callee, registered_callees, unregister_callee
from .calls import RpcFuture, call, call_async
from .runtime import check_port_free, current_context, init_rpc, is_initialized, rpc_session, shutdown_rpc

__all__ = [
    "CallReply", "RpcFuture", "call", "call_async", "check_port_free", "current_context", "get_loop",
    "init_rpc", "is_initialized", "register_callee", "registered_callees", "rpc_session",
    "run_coroutine", "shutdown_rpc", "stop_loop", "submit_coroutine", "unregister_callee", "wrap_torch_future",
]
