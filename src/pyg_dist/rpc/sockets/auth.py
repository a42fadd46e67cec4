"""Who is on the other end of a ``sockets`` connection, proven, and the keys that protect its frames.

**Keys.** Every process draws an X25519 key pair when its transport starts and publishes the public half with its
address in the world's rendezvous store (:meth:`Keyring.entry`). Two processes derive their pair key from an
X25519 exchange (which someone who only *reads* the store cannot compute) mixed with the job's secret file when
there is one (``$PYG_DIST_SECRET_FILE``, :func:`pyg_dist.rpc.settings.file_secret`):
``K = HMAC-SHA256(secret or zeros, label | X25519 | namespace | client public | server public)``.
With a secret file every published entry also carries ``HMAC(secret, namespace | rank | host | port | public)``:
an entry written by someone who cannot read the file is refused by name
(:class:`~pyg_dist.errors.TamperedStoreError`) before anything dials it.

**The handshake** (each side reads at most :data:`MAX_PREAUTH` bytes before the other proved itself, and the whole
handshake must end within :data:`HANDSHAKE_TIMEOUT`)::

    client -> server   'PGDH' | version u8 | protection u8 | client rank u32 | server rank u32 | client nonce (16)
    server -> client   server nonce (16) | protection u8 | HMAC(K, 'server' | transcript)
    client -> server   HMAC(K, 'client' | transcript)
    server -> client   'OK'

The transcript is every byte above before the proofs, so each proof binds both nonces, both ranks and the
protection both ends use (a relay cannot downgrade it). The server proves it is the rank the client dialed (it
holds that rank's private key); the client proves the rank it claims. Each direction then has its own frame key,
``HMAC(K, 'c2s' | transcript)`` and ``HMAC(K, 's2c' | transcript)`` (:mod:`.seal`).

Example:
    >>> import socket, threading
    >>> a, b = Keyring("ns", 0, None), Keyring("ns", 1, None)
    >>> x, y = socket.socketpair()
    >>> box = []
    >>> t = threading.Thread(target=lambda: box.append(accept(y, b, {0: a.public}.__getitem__, "integrity", "x")))
    >>> t.start(); mine = connect(x, a, 1, b.public, "integrity", "rank 1"); t.join()
    >>> (mine.peer_rank, box[0].peer_rank, mine.mode)
    (1, 0, 'integrity')
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import time
from typing import Callable, Optional, Tuple

from ...errors import InvalidArgumentError, PyGDistError, TamperedStoreError
from ..settings import MODES, SECRET_ENV
from .seal import Opener, Sealer

HELLO = b"PGDH"
VERSION = 2
NONCE = 16
MAC = 32
_HELLO = struct.Struct("<4sBBII16s")   # magic, version, protection, client rank, server rank, client nonce
_REPLY = struct.Struct("<16sB32s")     # server nonce, protection, server proof
#: Bytes read from a peer before it proved it holds its key.
MAX_PREAUTH = _HELLO.size + MAC
#: Seconds a whole handshake may take (a peer trickling its bytes is cut off at this bound, not per read).
HANDSHAKE_TIMEOUT = 10.0
_LABEL = b"pyg_dist sockets v2"
_NO_SECRET = bytes(32)


class HandshakeError(PyGDistError, ConnectionError):
    """A connection that did not prove who it is (names the peer and what went wrong); definitive."""


class HandshakeCut(HandshakeError):
    """The connection closed or stalled before the handshake ended (a listener full of strangers' connections
    closes the oldest: worth another try)."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


