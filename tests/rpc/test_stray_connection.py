"""Stray connections (a health check, a port scanner, another job) to a rank's RPC listener.

``sockets`` (the default): the connection is refused before a byte of it is interpreted; the rank, its other
connections and its calls carry on, a wrong secret is refused, and both ranks leave gracefully.

``tensorpipe``: the rank ends (TensorPipe aborts: nothing in torch's options prevents it), but nothing is silent:
the rank prints one typed line naming itself and the cause, and its peer's next call fails with a
RemoteCallError naming the partition and "unexpected connection". gloo and pyg_dist's stores survive the same
bytes (``bench_faults.py`` rows)."""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import pytest
import torch

from pyg_dist.testing import spawn_world

JUNK = (b"GET / HTTP/1.0\r\n\r\n", bytes(range(256)) * 256)


@dataclass
class Ping:
    x: torch.Tensor


def _rank(rank, world, folder):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.errors import RemoteCallError
    from pyg_dist.iface import listener_kinds

    rpc.register_callee("stray_ping", lambda m: m, replace=True)
    ctx = DistContext.from_env(num_partitions=world)
    rpc.init_rpc(ctx, timeout=60)
    path = os.path.join(folder, "listeners.json")
    if rank == 1:
        with open(path + ".tmp", "w") as fh:
            json.dump(listener_kinds()["tensorpipe"], fh)  # this test runs on tensorpipe
        os.replace(path + ".tmp", path)
        time.sleep(120)  # the junk ends this process
        return "survived"
    while not os.path.exists(path):
        time.sleep(0.05)
    rpc.call(1, "stray_ping", Ping(torch.ones(2)), timeout=20)  # rank 1 answers before the junk
    for payload in JUNK:
        for addr, port in json.load(open(path)):
            try:
                with socket.create_connection((addr, port), timeout=2) as s:
                    s.sendall(payload)
            except OSError:
                pass
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rpc.call(1, "stray_ping", Ping(torch.ones(2)), timeout=5)
            time.sleep(0.2)
    except RemoteCallError as exc:
        return str(exc)
    finally:
        rpc.shutdown_rpc(graceful=False)
    return "no error"


@pytest.mark.timeout(150)
def test_junk_to_tensorpipe_is_reported_by_the_rank_and_its_peer(tmp_path):
    logs = tmp_path / "logs"
    res = spawn_world(2, _rank, str(tmp_path), timeout=120, may_die=[1], log_dir=str(logs),
                      env={"PYG_DIST_TRANSPORT": "tensorpipe"})
    assert res[1] is None                                                # rank 1 died (SIGABRT)
    assert "partition 1" in res[0] and "unexpected connection" in res[0], res[0]
    own = (logs / "rank1.log").read_text(errors="replace")
    line = [ln for ln in own.splitlines() if "TransportAbortError" in ln]
    assert line and line[0].startswith("[rank 1] TransportAbortError: pyg_dist") and "unexpected connection" in \
        line[0], own[-2000:]


def _sockets_rank(rank, world, folder):
    """Rank 1 publishes its sockets listener and serves; rank 0 throws junk, a wrong secret and a flood of
    half-open connections at it while calling it, and checks every reply against the oracle."""
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.iface import listener_kinds
    from pyg_dist.rpc.sockets import auth

    rpc.register_callee("stray_ping", lambda m: Ping(m.x * 2), replace=True)
    ctx = DistContext.from_env(num_partitions=world)
    path = os.path.join(folder, "listeners.json")
    with rpc.rpc_session(ctx, timeout=60):
        if rank == 1:
            with open(path + ".tmp", "w") as fh:
                json.dump(listener_kinds()["sockets"], fh)
            os.replace(path + ".tmp", path)
            return "served"
        while not os.path.exists(path):
            time.sleep(0.05)
        (addr, port), = json.load(open(path))
        x = torch.arange(300_000, dtype=torch.float32)
        pending = rpc.call_async(1, "stray_ping", Ping(x), timeout=30)   # in flight while the junk arrives
        refused = []
        for payload in JUNK:
            with socket.create_connection((addr, port), timeout=5) as s:
                try:
                    s.sendall(payload)
                    s.settimeout(5)
                    refused.append(s.recv(100) == b"")                    # closed without a byte of answer
                except ConnectionResetError:                              # closed with our bytes unread
                    refused.append(True)
        from pyg_dist.rpc.state import live_state
        transport = live_state().transport
        stranger = auth.Keyring(transport.ns, 0, None)   # claims rank 0 with a key pair of its own
        with socket.create_connection((addr, port), timeout=5) as s:
            try:
                auth.connect(s, stranger, 1, transport.peers[1][2], "integrity", "rank 1")
                refused.append(False)
            except auth.HandshakeError:
                refused.append(True)
        idle = [socket.create_connection((addr, port), timeout=5) for _ in range(80)]  # over the handshake cap
        ok = torch.equal(pending.wait().x, x * 2)
        for _ in range(20):
            ok = ok and torch.equal(rpc.call(1, "stray_ping", Ping(x[:1000])).x, x[:1000] * 2)
        for s in idle:
            s.close()
        return refused, ok


@pytest.mark.timeout(150)
def test_junk_and_wrong_secrets_to_sockets_are_refused_and_the_job_carries_on(tmp_path):
    res = spawn_world(2, _sockets_rank, str(tmp_path), timeout=120, env={"PYG_DIST_TRANSPORT": "sockets"})
    refused, ok = res[0]
    assert refused == [True, True, True] and ok, res
    assert res[1] == "served"
