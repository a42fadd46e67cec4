"""Frames on a socket: read one (caps checked before any allocation, tensors received in place), send one.

Used by both ends of the ``sockets`` transport (:mod:`.sockets`). Reading blocks in ``recv_into`` with
``MSG_WAITALL`` (the GIL is released while the kernel fills the tensor's own memory); a frame's small parts
travel in one ``sendall``, its large tensors each in their own, straight from the tensor's memory.

Example:
    >>> import socket, threading, torch
    >>> from pyg_dist.rpc import frames
    >>> a, b = socket.socketpair()
    >>> head, blobs = frames.encode(frames.REPLY, 3, 0, {"x": torch.arange(4.)})
    >>> send_frame(a, threading.Lock(), head, blobs)
    >>> hdr, body, err = read_frame(b, "peer")
    >>> hdr.call_id, body["x"].tolist(), err
    (3, [0.0, 1.0, 2.0, 3.0], None)
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import frames
from .auth import Session
from .seal import IntegrityError, Opener, Sealer

LOG = logging.getLogger("pyg_dist.rpc")
_SMALL = 64 << 10


class PeerLost(ConnectionError):
    """The connection to a peer closed or broke (the peer died, shut down, or sent something unreadable)."""


def recv_into(sock: socket.socket, view: memoryview, peer: str) -> None:
    """Fills ``view`` from ``sock``; :class:`PeerLost` when the peer closes first."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got, socket.MSG_WAITALL)
        if k == 0:
            raise PeerLost(f"{peer} closed the connection")
        got += k


def recv_bytes(sock: socket.socket, n: int, peer: str) -> bytes:
    """``n`` bytes from ``sock`` (:class:`PeerLost` when the peer closes first)."""
    buf = bytearray(n)
    if n:
        recv_into(sock, memoryview(buf), peer)
    return bytes(buf)


def read_frame(sock: socket.socket, peer: str, opener: Optional[Opener] = None,
               on_header: Optional[Callable[[frames.Header], None]] = None,
               ) -> Tuple[frames.Header, Any, Optional[frames.FrameError]]:
    """The next frame: its header, its message and ``None``; or its header, ``None`` and the
    :class:`~pyg_dist.rpc.frames.FrameError` of a message that could not be built (the stream stays in step).

    With an ``opener`` (:mod:`.seal`) the frame's tag is checked before its message is decoded: nothing of a frame
    that fails reaches the caller. ``on_header(header)`` runs once the header is in (the transport starts the
    frame's deadline there).

    Raises:
        FrameError: the header or the tensor table breaks the format or a cap, or the frame fails its integrity
            check (:class:`~pyg_dist.rpc.seal.IntegrityError`): the stream is lost, close it.
        PeerLost: the peer closed the connection.
    """
    raw = recv_bytes(sock, frames.HEADER.size, peer)
    hdr = frames.parse_header(raw, peer)
    if on_header is not None:
        on_header(hdr)
    if opener is not None:
        opener.begin(raw)
    a = hdr.tensors * frames.ENTRY.size
    b = a + 8 * hdr.shape_ints
    rest = recv_bytes(sock, b + hdr.skeleton, peer)
    if opener is not None:
        rest = opener.rest(rest)
    try:
        specs = frames.parse_table(hdr, rest[:a], rest[a:b], peer)
    except frames.FrameError:
        if opener is not None and opener.encrypts:  # an honest member's table decrypts: this one was altered
            raise IntegrityError(peer) from None
        raise
    tensors = []
    for spec in specs:
        t = frames.empty_tensor(spec)
        if spec.nbytes:
            _fill(sock, frames.tensor_buffer(t), peer, opener)
        tensors.append(t)
    if opener is not None:
        opener.finish(recv_bytes(sock, opener.tag_size, peer))
    try:
        return hdr, frames.decode(rest[b:], tensors, peer), None
    except frames.FrameError as exc:
        return hdr, None, exc


def _fill(sock: socket.socket, view: memoryview, peer: str, opener: Optional[Opener]) -> None:
    """A tensor's bytes into ``view``: in place (authenticated there), or decrypted through the opener's scratch."""
    if opener is None or not opener.encrypts:
        recv_into(sock, view, peer)
        if opener is not None:
            opener.absorb(view)
        return
    at = 0
    while at < len(view):
        chunk = opener.scratch(min(len(view) - at, 1 << 20))
        recv_into(sock, chunk, peer)
        opener.decrypt_into(chunk, view[at:at + len(chunk)])
        at += len(chunk)


