"""The ``sockets`` transport's frames and handshake, in one process: exact round trips of every message the
callees exchange, every cap enforced before allocation, malformed frames refused with the peer and field named,
the secret's rules, and no pickle anywhere on the path."""
from __future__ import annotations

import ast
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops.hop import OneHop
from pyg_dist.rpc import settings, wire
from pyg_dist.rpc.callees import CallReply
from pyg_dist.rpc.sockets import auth, frames
from pyg_dist.rpc.sockets.conn import PeerLost, read_frame, send_frame
from pyg_dist.store.lookup import FeatureQuery, LookupReply, LookupRequest
from pyg_dist.store.quant import QuantRows


def _roundtrip(body, kind=frames.REQUEST):
    a, b = socket.socketpair()
    try:
        head, blobs = frames.encode(kind, 42, 7, body)
        t = threading.Thread(target=send_frame, args=(a, threading.Lock(), head, blobs))
        t.start()
        hdr, out, err = read_frame(b, "peer")
        t.join()
        assert err is None and hdr.call_id == 42 and hdr.callee == 7
        return out
    finally:
        a.close()
        b.close()


def _same(x, y):
    assert type(x) is type(y), (type(x), type(y))
    if isinstance(x, torch.Tensor):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y)
        for a, b in zip(x, y):
            _same(a, b)
    elif isinstance(x, dict):
        assert list(x) == list(y)
        for k in x:
            _same(x[k], y[k])
    elif hasattr(x, "__dataclass_fields__"):
        for f in x.__dataclass_fields__:
            _same(getattr(x, f), getattr(y, f))
    else:
        assert x == y


def test_every_message_of_the_callees_round_trips_exactly():
    ids = torch.arange(3000) * 7
    msgs = [
        OneHop(torch.arange(5000), torch.arange(5000) * 2 ** 33, torch.ones(5000, dtype=torch.int64)),
        wire.pack(OneHop(torch.arange(5000), torch.arange(5000), torch.ones(300, dtype=torch.int64))),
        LookupRequest(1, (FeatureQuery(("a", "to", "b"), ("x", "edge_attr"), ids, (0, 20993)),
                          FeatureQuery("_N", ("x",), ids[:0])), 3.5, "int8"),
        LookupReply(0, [{"x": [torch.rand(10, 4), torch.rand(3, 4).to(torch.bfloat16)]},
                        {"y": [QuantRows(torch.randint(-128, 127, (4, 3), dtype=torch.int8), torch.rand(4),
                                         torch.rand(4))]}], [None, torch.arange(4)]),
        CallReply(value={"k": (1, -2 ** 62, 2.5, None, True, b"\x00raw", "ü", torch.float16)}, served_by="r1"),
        CallReply(error="Traceback ...", served_by=""),
        ("part-abc", torch.tensor(3.0)),                                   # a 0-dim tensor
        [torch.empty(0, 5), torch.zeros(2, 0, dtype=torch.bool), torch.rand(2, 3).t()],  # empty, non-contiguous
        torch.arange(12, dtype=torch.float64).view(3, 4)[:, ::2],
    ]
    for msg in msgs:
        out = _roundtrip(msg)
        if isinstance(msg, list) and msg and isinstance(msg[-1], torch.Tensor) and not msg[-1].is_contiguous():
            msg = [m.contiguous() for m in msg]
        _same(msg if not isinstance(msg, torch.Tensor) else msg.contiguous(), out)


def test_what_frames_cannot_carry_is_refused_by_name():
    class Local:  # not a dataclass
        pass
    for bad, word in ((Local(), "Local"), ({1, 2}, "set"), (2 ** 70, "int64"), (torch.rand(2).numpy(), "ndarray")):
        with pytest.raises(InvalidArgumentError, match=word):
            frames.encode(frames.REQUEST, 1, 1, bad)


def _frame_bytes(body=("p", OneHop(torch.arange(4), torch.arange(4), torch.ones(4, dtype=torch.int64)))):
    head, blobs = frames.encode(frames.REQUEST, 1, 2, body)
    return bytearray(head + b"".join(bytes(b) for b in blobs))


def _read(raw: bytes):
    a, b = socket.socketpair()
    try:
        a.sendall(raw)
        a.shutdown(socket.SHUT_WR)
        return read_frame(b, "rank 9")
    finally:
        a.close()
        b.close()


