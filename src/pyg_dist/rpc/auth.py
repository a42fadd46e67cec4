"""The ``sockets`` transport's per-job secret and its mutual HMAC-SHA256 handshake.

**The secret.** ``$PYG_DIST_SECRET_FILE``, when set: a file only its owner may read or write (mode ``0600`` or
stricter, else :class:`~pyg_dist.errors.InvalidArgumentError` naming the file), holding at least 16 bytes; the
Slurm example writes one per job. Otherwise RPC rank 0 draws 32 random bytes at start-up and shares them through
the job's rendezvous store. What each protects against:

- *a secret file* stops every process that cannot read that file: port scanners, health checks, other users'
  jobs, and anyone who can reach the rendezvous store but not the file;
- *a drawn secret* stops stray connections (scanners, health checks, junk) and other jobs, but **not** someone
  who can connect to the job's rendezvous store (which, like every c10d store, has no authentication) and read it.

Neither encrypts the traffic: use a private network (or a VPN) where the tensors themselves are secret.

**The handshake**, before a single byte of a frame is interpreted (the listener reads at most
:data:`MAX_PREAUTH` bytes from an unauthenticated peer, under :data:`HANDSHAKE_TIMEOUT`)::

    client -> server   'PGDH' | version u8 | client nonce (16)
    server -> client   server nonce (16) | HMAC(secret, 'server' | cnonce | snonce)
    client -> server   HMAC(secret, 'client' | cnonce | snonce)
    server -> client   'OK'

The secret never crosses the wire; each side proves it holds it over the other's fresh nonce, and the two
proofs are domain-separated (a server's proof cannot be replayed as a client's).

Example:
    >>> import socket, threading
    >>> a, b = socket.socketpair()
    >>> t = threading.Thread(target=accept, args=(b, b"k" * 32, "peer"))
    >>> t.start(); connect(a, b"k" * 32, "server"); t.join()
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import stat
from typing import Optional

from ..errors import InvalidArgumentError, PyGDistError

SECRET_ENV = "PYG_DIST_SECRET_FILE"
HELLO = b"PGDH"
VERSION = 1
NONCE = 16
MAC = 32
#: Bytes read from a peer before it proved it holds the secret.
MAX_PREAUTH = len(HELLO) + 1 + NONCE + MAC
#: Seconds a peer has to complete the handshake.
HANDSHAKE_TIMEOUT = 10.0
_MIN_SECRET = 16


class HandshakeError(PyGDistError, ConnectionError):
    """A connection that did not prove it holds the job's secret (names the peer and what went wrong)."""


def read_secret_file(path: str) -> bytes:
    """The secret in ``path``; refuses a file others can read or write, or one under 16 bytes."""
    try:
        info = os.stat(path)
        with open(path, "rb") as fh:
            data = fh.read(1 << 16)
    except OSError as exc:
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path, f"a readable file ({exc.strerror})") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path,
                                   f"a file only its owner can read (mode {stat.filemode(info.st_mode)}; "
                                   "chmod 600 it)")
    data = data.strip()
    if len(data) < _MIN_SECRET:
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path,
                                   f"a file of at least {_MIN_SECRET} bytes of secret ({len(data)})")
    return data


def job_secret(store, is_first: bool, key: str) -> bytes:
    """The job's secret: ``$PYG_DIST_SECRET_FILE``, else one drawn by the first member and shared in ``store``."""
    path = os.environ.get(SECRET_ENV, "").strip()
    if path:
        return read_secret_file(path)
    if is_first:
        store.set(key, secrets.token_hex(32))
    return bytes(store.get(key))


def _mac(secret: bytes, role: bytes, cnonce: bytes, snonce: bytes) -> bytes:
    return hmac.new(secret, role + cnonce + snonce, hashlib.sha256).digest()


def _read(sock: socket.socket, n: int, peer: str, what: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise HandshakeError(f"{peer}: no {what} within {HANDSHAKE_TIMEOUT:g} s") from None
        if not chunk:
            raise HandshakeError(f"{peer}: closed the connection during the handshake (before its {what})")
        buf += chunk
    return bytes(buf)


def accept(sock: socket.socket, secret: bytes, peer: str, timeout: Optional[float] = HANDSHAKE_TIMEOUT) -> None:
    """Server side: returns when ``peer`` proved it holds ``secret``; else :class:`HandshakeError`."""
    sock.settimeout(timeout)
    hello = _read(sock, len(HELLO), peer, "greeting")
    if hello != HELLO:
        raise HandshakeError(f"{peer}: sent {hello!r}, not a pyg_dist greeting (a stray connection?)")
    version = _read(sock, 1, peer, "version")[0]
    if version != VERSION:
        raise HandshakeError(f"{peer}: handshake version {version}, this process speaks {VERSION}")
    cnonce, snonce = _read(sock, NONCE, peer, "nonce"), secrets.token_bytes(NONCE)
    sock.sendall(snonce + _mac(secret, b"server", cnonce, snonce))
    proof = _read(sock, MAC, peer, "proof")
    if not hmac.compare_digest(proof, _mac(secret, b"client", cnonce, snonce)):
        raise HandshakeError(f"{peer}: wrong proof of the job's secret (another job, or a different "
                             f"${SECRET_ENV})")
    sock.sendall(b"OK")
    sock.settimeout(None)


def connect(sock: socket.socket, secret: bytes, peer: str, timeout: Optional[float] = HANDSHAKE_TIMEOUT) -> None:
    """Client side: returns when ``peer`` (the server) and this process proved to each other they hold ``secret``."""
    sock.settimeout(timeout)
    cnonce = secrets.token_bytes(NONCE)
    sock.sendall(HELLO + bytes([VERSION]) + cnonce)
    reply = _read(sock, NONCE + MAC, peer, "proof")
    snonce, proof = reply[:NONCE], reply[NONCE:]
    if not hmac.compare_digest(proof, _mac(secret, b"server", cnonce, snonce)):
        raise HandshakeError(f"{peer}: its proof of the job's secret is wrong (another job on that port?)")
    sock.sendall(_mac(secret, b"client", cnonce, snonce))
    if _read(sock, 2, peer, "acceptance") != b"OK":
        raise HandshakeError(f"{peer}: did not accept this process's proof")
    sock.settimeout(None)


__all__ = ["SECRET_ENV", "MAX_PREAUTH", "HANDSHAKE_TIMEOUT", "HandshakeError", "read_secret_file", "job_secret",
           "accept", "connect"]