class Keyring:
    """One process's key pair in one world generation (``ns``, its RPC ``rank``) and the job's file secret."""

    def __init__(self, ns: str, rank: int, secret: Optional[bytes]):
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.ns, self.rank, self.secret = ns, rank, secret
        self._private = X25519PrivateKey.generate()
        self.public = _raw_public(self._private.public_key())

    def _sign(self, rank: int, host: str, port: int, public: bytes) -> str:
        if self.secret is None:
            return "-"
        return _mac(self.secret, b"entry", self.ns.encode(), struct.pack("<I", rank), host.encode(),
                    struct.pack("<I", port), public).hex()

    def entry(self, host: str, port: int) -> str:
        """What this process publishes: ``host port public-key [signature]``."""
        return f"{host} {port} {self.public.hex()} {self._sign(self.rank, host, port, self.public)}"

    def parse_entry(self, rank: int, raw: bytes, key: str) -> Tuple[str, int, bytes]:
        """``(host, port, public key)`` of rank ``rank``'s published entry (store key ``key``), checked: its shape,
        and its signature when this job has a secret file (:class:`TamperedStoreError` otherwise)."""
        try:
            host, port_text, pub_hex, sig = raw.decode("ascii").split()
            port, public = int(port_text), bytes.fromhex(pub_hex)
            shaped = 0 < port < 65536 and len(public) == 32
        except (UnicodeDecodeError, ValueError):
            shaped = False
        if not shaped:
            raise TamperedStoreError(key, f"{raw[:120]!r} is no pyg_dist listener entry ('host port key sig')")
        if not hmac.compare_digest(sig, self._sign(rank, host, port, public)):
            raise TamperedStoreError(key, "its signature does not match this job's secret file: written by "
                                          "something outside the job, or that rank uses another $" + SECRET_ENV)
        return host, port, public

    def pair_key(self, peer_public: bytes, client: bytes, server: bytes) -> bytes:
        """The key of a connection between this process and the owner of ``peer_public``."""
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        shared = self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
        return _mac(self.secret or _NO_SECRET, _LABEL, shared, self.ns.encode(), client, server)