def _patch_header(raw: bytearray, field: int, value) -> bytearray:
    parts = list(frames.HEADER.unpack_from(raw))
    parts[field] = value
    raw[:frames.HEADER.size] = frames.HEADER.pack(*parts)
    return raw


@pytest.mark.parametrize("field,value,named", [
    (0, b"XXXX", "magic"), (1, 9, "version"), (2, 77, "kind"), (6, 1 << 20, "tensor count"),
    (8, 1 << 30, "skeleton bytes"), (9, 1 << 50, "tensor bytes"), (7, 100, "shape ints")])
def test_header_lies_are_refused_before_allocation(field, value, named):
    raw = _patch_header(_frame_bytes(), field, value)
    with pytest.raises((frames.FrameError, PeerLost)) as info:
        _read(bytes(raw))
    if isinstance(info.value, frames.FrameError):
        assert info.value.peer == "rank 9" and named in str(info.value), info.value
    else:  # a count under its cap but larger than what was sent: the peer closed before sending it
        assert named in ("shape ints",)


def test_a_tensor_table_that_disagrees_with_itself_is_refused():
    raw = _frame_bytes()
    at = frames.HEADER.size
    code, ndim, nbytes = frames.ENTRY.unpack_from(raw, at)
    raw[at:at + frames.ENTRY.size] = frames.ENTRY.pack(code, ndim, nbytes + 8)    # bytes != shape x dtype
    with pytest.raises(frames.FrameError, match="tensor 0 byte count"):
        _read(bytes(raw))
    raw = _frame_bytes()
    raw[at:at + frames.ENTRY.size] = frames.ENTRY.pack(200, ndim, nbytes)         # unknown dtype
    with pytest.raises(frames.FrameError, match="dtype code"):
        _read(bytes(raw))


def test_a_bad_skeleton_is_a_typed_error_and_the_stream_stays_in_step():
    head, blobs = frames.encode(frames.REQUEST, 1, 2, ("p", OneHop(torch.arange(4), torch.arange(4), torch.arange(4))))
    name = b"pyg_dist.ops.hop:OneHop"
    raw = bytearray(head + b"".join(bytes(b) for b in blobs))
    at = raw.index(name)
    raw[at:at + len(name)] = b"pyg_dist.ops.hop:NotOne"                          # same length, unknown class
    hdr, body, err = _read(bytes(raw) + bytes(_frame_bytes()))
    assert body is None and isinstance(err, frames.FrameError) and "message class" in str(err)
    raw2 = bytearray(raw)
    raw2[at:at + len(name)] = b"os:system\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"[:len(name)]
    _, body, err = _read(bytes(raw2))
    assert body is None and "message class" in str(err)                          # never a function, never imported


def test_frame_cap_follows_the_variable(monkeypatch):
    monkeypatch.setenv("PYG_DIST_FRAME_MAX_MB", "0.001")
    head, blobs = frames.encode(frames.REPLY, 1, 2, torch.zeros(1000))
    with pytest.raises(frames.FrameError, match="PYG_DIST_FRAME_MAX_MB"):
        _read(head + b"".join(bytes(b) for b in blobs))
    monkeypatch.setenv("PYG_DIST_FRAME_MAX_MB", "lots")
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_FRAME_MAX_MB"):
        settings.frame_max_bytes()


def test_random_frames_never_crash_and_never_overallocate():
    gen = torch.Generator().manual_seed(0)
    good = bytes(_frame_bytes())
    for i in range(2000):
        raw = bytearray(good)
        for _ in range(1 + i % 4):  # flip a few bytes anywhere
            raw[int(torch.randint(0, len(raw), (1,), generator=gen))] = int(torch.randint(0, 256, (1,), generator=gen))
        try:
            _read(bytes(raw))
        except (frames.FrameError, PeerLost):
            pass


def _handshake(server_ring, client_ring, claimed=None, dialed=None, server_mode="integrity",
               client_mode="integrity", server_public=None):
    """Runs one handshake over a socket pair: (client's session or error, server's session or error)."""
    a, b = socket.socketpair()
    box: list = []
    table = {client_ring.rank: client_ring.public}

    def serve():
        try:
            box.append(auth.accept(b, server_ring, table.__getitem__, server_mode, "client", timeout=5))
        except auth.HandshakeError as exc:
            box.append(exc)
        finally:
            b.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        mine = auth.connect(a, client_ring, server_ring.rank if dialed is None else dialed,
                            server_ring.public if server_public is None else server_public, client_mode, "server",
                            timeout=5)
    except auth.HandshakeError as exc:
        mine = exc
    a.close()
    t.join(10)
    return mine, box[0]


