"""Every socket pyg_dist opens for RPC listens on the interface of ``MASTER_ADDR`` only."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pyg_dist.testing import spawn_world


def _listeners_rank(rank, world):
    """Joins the process group (gloo) and the RPC world (TensorPipe), then lists this rank's listeners
    twice over: from psutil and from pyg_dist.iface.listeners (/proc), which must agree."""
    import psutil
    import torch.distributed as dist

    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.group import init_process_group
    from pyg_dist.iface import listeners
    ctx = DistContext.from_env(num_partitions=world)
    init_process_group("gloo", 60, ctx)
    dist.barrier()
    try:
        with rpc.rpc_session(ctx, timeout=60):
            proc = psutil.Process()
            conns = proc.net_connections(kind="tcp")
            listening = sorted({(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN})
            if listening != listeners():
                raise AssertionError(f"psutil {listening} != /proc {listeners()}")
            return listening, ctx.rpc_port
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_rpc_store_and_transport_listen_on_loopback_only():
    res = spawn_world(2, _listeners_rank, timeout=100)
    listening, rpc_port = res[0]
    assert (("127.0.0.1", rpc_port) in listening), listening            # rank 0 hosts the rendezvous store
    for rank_listening, _ in res:
        assert len(rank_listening) >= 2, rank_listening                  # TensorPipe and gloo at least
        assert all(ip == "127.0.0.1" for ip, _ in rank_listening), rank_listening  # nothing on 0.0.0.0 / ::


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


def main_in_namespace() -> None:
    """Run inside the namespace: a 2-rank world on 127.0.0.1 with no interface variable; prints its listeners."""
    for var in ("PYG_DIST_IFNAME", "TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        os.environ.pop(var, None)
    print("HOST", socket.gethostbyname(socket.gethostname()))
    print("RESULT", json.dumps(spawn_world(2, _listeners_rank, timeout=100)))


@pytest.mark.timeout(180)
def test_default_path_listens_on_master_addr_not_the_hostnames_address():
    """The audit's setup: a private network namespace where the hostname resolves to a second address
    (10.78.0.1 on a veth, standing in for a second NIC). With MASTER_ADDR=127.0.0.1 and no interface
    variable, every listener of both ranks (gloo, TensorPipe's transport, the RPC store) is on loopback."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) on this machine")
    ns = f"pygd_l_{uuid.uuid4().hex[:6]}"
    probe = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, timeout=20)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {probe.stderr.strip()}")
    etc = Path("/etc/netns") / ns  # `ip netns exec` mounts these over /etc: the hostname -> 10.78.0.1
    try:
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n10.78.0.1 {socket.gethostname()}\n")
        for cmd in (["link", "set", "lo", "up"], ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                    ["addr", "add", "10.78.0.1/24", "dev", "v0"], ["link", "set", "v0", "up"],
                    ["link", "set", "v1", "up"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True, capture_output=True, timeout=20)
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                              "from tests.rpc.test_listeners import main_in_namespace; main_in_namespace()"],
                             capture_output=True, text=True, timeout=150, cwd=root)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        shutil.rmtree(etc, ignore_errors=True)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("HOST", "RESULT")))
    assert out.returncode == 0 and "RESULT" in lines, out.stdout[-3000:] + out.stderr[-3000:]
    assert lines["HOST"] == "10.78.0.1"  # the namespace really resolves the hostname elsewhere
    for rank, (listening, _) in enumerate(json.loads(lines["RESULT"])):
        assert len(listening) >= 2 and all(ip == "127.0.0.1" for ip, _ in listening), (rank, listening)


_ONE_RANK = """
import os, sys
import torch.distributed as dist
from pyg_dist.context import DistContext
from pyg_dist.group import init_process_group
port = int(sys.argv[1])
ctx = DistContext(rank=0, world_size=1, num_partitions=1, master_addr="127.0.0.1", master_port=port)
before = (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))
init_process_group("gloo", 30, ctx)
dist.barrier()
print(before, (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")), dist.get_world_size())
dist.destroy_process_group()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("given", [{}, {"MASTER_ADDR": "127.0.0.1"}])
def test_a_plain_script_joins_on_its_contexts_address_and_hands_it_down(given):
    """Outside torchrun (no MASTER_ADDR / MASTER_PORT, or only the address) the group forms on the context's
    address and port, and what joins later (TensorPipe, sampler workers) then reads them from the environment;
    a variable the user set is kept."""
    from pyg_dist.testing.world import free_port
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")} | given
    out = subprocess.run([sys.executable, "-c", _ONE_RANK, str(port)], env=env, capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == f"{(given.get('MASTER_ADDR'), None)} ('127.0.0.1', '{port}') 1"
