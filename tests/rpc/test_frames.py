"""The ``sockets`` transport's frames and handshake, in one process: exact round trips of every message the
callees exchange, every cap enforced before allocation, malformed frames refused with the peer and field named,
the secret's rules, and no pickle anywhere on the path."""
from __future__ import annotations

import ast
import os
import socket
import struct
import threading
from pathlib import Path

import pytest
import torch

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.ops.hop import OneHop
from pyg_dist.rpc import auth, frames, wire
from pyg_dist.rpc.callees import CallReply
from pyg_dist.rpc.conn import PeerLost, read_frame, send_frame
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
        frames.frame_max_bytes()


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


def test_handshake_mutual_and_wrong_secrets_refused():
    def serve(sock, secret, box):
        try:
            auth.accept(sock, secret, "client")
            box.append("ok")
        except auth.HandshakeError as exc:
            box.append(str(exc))
        finally:
            sock.close()

    for server_secret, client_secret, ok in ((b"s" * 32, b"s" * 32, True), (b"s" * 32, b"t" * 32, False)):
        a, b = socket.socketpair()
        box: list = []
        t = threading.Thread(target=serve, args=(b, server_secret, box))
        t.start()
        if ok:
            auth.connect(a, client_secret, "server")
        else:
            with pytest.raises(auth.HandshakeError, match="proof"):
                auth.connect(a, client_secret, "server")
        a.close()
        t.join(5)
        assert (box == ["ok"]) == ok, box


def test_junk_is_refused_after_a_few_bytes():
    for junk in (b"GET / HTTP/1.0\r\n\r\n", os.urandom(65536), b"PGDH\x07" + b"\x00" * 60):
        a, b = socket.socketpair()
        a.sendall(junk[:4096])
        with pytest.raises(auth.HandshakeError):
            auth.accept(b, b"k" * 32, "scanner", timeout=2)
        a.close()
        b.close()
    a, b = socket.socketpair()  # a silent connection: refused after the handshake timeout
    with pytest.raises(auth.HandshakeError, match="within"):
        auth.accept(b, b"k" * 32, "idle", timeout=0.2)
    a.close()
    b.close()


def test_secret_file_rules(tmp_path, monkeypatch):
    f = tmp_path / "secret"
    f.write_bytes(b"x" * 40)
    f.chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="PYG_DIST_SECRET_FILE.*only its owner"):
        auth.read_secret_file(str(f))
    f.chmod(0o600)
    assert auth.read_secret_file(str(f)) == b"x" * 40
    f.write_bytes(b"short")
    with pytest.raises(InvalidArgumentError, match="at least 16"):
        auth.read_secret_file(str(f))
    with pytest.raises(InvalidArgumentError, match="readable"):
        auth.read_secret_file(str(tmp_path / "missing"))


FORBIDDEN = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "copyreg", "joblib"}


def test_no_pickle_marshal_or_eval_on_the_sockets_path():
    """The modules a frame passes through never import a deserialiser of code, nor call eval/exec."""
    import pyg_dist.rpc as pkg
    root = Path(pkg.__file__).parent
    for name in ("frames", "conn", "auth", "sockets", "callees", "wire", "transport", "state"):
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