def test_handshake_proves_both_ranks_and_refuses_everything_else():
    s, c = auth.Keyring("ns/1", 1, b"s" * 32), auth.Keyring("ns/1", 0, b"s" * 32)
    mine, theirs = _handshake(s, c)
    assert isinstance(mine, auth.Session) and isinstance(theirs, auth.Session)
    assert (mine.peer_rank, theirs.peer_rank) == (1, 0)
    # each direction has its own key, and the two ends agree on it
    assert mine.sealer.key == theirs.opener.key and theirs.sealer.key == mine.opener.key
    assert mine.sealer.key != theirs.sealer.key
    cases = [
        (auth.Keyring("ns/1", 0, b"t" * 32), {}, "proof"),                  # another secret file
        (auth.Keyring("ns/2", 0, b"s" * 32), {}, "proof"),                  # another generation / job
        (auth.Keyring("ns/1", 0, None), {}, "proof"),                       # no secret where the job has one
        (c, {"dialed": 7}, "dialed rpc rank 7"),                            # a stale address reaches another rank
        (c, {"server_public": auth.Keyring("ns/1", 1, b"s" * 32).public}, "proof"),   # not the rank published
        (c, {"client_mode": "encrypt"}, "PYG_DIST_WIRE_PROTECTION"),         # both ends must protect alike
    ]
    for client, kw, word in cases:
        mine, theirs = _handshake(s, client, **kw)
        errors = [e for e in (mine, theirs) if isinstance(e, auth.HandshakeError)]
        assert errors and any(word in str(e) for e in errors), (word, mine, theirs)
        assert not isinstance(mine, auth.Session) or not isinstance(theirs, auth.Session)


def test_a_stranger_who_read_every_public_key_cannot_claim_a_rank():
    """A store reader knows every member's public key, not its private key: claiming rank 0 with it fails."""
    s, member = auth.Keyring("ns/1", 1, None), auth.Keyring("ns/1", 0, None)
    stranger = auth.Keyring("ns/1", 0, None)   # its own key pair, claiming rank 0
    a, b = socket.socketpair()
    box: list = []
    t = threading.Thread(target=lambda: box.append(_accept_or_error(b, s, {0: member.public})))
    t.start()
    with pytest.raises(auth.HandshakeError, match="its proof is wrong"):   # the server's proof is for rank 0 only
        auth.connect(a, stranger, 1, s.public, "integrity", "server", timeout=5)
    a.close()
    t.join(10)
    assert isinstance(box[0], auth.HandshakeError), box
    # ... and a stranger that sends the best proof it can compute anyway is refused by the server
    a, b = socket.socketpair()
    box = []
    t = threading.Thread(target=lambda: box.append(_accept_or_error(b, s, {0: member.public})))
    t.start()
    hello = auth.HELLO + bytes([auth.VERSION, 0]) + struct.pack("<II", 0, 1) + os.urandom(16)
    a.sendall(hello)
    reply = a.recv(49, socket.MSG_WAITALL)
    key = stranger.pair_key(s.public, member.public, s.public)
    a.sendall(auth._mac(key, b"client", hello + reply[:17]))
    t.join(10)
    a.close()
    assert isinstance(box[0], auth.HandshakeError) and "wrong proof for rpc rank 0" in str(box[0]), box


def _accept_or_error(sock, ring, table):
    try:
        return auth.accept(sock, ring, table.__getitem__, "integrity", "client", timeout=5)
    except auth.HandshakeError as exc:
        return exc
    finally:
        sock.close()


def test_junk_is_refused_after_a_few_bytes():
    ring = auth.Keyring("ns/1", 1, None)
    hello = auth.HELLO + bytes([auth.VERSION, 0]) + struct.pack("<II", 0, 1)
    for junk in (b"GET / HTTP/1.0\r\n\r\n", os.urandom(65536), b"PGDH\x07" + b"\x00" * 60,
                 hello + b"\x00" * 16):   # a well-formed greeting claiming a rank that has no key here
        a, b = socket.socketpair()
        a.sendall(junk[:4096])
        with pytest.raises(auth.HandshakeError):
            auth.accept(b, ring, {}.__getitem__, "integrity", "scanner", timeout=2)
        a.close()
        b.close()
    a, b = socket.socketpair()  # a silent connection: refused after the handshake timeout
    with pytest.raises(auth.HandshakeCut, match="within"):
        auth.accept(b, ring, {}.__getitem__, "integrity", "idle", timeout=0.2)
    a.close()
    b.close()


