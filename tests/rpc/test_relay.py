"""A relay placed through the rendezvous store (issue 52, item 1), built for real.

The attacker can write the job's store but cannot read the secret file. It waits for rank 1's listener entry,
starts a relay to rank 1's real address, overwrites the entry with the relay's address (rank 1's own public key
kept, so the handshake passes through untouched), and adds 1.0 to every float32 tensor of rank 1's replies.

- default protection (``integrity``), no secret file: the handshake completes through the relay (it only forwards
  bytes), the first altered reply fails its tag, and rank 0's call fails with an error naming rank 1 and
  "integrity": nothing altered reaches the caller;
- with a secret file: the forged entry is refused at start-up (``TamperedStoreError`` naming the key);
- ``PYG_DIST_WIRE_PROTECTION=off``: the relay's +1.0 arrives (what every run got before): the relay works, so the
  first case's failure is the check's doing.
"""
from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from dataclasses import dataclass

import pytest
import torch

from pyg_dist.testing import free_port, spawn_world

KEY = "pyg_dist/attempt_0/rpc/pyg_dist/sockets/1/addr/1"


@dataclass
class Rows:
    x: torch.Tensor


def _rows(m: Rows) -> Rows:
    return Rows(m.x.clone())


class Relay:
    """Forwards one connection to ``target``; from the handshake on, adds 1.0 to the float32 tensors of every frame
    coming back (the frame's header, table and lengths untouched)."""

    def __init__(self, target):
        self.target, self.altered = target, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(1 << 16)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass

    def _replies(self, server, client):
        from pyg_dist.rpc.sockets import frames

        def take(n):
            return server.recv(n, socket.MSG_WAITALL) if n else b""
        try:
            client.sendall(take(49))                            # the server's handshake bytes, unchanged
            client.sendall(take(2))
            while True:
                head = take(frames.HEADER.size)
                if len(head) < frames.HEADER.size:
                    break
                hdr = frames.parse_header(head, "relay")
                table = take(hdr.tensors * frames.ENTRY.size)
                rest = take(8 * hdr.shape_ints + hdr.skeleton)
                blobs = []
                for i in range(hdr.tensors):
                    code, _, nbytes = frames.ENTRY.unpack_from(table, i * frames.ENTRY.size)
                    blob = take(nbytes)
                    if frames.DTYPES[code] == torch.float32 and nbytes:
                        blob = (torch.frombuffer(bytearray(blob), dtype=torch.float32) + 1.0).numpy().tobytes()
                        self.altered += 1
                    blobs.append(blob)
                tag = take(16) if os.environ.get("PYG_DIST_WIRE_PROTECTION") != "off" else b""
                client.sendall(head + table + rest + b"".join(blobs) + tag)
        except OSError:
            pass


def _rank(rank, world, done):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.errors import PyGDistError
    rpc.register_callee("relay_rows", _rows, replace=True)
    if rank == 0:
        time.sleep(4)                   # the attacker rewrites rank 1's entry before rank 0 reads it
    try:
        rpc.init_rpc(DistContext.from_env(num_partitions=world), timeout=60)
    except PyGDistError as exc:
        open(done, "w").close()
        return f"{type(exc).__name__}: {exc}"
    try:
        if rank == 1:                   # serves until rank 0 is done
            deadline = time.monotonic() + 60
            while not os.path.exists(done) and time.monotonic() < deadline:
                time.sleep(0.05)
            return "served"
        x = torch.arange(1000, dtype=torch.float32)
        try:
            got = rpc.call(1, "relay_rows", Rows(x), timeout=20).x
        except PyGDistError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "altered" if torch.equal(got, x + 1) else "exact" if torch.equal(got, x) else "other"
    finally:
        if rank == 0:
            open(done, "w").close()
        rpc.shutdown_rpc(graceful=False)


def _attack(store, done):
    """The store writer: waits for rank 1's entry, starts a relay to it, and publishes the relay instead."""
    store.wait([KEY], datetime.timedelta(seconds=60))
    host, port, pub, sig = bytes(store.get(KEY)).decode().split()
    relay = Relay((host, int(port)))
    store.set(KEY, f"127.0.0.1 {relay.port} {pub} {sig}")
    done.append(relay)


def _secret(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"s" * 32)
    path.chmod(0o600)
    return str(path)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["integrity", "secret file", "off"])
def test_a_relay_through_the_store_never_trains_on_altered_rows(tmp_path, mode):
    import torch.distributed as dist
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=60),
                          wait_for_workers=False)                         # plays torchrun's agent store
    env = {"MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}
    if mode == "off":
        env["PYG_DIST_WIRE_PROTECTION"] = "off"
        os.environ["PYG_DIST_WIRE_PROTECTION"] = "off"                  # the relay knows the frames carry no tag
    if mode == "secret file":
        env["PYG_DIST_SECRET_FILE"] = _secret(tmp_path)
    relays: list = []
    attacker = threading.Thread(target=_attack, args=(store, relays), daemon=True)
    attacker.start()
    try:
        res = spawn_world(2, _rank, str(tmp_path / "done"), timeout=120, env=env)
    finally:
        os.environ.pop("PYG_DIST_WIRE_PROTECTION", None)
    attacker.join(10)
    if mode == "integrity":
        assert relays and relays[0].altered >= 1, res
        assert res[0].startswith("RemoteCallError") and "rpc rank 1" in res[0] and "integrity" in res[0], res
        assert res[1] == "served"
    elif mode == "secret file":
        assert res[0].startswith("TamperedStoreError") and KEY.split("rpc/")[1] in res[0], res
        assert "signature does not match" in res[0], res
    else:
        assert res[0] == "altered" and res[1] == "served", res           # what every run got before
