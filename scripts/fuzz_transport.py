#!/usr/bin/env python
"""Bounded fuzz of the ``sockets`` transport against a serving process (2 ranks on loopback).

Rank 1 serves (a callee ``fuzz.echo`` and its counters); rank 0 attacks its listener:

- ``--handshakes`` random handshakes on fresh connections: random bytes, a valid greeting with a random
  proof, a greeting cut short, a wrong version, a stranger's key pair claiming rank 0, a claim of no member;
- ``--frames`` random frames on authenticated connections (rank 0 is a member: it seals what it sends with its
  session's key, so the malformed frames pass their integrity tag and reach the decoder): a valid request with
  1-8 random bytes flipped, a random header, a valid header with a random body, a frame cut short, a lying tensor
  table, an unknown callee id, a class that is not a message.

After every 500 cases rank 0 checks that the server still answers a real call exactly, and asks it for its
resident memory. Prints one table: cases per kind, how the server answered (an error reply, or a closed
connection), crashes, the server's RSS at the start and the end, and whether every check call succeeded.

    python scripts/fuzz_transport.py                      # 10,000 frames and 1,000 handshakes
    python scripts/fuzz_transport.py --frames 500 --handshakes 100
"""
from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass

import torch

ECHO, STATS, DONE = "fuzz.echo", "fuzz.stats", "fuzz.done"
#: Set in rank 1 when rank 0 says it is done (rank 1 serves until then, however long the fuzz takes).
_FINISHED = threading.Event()


@dataclass
class Blob:
    x: torch.Tensor


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _stats(_):
    from pyg_dist.rpc.state import live_state
    state = live_state()
    return Blob(torch.tensor([_rss_mb(), sum(state.transport.log.counts.values())]))


def _answer(sock: socket.socket, opener=None) -> str:
    """What the server did with what was sent: "reply" (an error reply came back), "closed", or "answered" (the
    frame was still valid: a flipped byte in tensor data). A frame that announces more bytes than were sent
    leaves the server waiting for them: after 0.2 s the fuzzer closes its sending side, and the server must
    then close the connection."""
    from pyg_dist.rpc.sockets import frames
    from pyg_dist.rpc.sockets.conn import PeerLost, read_frame
    sock.settimeout(0.2)
    try:
        if not sock.recv(1, socket.MSG_PEEK):
            return "closed"
    except socket.timeout:
        sock.shutdown(socket.SHUT_WR)
    except ConnectionResetError:
        return "closed"
    sock.settimeout(10)
    try:
        hdr, body, err = read_frame(sock, "server", opener)
    except (PeerLost, ConnectionResetError, frames.FrameError):
        return "closed"
    except socket.timeout:
        return "hung"
    if hdr.kind == frames.REPLY and getattr(body, "error", None):
        return "reply"
    return "answered"


def _handshake_case(rng: random.Random, transport):
    from pyg_dist.rpc.sockets import auth
    me, them = transport.ctx.rpc_rank, 1
    hello = auth.HELLO + bytes([auth.VERSION, 0]) + struct.pack("<II", me, them) + rng.randbytes(16)
    kind = rng.choice(["random bytes", "random proof", "cut greeting", "wrong version", "stranger's key",
                       "claims no member"])
    if kind == "random bytes":
        return kind, lambda s: s.sendall(rng.randbytes(rng.randint(1, 4096)))
    if kind == "random proof":
        return kind, lambda s: (s.sendall(hello), s.recv(49), s.sendall(rng.randbytes(32)))
    if kind == "cut greeting":
        return kind, lambda s: s.sendall(hello[:rng.randint(1, len(hello) - 1)])
    if kind == "wrong version":
        return kind, lambda s: s.sendall(hello[:4] + bytes([rng.choice([1, 3, 255])]) + hello[5:])
    if kind == "claims no member":
        return kind, lambda s: s.sendall(hello[:6] + struct.pack("<I", 1 << 20) + hello[10:])
    stranger = auth.Keyring(transport.ns, me, None)   # a key pair of its own, claiming rank 0
    return kind, lambda s: auth.connect(s, stranger, them, transport.peers[them][2], transport.mode, "server")


def _good_frame(rng: random.Random) -> bytes:
    from pyg_dist.rpc import callees, wire
    from pyg_dist.rpc.sockets import frames
    n = rng.randint(0, 300)
    head, blobs = frames.encode(frames.REQUEST, rng.randint(1, 1 << 40), callees.callee_id(ECHO),
                                (None, wire.pack(Blob(torch.arange(n, dtype=torch.float32)))))
    return head + b"".join(bytes(b) for b in blobs)