def _raw_public(key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Session:
    """An authenticated connection's far end (``peer_rank``, ``peer``) and its two frame keys: ``sealer``
    protects what this side sends, ``opener`` checks what it receives (:mod:`.seal`)."""

    def __init__(self, key: bytes, transcript: bytes, client: bool, mode: str, peer_rank: int, peer: str):
        c2s, s2c = _mac(key, b"c2s", transcript), _mac(key, b"s2c", transcript)
        self.mode, self.peer_rank, self.peer = mode, peer_rank, peer
        self.sealer = Sealer(c2s if client else s2c, mode)
        self.opener = Opener(s2c if client else c2s, mode, peer)


class _Clock:
    """One deadline for a whole handshake: each read waits at most what is left of it."""

    def __init__(self, sock: socket.socket, timeout: float, peer: str):
        self.sock, self.peer, self.end, self.timeout = sock, peer, time.monotonic() + timeout, timeout

    def read(self, n: int, what: str) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = self.end - time.monotonic()
            if left <= 0:
                raise HandshakeCut(f"{self.peer}: the handshake did not end within {self.timeout:g} s "
                                   f"(stalled before its {what})")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except socket.timeout:
                continue
            except OSError as exc:
                raise HandshakeCut(f"{self.peer}: the connection broke during the handshake ({exc})") from None
            if not chunk:
                raise HandshakeCut(f"{self.peer}: closed the connection during the handshake (before its {what})")
            buf += chunk
        return bytes(buf)

    def send(self, data: bytes) -> None:
        self.sock.settimeout(max(0.01, self.end - time.monotonic()))
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise HandshakeCut(f"{self.peer}: the connection broke during the handshake ({exc})") from None


def _mode_code(mode: str) -> int:
    if mode not in MODES:
        raise InvalidArgumentError("sockets transport", "protection", mode, f"one of {list(MODES)}")
    return MODES.index(mode)


def _mode_name(code: int, peer: str) -> str:
    if code >= len(MODES):
        raise HandshakeError(f"{peer}: protection code {code} is unknown (another pyg_dist version?)")
    return MODES[code]


def connect(sock: socket.socket, ring: Keyring, server_rank: int, server_public: bytes, mode: str, peer: str,
            timeout: float = HANDSHAKE_TIMEOUT) -> Session:
    """Client side: returns the :class:`Session` once the server proved it is rank ``server_rank`` (it holds the
    private half of ``server_public``) and accepted this process's proof; else :class:`HandshakeError`."""
    clock = _Clock(sock, timeout, peer)
    hello = _HELLO.pack(HELLO, VERSION, _mode_code(mode), ring.rank, server_rank, secrets.token_bytes(NONCE))
    clock.send(hello)
    snonce, smode, proof = _REPLY.unpack(clock.read(_REPLY.size, "proof"))
    transcript = hello + snonce + bytes([smode])
    key = ring.pair_key(server_public, ring.public, server_public)
    if not hmac.compare_digest(proof, _mac(key, b"server", transcript)):
        raise HandshakeError(f"{peer}: its proof is wrong: not rank {server_rank} of this job (another job on that "
                             f"port, a relay, or a different ${SECRET_ENV})")
    if _mode_name(smode, peer) != mode:
        raise HandshakeError(f"{peer}: protects its frames with '{_mode_name(smode, peer)}', this process with "
                             f"'{mode}': give every process the same $PYG_DIST_WIRE_PROTECTION")
    clock.send(_mac(key, b"client", transcript))
    if clock.read(2, "acceptance") != b"OK":
        raise HandshakeError(f"{peer}: did not accept this process's proof")
    sock.settimeout(None)
    return Session(key, transcript, True, mode, server_rank, peer)


def accept(sock: socket.socket, ring: Keyring, public_of: Callable[[int], bytes], mode: str, peer: str,
           timeout: float = HANDSHAKE_TIMEOUT) -> Session:
    """Server side: returns the :class:`Session` once the client proved the rank it claims (``public_of(rank)``
    is that rank's published key; a ``KeyError`` means no such member); else :class:`HandshakeError`."""
    clock = _Clock(sock, timeout, peer)
    hello = clock.read(len(HELLO), "greeting")   # junk is refused after its first bytes, not after a greeting's
    if hello != HELLO:
        raise HandshakeError(f"{peer}: sent {hello!r}, not a pyg_dist greeting (a stray connection?)")
    hello += clock.read(1, "version")
    if hello[-1] != VERSION:
        raise HandshakeError(f"{peer}: handshake version {hello[-1]}, this process speaks {VERSION}")
    hello += clock.read(_HELLO.size - len(hello), "greeting")
    _, _, cmode, crank, srank, _ = _HELLO.unpack(hello)
    if srank != ring.rank:
        raise HandshakeError(f"{peer}: dialed rpc rank {srank} but reached rank {ring.rank} (a stale or tampered "
                             "address in the rendezvous store)")
    try:
        client_public = public_of(crank)
    except KeyError:
        raise HandshakeError(f"{peer}: claims rpc rank {crank}, no member of this world") from None
    snonce = secrets.token_bytes(NONCE)
    transcript = hello + snonce + bytes([_mode_code(mode)])
    key = ring.pair_key(client_public, client_public, ring.public)
    clock.send(snonce + bytes([_mode_code(mode)]) + _mac(key, b"server", transcript))
    if not hmac.compare_digest(clock.read(MAC, "proof"), _mac(key, b"client", transcript)):
        raise HandshakeError(f"{peer}: wrong proof for rpc rank {crank} (another job, a different "
                             f"${SECRET_ENV}, or someone who is not that rank)")
    if _mode_name(cmode, peer) != mode:
        raise HandshakeError(f"{peer} (rpc rank {crank}): protects its frames with '{_mode_name(cmode, peer)}', this "
                             f"process with '{mode}': give every process the same $PYG_DIST_WIRE_PROTECTION")
    clock.send(b"OK")
    sock.settimeout(None)
    return Session(key, transcript, False, mode, crank, f"rpc rank {crank} at {peer}")


__all__ = ["MAX_PREAUTH", "HANDSHAKE_TIMEOUT", "VERSION", "HandshakeError", "HandshakeCut",
           "Keyring", "Session", "connect", "accept"]
