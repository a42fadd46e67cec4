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
from typing import Any, Dict, List, Optional, Tuple

from . import frames

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


def read_frame(sock: socket.socket, peer: str) -> Tuple[frames.Header, Any, Optional[frames.FrameError]]:
    """The next frame: its header, its message and ``None``; or its header, ``None`` and the
    :class:`~pyg_dist.rpc.frames.FrameError` of a message that could not be built (the stream stays in step).

    Raises:
        FrameError: the header or the tensor table breaks the format or a cap (the stream is lost: close it).
        PeerLost: the peer closed the connection.
    """
    hdr = frames.parse_header(recv_bytes(sock, frames.HEADER.size, peer), peer)
    a = hdr.tensors * frames.ENTRY.size
    b = a + 8 * hdr.shape_ints
    rest = recv_bytes(sock, b + hdr.skeleton, peer)
    specs = frames.parse_table(hdr, rest[:a], rest[a:b], peer)
    tensors = []
    for spec in specs:
        t = frames.empty_tensor(spec)
        if spec.nbytes:
            recv_into(sock, frames.tensor_buffer(t), peer)
        tensors.append(t)
    try:
        return hdr, frames.decode(rest[b:], tensors, peer), None
    except frames.FrameError as exc:
        return hdr, None, exc


def send_frame(sock: socket.socket, lock: threading.Lock, head: bytes, blobs: List[memoryview]) -> None:
    """Sends one frame (under ``lock``: frames of concurrent calls never interleave)."""
    small = len(head) + sum(b.nbytes for b in blobs) <= _SMALL
    with lock:
        if small:
            sock.sendall(b"".join([head, *blobs]))
            return
        sock.sendall(head)
        for blob in blobs:
            if blob.nbytes:
                sock.sendall(blob)


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


__all__ = ["PeerLost", "recv_into", "recv_bytes", "read_frame", "send_frame", "close_quietly", "RateLimitedLog"]
