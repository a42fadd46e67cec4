"""Every socket pyg_dist opens for RPC listens on the interface of ``MASTER_ADDR`` only."""
from __future__ import annotations

import pytest

from pyg_dist.testing import spawn_world


def _listeners_rank(rank, world):
    import psutil

    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    ctx = DistContext.from_env(num_partitions=world)
    with rpc.rpc_session(ctx, timeout=60):
        proc = psutil.Process()
        conns = proc.net_connections(kind="tcp") if hasattr(proc, "net_connections") else proc.connections(kind="tcp")
        listening = sorted({(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN})
        return listening, ctx.rpc_port


@pytest.mark.timeout(120)
def test_rpc_store_and_transport_listen_on_loopback_only():
    res = spawn_world(2, _listeners_rank, timeout=100)
    listening, rpc_port = res[0]
    assert (("127.0.0.1", rpc_port) in listening), listening            # rank 0 hosts the rendezvous store
    assert all(ip == "127.0.0.1" for ip, _ in listening), listening      # nothing on 0.0.0.0 / ::