def test_the_handshake_deadline_covers_the_whole_handshake_not_each_read():
    """A peer trickling one byte every 0.1 s never waits out a per-read timeout; the whole-handshake bound ends it."""
    ring = auth.Keyring("ns/1", 1, None)
    a, b = socket.socketpair()
    stop = threading.Event()

    def trickle():
        for byte in (auth.HELLO + bytes([auth.VERSION, 0]) + b"\x00" * 40):
            if stop.is_set():
                return
            try:
                a.send(bytes([byte]))
            except OSError:
                return
            time.sleep(0.1)

    t = threading.Thread(target=trickle)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(auth.HandshakeCut, match="did not end within 1 s"):
        auth.accept(b, ring, {}.__getitem__, "integrity", "slow", timeout=1.0)
    assert time.monotonic() - t0 < 2.0
    stop.set()
    t.join(5)
    a.close()
    b.close()


def _sealed_pair(mode):
    from pyg_dist.rpc.sockets.seal import Opener, Sealer
    key = os.urandom(32)
    return Sealer(key, mode), Opener(key, mode, "rank 3")


def _sealed_bytes(sealer, body):
    head, blobs = frames.encode(frames.REPLY, 5, 2, body)
    return b"".join(bytes(p) for p in sealer.seal(head, blobs))


def _read_sealed(raw: bytes, opener):
    a, b = socket.socketpair()
    try:
        def send():
            try:
                a.sendall(raw)
                a.shutdown(socket.SHUT_WR)
            except OSError:   # the reader refused the frame and closed first
                pass
        t = threading.Thread(target=send)
        t.start()
        out = read_frame(b, "rank 3", opener)
        t.join()
        return out
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("mode", ["integrity", "encrypt", "off"])
def test_sealed_frames_round_trip_in_every_mode(mode):
    sealer, opener = _sealed_pair(mode)
    x = torch.rand(300_000)  # over the 1 MiB scratch of the encrypted path
    for i in range(3):
        raw = _sealed_bytes(sealer, {"x": x + i, "n": i})
        assert (len(raw) - len(_frame_bytes({"x": x + i, "n": i}))) == (0 if mode == "off" else 16)
        hdr, body, err = _read_sealed(raw, opener)
        assert err is None and torch.equal(body["x"], x + i) and body["n"] == i
    if mode == "encrypt":   # the rows do not cross in the clear
        assert bytes(x[:64].numpy().tobytes()) not in _sealed_bytes(sealer, {"x": x, "n": 0})


@pytest.mark.parametrize("mode", ["integrity", "encrypt"])
def test_any_altered_byte_a_replay_or_a_reorder_fails_the_tag(mode):
    from pyg_dist.rpc.sockets.seal import IntegrityError
    x = torch.arange(2000, dtype=torch.float32)
    sealer, _ = _sealed_pair(mode)
    good = _sealed_bytes(sealer, {"x": x})
    gen = torch.Generator().manual_seed(1)
    for i in range(60):   # one flipped bit anywhere after the header's lengths: never accepted
        raw = bytearray(good)
        at = int(torch.randint(frames.HEADER.size, len(raw), (1,), generator=gen)) if i else 20   # 20: call id
        raw[at] ^= 1 << int(torch.randint(0, 8, (1,), generator=gen))
        opener = _sealed_pair(mode)[1]
        opener.key = sealer.key
        with pytest.raises((IntegrityError, frames.FrameError, PeerLost)):
            _read_sealed(bytes(raw), opener)
    sealer, opener = _sealed_pair(mode)
    first, second = _sealed_bytes(sealer, {"x": x}), _sealed_bytes(sealer, {"x": x + 1})
    assert _read_sealed(first, opener)[1]["x"].equal(x)
    with pytest.raises(IntegrityError, match="rank 3.*integrity"):   # the first frame again: a replay
        _read_sealed(first, opener)
    sealer, opener = _sealed_pair(mode)
    first, second = _sealed_bytes(sealer, {"x": x}), _sealed_bytes(sealer, {"x": x + 1})
    with pytest.raises(IntegrityError):                               # the second first: a reorder
        _read_sealed(second, opener)


