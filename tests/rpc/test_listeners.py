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


@pytest.mark.timeout(120)
def test_pyg_dist_ifname_binds_that_interface():
    res = spawn_world(2, _listeners_rank, timeout=100, env={"PYG_DIST_IFNAME": "lo"})  # end to end; the
    # choice of address itself (IFNAME over MASTER_ADDR) is checked by test_ifname_resolution_and_typos
    listening, rpc_port = res[0]
    assert ("127.0.0.1", rpc_port) in listening and all(ip == "127.0.0.1" for ip, _ in listening), listening


def test_ifname_resolution_and_typos(monkeypatch):
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.iface import apply_ifname, interface_address, listen_address
    assert interface_address("lo") == "127.0.0.1"
    monkeypatch.delenv("PYG_DIST_IFNAME", raising=False)
    assert listen_address("10.1.2.3") == "10.1.2.3"
    monkeypatch.setenv("PYG_DIST_IFNAME", "lo")
    monkeypatch.delenv("TP_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    apply_ifname()
    import os
    assert listen_address("10.1.2.3") == "127.0.0.1" and os.environ["TP_SOCKET_IFNAME"] == "lo"
    monkeypatch.setenv("PYG_DIST_IFNAME", "nosuchif0")
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_IFNAME"):
        apply_ifname()