def send_frame(sock: socket.socket, lock: threading.Lock, head: bytes, blobs: List[memoryview],
               sealer: Optional[Sealer] = None) -> None:
    """Sends one frame (under ``lock``: frames of concurrent calls never interleave, and a ``sealer`` numbers
    them in the order they leave)."""
    with lock:
        parts: List[Any] = sealer.seal(head, blobs) if sealer is not None else [head, *blobs]
        if sum(memoryview(p).nbytes for p in parts) <= _SMALL:
            sock.sendall(b"".join(parts))
            return
        for part in parts:
            if memoryview(part).nbytes:
                sock.sendall(part)


def close_quietly(sock: Optional[socket.socket]) -> None:
    """Shuts ``sock`` down (waking a thread blocked on it) and closes it; errors ignored."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


#: A frame must arrive whole within this many seconds of its header, plus its bytes at :data:`FRAME_MIN_RATE`.
FRAME_BASE_S = 60.0
FRAME_MIN_RATE = 2 << 20


def frame_deadline(nbytes: int) -> float:
    """Seconds a frame of ``nbytes`` tensor bytes may take to arrive once its header did."""
    return FRAME_BASE_S + nbytes / FRAME_MIN_RATE


class Conn:
    """One connected, authenticated socket, its session, and the calls waiting for a reply on it."""

    def __init__(self, sock: socket.socket, session: Session):
        self.sock, self.session, self.peer = sock, session, session.peer
        self.send_lock = threading.Lock()
        self.pending: Dict[int, Tuple[torch.futures.Future, float]] = {}
        self.lock = threading.Lock()
        self.broken = False
        self.frame_due: Optional[float] = None  # the frame being read must be whole by then
        self.stalled = False

    def send(self, head: bytes, blobs: List[memoryview]) -> None:
        """Sends one frame, sealed under this connection's key."""
        send_frame(self.sock, self.send_lock, head, blobs, self.session.sealer)

    def read(self) -> Tuple[frames.Header, Any, Optional[frames.FrameError]]:
        """The next frame, checked (:func:`read_frame`), within its deadline once its header is in."""
        try:
            return read_frame(self.sock, self.peer, self.session.opener, self._started)
        except PeerLost:
            if self.stalled:
                raise PeerLost(f"{self.peer} did not send a frame whole within its deadline (a stalled or "
                               "trickling peer); closed that connection") from None
            raise
        finally:
            self.frame_due = None

    def _started(self, hdr: frames.Header) -> None:
        self.frame_due = time.monotonic() + frame_deadline(hdr.payload)

    def pop(self, call_id: int) -> Optional[torch.futures.Future]:
        """The future waiting for reply ``call_id``, removed (``None``: it timed out meanwhile)."""
        with self.lock:
            entry = self.pending.pop(call_id, None)
        return None if entry is None else entry[0]

    def fail_all(self, exc: Exception) -> None:
        """Fails every pending call with ``exc`` and closes the connection."""
        with self.lock:
            self.broken = True
            pending, self.pending = self.pending, {}
        for fut, _ in pending.values():
            fut.set_exception(exc)
        close_quietly(self.sock)

    def overdue(self, now: float) -> List[Tuple[torch.futures.Future, float]]:
        """The pending calls past their deadline at ``now``, removed."""
        with self.lock:
            late = [cid for cid, (_, deadline) in self.pending.items() if deadline < now]
            return [self.pending.pop(cid) for cid in late]


class RateLimitedLog:
    """One WARNING line per kind of event every ``every`` seconds, with the count of those it held back
    (a port scanner cannot flood the log)."""

    def __init__(self, every: float = 10.0):
        self.every = every
        self._last: Dict[str, float] = {}
        self._held: Dict[str, int] = {}
        self._lock = threading.Lock()
        self.counts: Dict[str, int] = {}

    def note(self, kind: str, text: str) -> None:
        """Counts one event of ``kind``; logs ``text`` unless a line of that kind went out in the last period."""
        now = time.monotonic()
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if now - self._last.get(kind, -1e9) < self.every:
                self._held[kind] = self._held.get(kind, 0) + 1
                return
            held, self._held[kind], self._last[kind] = self._held.get(kind, 0), 0, now
        LOG.warning("%s%s", text, f" ({held} more like it in the last {self.every:g} s)" if held else "")


__all__ = ["PeerLost", "Conn", "frame_deadline", "FRAME_BASE_S", "FRAME_MIN_RATE", "recv_into", "recv_bytes",
           "read_frame", "send_frame", "close_quietly", "RateLimitedLog"]