def _frame_case(rng: random.Random) -> tuple:
    from pyg_dist.rpc.sockets import frames
    kind = rng.choice(["flipped bytes", "random header", "random body", "cut short", "lying table",
                       "unknown callee", "not a message class"])
    raw, cut = bytearray(_good_frame(rng)), None
    if kind == "flipped bytes":
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == "random header":
        raw[:frames.HEADER.size] = rng.randbytes(frames.HEADER.size)
    elif kind == "random body":
        raw[frames.HEADER.size:] = rng.randbytes(len(raw) - frames.HEADER.size)
    elif kind == "cut short":
        cut = rng.randrange(len(raw) + 16)
    elif kind == "lying table":
        at = frames.HEADER.size
        raw[at:at + frames.ENTRY.size] = frames.ENTRY.pack(rng.randrange(256), rng.randrange(256),
                                                           rng.randrange(1 << 62))
    elif kind == "unknown callee":
        struct.pack_into("<I", raw, 16, rng.randrange(1 << 32))
    else:
        at = raw.index(b"fuzz_transport:Blob")
        raw[at:at + 19] = b"subprocess:Popen\x00\x00\x00"
    return kind, bytes(raw), cut


def rank_main(rank: int, world_size: int, opts: dict) -> dict:
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.rpc.sockets import auth
    from pyg_dist.rpc.state import live_state
    rpc.register_callee(ECHO, lambda m: Blob(m.x * 2), replace=True)
    rpc.register_callee(STATS, _stats, replace=True)
    rpc.register_callee(DONE, lambda m: _FINISHED.set() or m, replace=True)
    out: dict = {"cases": {}, "answers": {}, "checks_ok": 0, "checks": 0}
    with rpc.rpc_session(DistContext.from_env(num_partitions=2), timeout=120):
        if rank == 1:
            if not _FINISHED.wait(opts["timeout"]):
                raise TimeoutError(f"rank 0 did not finish the fuzz within {opts['timeout']} s")
            return out
        transport = live_state().transport
        addr = transport.addrs[1]
        rng = random.Random(opts["seed"])
        out["rss_start"] = rpc.call(1, STATS, Blob(torch.zeros(1))).x.tolist()
        out["rss_max"] = out["rss_start"][0]
        plan = [("handshake", i) for i in range(opts["handshakes"])] + [("frame", i) for i in range(opts["frames"])]
        for step, (what, _) in enumerate(plan):
            try:
                if what == "handshake":
                    s = socket.create_connection(addr, timeout=10)
                    kind, act = _handshake_case(rng, transport)
                    act(s)
                    s.shutdown(socket.SHUT_WR)
                    opener = None
                else:   # a member's authenticated connection: its malformed frames carry a valid tag
                    s, session = transport.dial_for_test(1)
                    kind, raw, cut = _frame_case(rng)
                    sealed = b"".join(bytes(p) for p in session.sealer.seal(raw, []))
                    s.sendall(sealed[:cut] if cut is not None else sealed)
                    opener = session.opener
                answer = _answer(s, opener)
            except (auth.HandshakeError, OSError):
                answer = "closed"
            finally:
                s.close()
            key = f"{what}: {kind}"
            out["cases"][key] = out["cases"].get(key, 0) + 1
            out["answers"].setdefault(key, {}).setdefault(answer, 0)
            out["answers"][key][answer] += 1
            if step % 500 == 499 or step == len(plan) - 1:
                x = torch.arange(1000, dtype=torch.float32)
                out["checks"] += 1
                out["checks_ok"] += int(torch.equal(rpc.call(1, ECHO, Blob(x), timeout=30).x, x * 2))
                out["rss_max"] = max(out["rss_max"], rpc.call(1, STATS, Blob(torch.zeros(1))).x[0].item())
        out["rss_end"] = rpc.call(1, STATS, Blob(torch.zeros(1))).x.tolist()
        rpc.call(1, DONE, Blob(torch.zeros(1)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", type=int, default=10_000)
    p.add_argument("--handshakes", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3000.0, help="seconds for the whole fuzz")
    args = p.parse_args(argv)
    import fuzz_transport  # spawned ranks import the function by module name (sys.path[0] = scripts/)
    from pyg_dist.testing import spawn_world
    t0 = time.time()
    res = spawn_world(2, fuzz_transport.rank_main, vars(args), timeout=args.timeout + 300,
                      env={"PYG_DIST_TRANSPORT": "sockets"})
    out = res[0]
    print(f"fuzz of the sockets transport: {args.handshakes:,} handshakes and {args.frames:,} frames against rank 1, "
          f"{time.time() - t0:.0f} s; both ranks exited 0 (spawn_world checks)")
    print("| case | sent | error reply | connection closed | hung | valid frame, answered |\n|---|---|---|---|---|---|")
    for key in sorted(out["cases"]):
        a = out["answers"][key]
        print(f"| {key} | {out['cases'][key]} | {a.get('reply', 0)} | {a.get('closed', 0)} | {a.get('hung', 0)} | "
              f"{a.get('answered', 0)} |")
    print(f"server RSS: {out['rss_start'][0]:.0f} MB at start, {out['rss_max']:.0f} MB max, {out['rss_end'][0]:.0f} MB "
          f"at end; refusals it logged (rate-limited lines, counted): {out['rss_end'][1]:.0f}; real calls checked "
          f"between cases: {out['checks_ok']}/{out['checks']} exact")
    return 0 if out["checks_ok"] == out["checks"] else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
