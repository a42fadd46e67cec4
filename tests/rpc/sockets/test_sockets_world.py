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
    from pyg_dist.errors import PeerFailedError, RemoteCallError, TamperedStoreError
    rpc.register_callee("sock_double", _double, replace=True)
    try:
        rpc.init_rpc(DistContext.from_env(num_partitions=world), timeout=60)
    except (TamperedStoreError, PeerFailedError) as exc:   # the other's entry fails its signature check
        return f"{type(exc).__name__}: {exc}"
    ok = False
    try:
        x = torch.arange(10.0)
        out = torch.equal(rpc.call(1 - rank, "sock_double", Vec(x), timeout=20).x, 2 * x)
        ok = True
        return out
    except RemoteCallError as exc:
        return str(exc)
    finally:
        rpc.shutdown_rpc(graceful=ok)


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
    # refused at start-up, before anything dials: a rank names the other's store entry and the secret file (rank 1
    # may find the store gone first: rank 0, its host, refused rank 1's entry and ended; that is typed too)
    for rank, text in enumerate(res):
        if rank == 1 and text.startswith("PeerFailedError"):
            assert "rendezvous store" in text and "stopped answering" in text, res
            continue
        assert text.startswith("TamperedStoreError") and f"pyg_dist/sockets/1/addr/{1 - rank}" in text, res
        assert "does not match this job's secret file" in text and "PYG_DIST_SECRET_FILE" in text, res


def _malformed_rank(rank, world):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc.sockets import frames
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
            s, _ = transport.dial_for_test(1)   # an authenticated member's connection
            with s:
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
    from pyg_dist.rpc.settings import transport_name
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


def _member_rank(rank, world):
    """Rank 0, a member with keys, tries to hold rank 1's memory: more connections than its share, and a frame
    whose header announces bytes that never come."""
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc.sockets import conn, frames
    from pyg_dist.rpc.sockets import transport as sockets
    from pyg_dist.rpc.state import live_state
    conn.FRAME_BASE_S = 1.0            # rank 1's frame deadline: 1 s plus 2 MiB/s of announced bytes
    rpc.register_callee("sock_double", _double, replace=True)
    with rpc.rpc_session(DistContext.from_env(num_partitions=world), timeout=60):
        if rank == 1:
            time.sleep(12)
            return "served"
        transport = live_state().transport
        conns = [transport.dial_for_test(1)[0] for _ in range(sockets.MAX_PER_PEER + 2)]
        time.sleep(0.5)
        closed = []
        for s in conns:
            s.settimeout(0.5)
            try:
                closed.append(s.recv(1) == b"")
            except socket.timeout:
                closed.append(False)
        s, session = transport.dial_for_test(1)
        head, _ = frames.encode(frames.REQUEST, 9, 1, (None, Vec(torch.zeros(1 << 18))))  # 1 MiB announced
        s.sendall(head)                                                   # ... and never sent
        t0 = time.monotonic()
        s.settimeout(10)
        try:
            cut = s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            cut = True
        stalled_after = time.monotonic() - t0
        x = torch.arange(1000.0)
        ok = torch.equal(rpc.call(1, "sock_double", Vec(x)).x, 2 * x)     # the member's own calls still work
        return closed, cut, stalled_after, ok


@pytest.mark.timeout(120)
def test_a_member_cannot_hold_connections_or_a_stalled_frame():
    res = spawn_world(2, _member_rank, timeout=90, env={"PYG_DIST_TRANSPORT": "sockets"})
    closed, cut, stalled_after, ok = res[0]
    assert closed[:2] == [True, True] and not any(closed[2:]), closed     # the oldest beyond MAX_PER_PEER close
    assert cut and 0.8 < stalled_after < 5, (cut, stalled_after)           # 1 s + 0.5 s for the 1 MiB announced
    assert ok and res[1] == "served"
