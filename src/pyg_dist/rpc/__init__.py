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
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.iface import check_port_free
    from pyg_dist.rpc.aio import get_loop, run_coroutine, stop_loop, submit_coroutine, wrap_torch_future
    from pyg_dist.rpc.callees import (
        CallReply,
        partitioning,
        register_callee,
        registered_callees,
        set_partitioning,
        unregister_callee,
    )
    from pyg_dist.rpc.calls import RpcFuture, call, call_async
    from pyg_dist.rpc.runtime import (
        barrier,
        current_context,
        init_rpc,
        is_initialized,
        rpc_session,
        shutdown_rpc,
    )

_LAZY = {
    # public name: the module that defines it
    "get_loop": "pyg_dist.rpc.aio",
    "run_coroutine": "pyg_dist.rpc.aio",
    "stop_loop": "pyg_dist.rpc.aio",
    "submit_coroutine": "pyg_dist.rpc.aio",
    "wrap_torch_future": "pyg_dist.rpc.aio",
    "CallReply": "pyg_dist.rpc.callees",
    "register_callee": "pyg_dist.rpc.callees",
    "registered_callees": "pyg_dist.rpc.callees",
    "unregister_callee": "pyg_dist.rpc.callees",
    "set_partitioning": "pyg_dist.rpc.callees",
    "partitioning": "pyg_dist.rpc.callees",
    "RpcFuture": "pyg_dist.rpc.calls",
    "call": "pyg_dist.rpc.calls",
    "call_async": "pyg_dist.rpc.calls",
    "check_port_free": "pyg_dist.iface",
    "barrier": "pyg_dist.rpc.runtime",
    "current_context": "pyg_dist.rpc.runtime",
    "init_rpc": "pyg_dist.rpc.runtime",
    "is_initialized": "pyg_dist.rpc.runtime",
    "rpc_session": "pyg_dist.rpc.runtime",
    "shutdown_rpc": "pyg_dist.rpc.runtime",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