def test_a_relay_adding_one_to_every_float_is_caught():
    """The attack of the issue, on the bytes: +1.0 to every float32 of a reply, lengths and header untouched."""
    from pyg_dist.rpc.sockets.seal import IntegrityError
    sealer, opener = _sealed_pair("integrity")
    x = torch.rand(1000)
    head, blobs = frames.encode(frames.REPLY, 5, 2, {"x": x})
    parts = sealer.seal(head, blobs)
    altered = [parts[0], (torch.frombuffer(bytearray(parts[1]), dtype=torch.float32) + 1).numpy().tobytes(), parts[2]]
    with pytest.raises(IntegrityError, match="altered on the way"):
        _read_sealed(b"".join(bytes(p) for p in altered), opener)


def test_secret_file_rules(tmp_path, monkeypatch):
    f = tmp_path / "secret"
    f.write_bytes(b"x" * 40)
    f.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_SECRET_FILE.*only its owner"):
        settings.read_secret_file(str(f))
    f.chmod(0o600)
    assert settings.read_secret_file(str(f)) == b"x" * 40
    f.write_bytes(b"short")
    with pytest.raises(InvalidArgumentError, match="at least 16"):
        settings.read_secret_file(str(f))
    with pytest.raises(InvalidArgumentError, match="readable"):
        settings.read_secret_file(str(tmp_path / "missing"))


def test_a_fifo_or_a_folder_as_the_secret_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    t0 = time.monotonic()
    with pytest.raises(InvalidArgumentError, match="a regular file.*a FIFO"):   # no writer: open() would wait
        settings.read_secret_file(str(fifo))
    assert time.monotonic() - t0 < 1.0
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    with pytest.raises(InvalidArgumentError, match="a folder"):
        settings.read_secret_file(str(folder))


def test_decoding_a_frame_never_imports_a_module():
    """A class name naming a module's submodule that is not imported yet (``torch_geometric.contrib``, which
    ``torch_geometric`` imports lazily on attribute access) is refused without importing it."""
    import subprocess
    import sys
    probe = (
        "import sys, torch, torch_geometric\n"
        "from pyg_dist.rpc.sockets import frames\n"
        "assert 'torch_geometric.contrib' not in sys.modules\n"
        "for name in ('torch_geometric:contrib.nn.PRBCDAttack', 'torch_geometric:contrib', 'json:decoder.JSONDecoder',"
        " 'torch_geometric:__getattr__'):\n"
        "    head, blobs = frames.encode(frames.REQUEST, 1, 1, ('p', 1))\n"
        "    sk = b'D' + len(name).to_bytes(4, 'little') + name.encode() + (0).to_bytes(4, 'little')\n"
        "    try:\n"
        "        frames.decode(sk, [], 'peer')\n"
        "    except frames.FrameError as e:\n"
        "        assert 'message class' in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('decoded ' + name)\n"
        "print(sorted(m for m in ('torch_geometric.contrib', 'json.decoder') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = out.stdout.strip().splitlines()[-1]
    assert "torch_geometric.contrib" not in imported, imported


FORBIDDEN = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "copyreg", "joblib"}


def test_no_pickle_marshal_or_eval_on_the_sockets_path():
    """The modules a frame passes through never import a deserialiser of code, nor call eval/exec."""
    import pyg_dist.rpc as pkg
    root = Path(pkg.__file__).parent
    names = [f"sockets/{n}" for n in ("frames", "conn", "auth", "seal", "meet", "transport", "__init__")]
    names += ["callees", "wire", "transport", "state", "settings", "join", "leave", "lifecycle", "runtime"]
    for name in names:
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                mods = {(node.module or "").split(".")[0]}
            else:
                mods = set()
            assert not mods & FORBIDDEN, (name, mods)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile", "__import__"), (name, node.func.id)
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("loads", "load", "Unpickler", "import_module"), (name, node.attr)


def test_header_layout_is_what_the_docs_say():
    assert frames.HEADER.size == 4 + 1 + 1 + 2 + 8 + 4 + 4 + 4 + 4 + 8
    assert frames.ENTRY.size == 16
    assert struct.calcsize("<q") == 8
