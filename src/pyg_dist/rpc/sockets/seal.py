"""Frame protection of the ``sockets`` transport, per connection and direction: every frame's integrity (the
default), or its encryption too, with AES-256-GCM under the keys the handshake derived (:mod:`.auth`).

- ``integrity``: header, tensor table, skeleton and tensor bytes, in order, are the GCM's authenticated data; a
  16-byte tag follows the frame. Tensors are still received straight into their own memory and authenticated
  there (GMAC runs at several GB/s on a core with AES-NI and carry-less multiply).
- ``encrypt``: the header is authenticated, everything after it is encrypted (for networks that are not
  trusted); tensor bytes pass through a 1 MiB scratch buffer on their way in.
- ``off``: no tag, no check (the handshake still proves who the peer is): for benchmarks and trusted links.

The nonce of frame *n* in one direction is *n* (96 bits): each direction of each connection has its own key,
so a nonce never repeats under a key; a frame dropped, replayed, reordered or moved to another connection
fails its tag. A frame that fails is an :class:`IntegrityError` naming the peer; its message never reaches a
caller, and the connection closes.

Example:
    >>> s, o = Sealer(b"k" * 32, "integrity"), Opener(b"k" * 32, "integrity", "rank 1")
    >>> parts = s.seal(b"h" * 48 + b"rest", [])
    >>> o.begin(parts[0][:48]); o.rest(parts[0][48:]) == b"rest"
    True
    >>> o.finish(parts[-1])
"""
from __future__ import annotations

import struct
from typing import Any, List, Sequence

from .frames import HEADER, FrameError

TAG = 16
_CHUNK = 1 << 20


class IntegrityError(FrameError):
    """A frame whose tag does not match (altered, dropped, replayed or reordered on the way)."""

    def __init__(self, peer: str):
        super().__init__(peer, "integrity tag", "does not match its bytes: the frame was altered on the way (a relay "
                         "or a fault between the two processes); nothing of it was used and the connection closed")


def _cipher(key: bytes, seq: int, tag=None):
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    return Cipher(algorithms.AES(key), modes.GCM(struct.pack("<Q", seq) + b"\0\0\0\0", tag))


class Sealer:
    """The sending side of one direction: :meth:`seal` turns a frame into the buffers to send, in order. Call it
    under the connection's send lock: frames must leave in the order they were sealed."""

    def __init__(self, key: bytes, mode: str):
        self.key, self.mode, self.seq = key, mode, 0

    @property
    def tag_size(self) -> int:
        return 0 if self.mode == "off" else TAG

    def seal(self, head: bytes, blobs: Sequence[memoryview]) -> List[Any]:
        """``head`` (header, table, shapes, skeleton) and the tensors' bytes, protected, tag last."""
        if self.mode == "off":
            return [head, *blobs]
        enc = _cipher(self.key, self.seq).encryptor()
        self.seq += 1
        if self.mode == "integrity":
            enc.authenticate_additional_data(head)
            for blob in blobs:
                if blob.nbytes:
                    enc.authenticate_additional_data(blob)
            enc.finalize()
            return [head, *blobs, enc.tag]
        enc.authenticate_additional_data(head[:HEADER.size])
        out: List[Any] = [head[:HEADER.size] + enc.update(head[HEADER.size:])]
        for blob in blobs:
            if blob.nbytes:
                ct = bytearray(blob.nbytes)
                enc.update_into(blob, ct)
                out.append(ct)
        enc.finalize()
        out.append(enc.tag)
        return out


class Opener:
    """The receiving side of one direction, frame by frame: :meth:`begin` (the header), :meth:`rest` (table,
    shapes, skeleton), each tensor through :meth:`absorb` (received in place) or :meth:`decrypt_into`, then
    :meth:`finish` with the tag, which raises :class:`IntegrityError` when anything differs."""

    def __init__(self, key: bytes, mode: str, peer: str):
        self.key, self.mode, self.peer, self.seq = key, mode, peer, 0
        self.encrypts = mode == "encrypt"
        self._ctx: Any = None
        self._scratch = bytearray(_CHUNK) if self.encrypts else bytearray()

    @property
    def tag_size(self) -> int:
        return 0 if self.mode == "off" else TAG

    def begin(self, header: bytes) -> None:
        """Starts the next frame: a fresh decryptor under its nonce, the header authenticated."""
        if self.mode == "off":
            return
        self._ctx = _cipher(self.key, self.seq).decryptor()
        self.seq += 1
        self._ctx.authenticate_additional_data(header)

    def rest(self, data: bytes) -> bytes:
        """The tensor table, shapes and skeleton, authenticated (decrypted with ``encrypt``)."""
        if self.mode == "off":
            return data
        if self.encrypts:
            return self._ctx.update(data)
        self._ctx.authenticate_additional_data(data)
        return data

    def absorb(self, view: memoryview) -> None:
        """Authenticates tensor bytes received in place (``integrity``)."""
        if self.mode == "integrity" and len(view):
            self._ctx.authenticate_additional_data(view)

    def scratch(self, n: int) -> memoryview:
        """Where the next ``n`` (<= 1 MiB) encrypted bytes are received."""
        return memoryview(self._scratch)[:n]

    def decrypt_into(self, src: memoryview, dst: memoryview) -> None:
        """Decrypts ``src`` (the scratch) into ``dst`` (a tensor's bytes), ``encrypt`` only."""
        self._ctx.update_into(src, dst)

    def finish(self, tag: bytes) -> None:
        """Checks the frame's ``tag``: :class:`IntegrityError` when anything of the frame differs."""
        if self.mode == "off":
            return
        ctx, self._ctx = self._ctx, None
        from cryptography.exceptions import InvalidTag
        try:
            ctx.finalize_with_tag(tag)
        except (InvalidTag, ValueError):
            raise IntegrityError(self.peer) from None


__all__ = ["TAG", "IntegrityError", "Sealer", "Opener"]
