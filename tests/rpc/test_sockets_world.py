"""The ``sockets`` transport in real 2-rank worlds: the job's secret from a file, a wrong secret refused with a
typed error, a malformed frame from an authenticated peer refused without harming the serving process, a forked
child that does not hold its parent's listener, and the transport's name checked."""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import pytest
import torch

from pyg_dist.testing import spawn_world


@dataclass
class Vec:
    x: torch.Tensor


def _double(m: Vec) -> Vec:
    return Vec(m.x * 2)


def _secret_rank(rank, world, paths=None):
    if paths:  # each rank its own secret file
        os.environ["PYG_DIST_SECRET_FILE"] = paths[rank]
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.errors import RemoteCallError
    rpc.register_callee("sock_double", _double, replace=True)
    with rpc.rpc_session(DistContext.from_env(num_partitions=world), timeout=60):
        x = torch.arange(10.0)
        try:
            return torch.equal(rpc.call(1 - rank, "sock_double", Vec(x), timeout=20).x, 2 * x)
        except RemoteCallError as exc:
            rpc.shutdown_rpc(graceful=False)
            return str(exc)


def _secret_file(path, data: bytes) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)
    return str(path)


@pytest.mark.timeout(120)
def test_a_shared_secret_file_works_and_different_ones_are_refused(tmp_path):
    same = _secret_file(tmp_path / "s", b"a" * 32)
    assert spawn_world(2, _secret_rank, timeout=60, env={"PYG_DIST_SECRET_FILE": same,
                                                          "PYG_DIST_TRANSPORT": "sockets"}) == [True, True]
    other = _secret_file(tmp_path / "t", b"b" * 32)
    res = spawn_world(2, _secret_rank, [same, other], timeout=60, env={"PYG_DIST_TRANSPORT": "sockets"})
    assert all(isinstance(t, str) and "remote call 'sock_double' to partition" in t for t in res), res
    assert any("proof of the job's secret" in t for t in res), res   # the other may see its peer shut down first


def _malformed_rank(rank, world):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc import auth, frames
    from pyg_dist.rpc.state import live_state
    rpc.register_callee("sock_double", _double, replace=True)
    with rpc.rpc_session(DistContext.from_env(num_partitions=world), timeout=60):
        if rank == 1:
            return "served"
        transport = live_state().transport
        head, blobs = frames.encode(frames.REQUEST, 5, 1, (None, Vec(torch.arange(4.0))))
        lying = bytearray(head)
        lying[frames.HEADER.size:frames.HEADER.size + frames.ENTRY.size] = frames.ENTRY.pack(0, 1, 1 << 40)
        closed = []
        for raw in (bytes(lying), b"\x00" * frames.HEADER.size):
            with socket.create_connection(transport.addrs[1], timeout=10) as s:
                auth.connect(s, transport.secret, "rank 1")
                s.sendall(raw)
                s.settimeout(10)
                try:
                    closed.append(s.recv(1) == b"")
                except ConnectionResetError:
                    closed.append(True)
        x = torch.arange(100_000.0)
        return closed, torch.equal(rpc.call(1, "sock_double", Vec(x)).x, 2 * x)


@pytest.mark.timeout(120)
def test_a_malformed_frame_from_a_member_closes_that_connection_only():
    res = spawn_world(2, _malformed_rank, timeout=60, env={"PYG_DIST_TRANSPORT": "sockets"})
    assert res[0] == ([True, True], True) and res[1] == "served", res


def _fork_rank(rank, world, folder):
    import multiprocessing as mp

    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc.state import live_state
    rpc.register_callee("sock_double", _double, replace=True)
    ctx = DistContext.from_env(num_partitions=world)
    rpc.init_rpc(ctx, timeout=60)
    addr = live_state().transport.listener.getsockname()[:2]
    child = mp.get_context("fork").Process(target=time.sleep, args=(30,))
    child.start()  # a DataLoader worker, say: it must not keep this rank's listener open
    try:
        rpc.shutdown_rpc(graceful=True, timeout=60)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(addr, timeout=5).close()
        return "refused"
    finally:
        child.kill()
        child.join()


@pytest.mark.timeout(120)
def test_a_forked_child_does_not_keep_the_listener(tmp_path):
    assert spawn_world(2, _fork_rank, str(tmp_path), timeout=60,
                       env={"PYG_DIST_TRANSPORT": "sockets"}) == ["refused", "refused"]


def test_transport_names_are_checked(monkeypatch):
    from pyg_dist.context import DistContext
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.rpc import init_rpc
    from pyg_dist.rpc.transport import transport_name
    from pyg_dist.train.session import TrainConfig
    ctx = DistContext(rank=0, world_size=1, num_partitions=1)
    with pytest.raises(InvalidArgumentError, match="'transport' got 'pigeon'"):
        init_rpc(ctx, transport="pigeon")
    monkeypatch.setenv("PYG_DIST_TRANSPORT", "grpc")
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_TRANSPORT"):
        transport_name()
    monkeypatch.setenv("PYG_DIST_TRANSPORT", " TensorPipe ")
    assert transport_name() == "tensorpipe"
    monkeypatch.delenv("PYG_DIST_TRANSPORT")
    assert transport_name() == "sockets"
    with pytest.raises(InvalidArgumentError, match="transport"):
        TrainConfig("/tmp/x", transport="udp")
