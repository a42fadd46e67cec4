"""RPC's settings, read in one place: which transport carries the calls, and each transport's own knobs.

Every ``PYG_DIST_*`` variable of the RPC runtime is read here, with the parser that names the variable and the
value when it is wrong (:func:`pyg_dist.train.env_check.validate_env` runs these readers at start-up). A
setting given in code (``init_rpc(transport=..., wire_protection=...)``, ``TrainConfig``) wins over its variable.

- :func:`transport_name` -- ``$PYG_DIST_TRANSPORT``: pyg_dist's RPC transport, ``sockets`` (the default) or
  ``tensorpipe`` (:mod:`pyg_dist.rpc.transport`).
- :func:`wire_mode` -- ``$PYG_DIST_WIRE_PROTECTION``: what the ``sockets`` transport does to every frame
  (:mod:`pyg_dist.rpc.sockets.seal`).
- :func:`frame_max_bytes` -- ``$PYG_DIST_FRAME_MAX_MB``: the ``sockets`` transport's frame cap
  (:mod:`pyg_dist.rpc.sockets.frames`).
- :func:`file_secret` -- ``$PYG_DIST_SECRET_FILE``: the job's secret for the ``sockets`` handshake
  (:mod:`pyg_dist.rpc.sockets.auth`).
- :func:`tensorpipe_transports` -- ``$PYG_DIST_TENSORPIPE_TRANSPORTS``: TensorPipe's OWN channels (``uv``,
  ``shm``, ``ibv``) under the ``tensorpipe`` transport; not to be confused with ``$PYG_DIST_TRANSPORT``. Its old
  name, ``$PYG_DIST_RPC_TRANSPORTS``, is still read, with a ``DeprecationWarning``.

Example:
    >>> transport_name("sockets"), transport_name(None) in TRANSPORTS
    ('sockets', True)
    >>> wire_mode("Encrypt")
    'encrypt'
"""
from __future__ import annotations

import os
import stat
import warnings
from typing import Any, List, Optional

from ..envvars import raw, read_number
from ..errors import InvalidArgumentError

TRANSPORT_ENV = "PYG_DIST_TRANSPORT"
TRANSPORTS = ("sockets", "tensorpipe")
DEFAULT_TRANSPORT = "sockets"
#: Frame protections of the ``sockets`` transport, in the order of their wire code.
MODES = ("integrity", "encrypt", "off")
WIRE_ENV = "PYG_DIST_WIRE_PROTECTION"
DEFAULT_MODE = "integrity"
#: Caps of one ``sockets`` frame (``PYG_DIST_FRAME_MAX_MB`` bounds its tensor bytes).
FRAME_MAX_ENV = "PYG_DIST_FRAME_MAX_MB"
DEFAULT_FRAME_MAX_MB = 1024.0
SECRET_ENV = "PYG_DIST_SECRET_FILE"
_MIN_SECRET = 16
TP_TRANSPORTS_ENV = "PYG_DIST_TENSORPIPE_TRANSPORTS"
#: The old name of :data:`TP_TRANSPORTS_ENV`, still read (with a ``DeprecationWarning``) when the new one is unset:
#: it read like ``PYG_DIST_TRANSPORT``, which picks pyg_dist's RPC transport, not TensorPipe's.
TP_TRANSPORTS_OLD_ENV = "PYG_DIST_RPC_TRANSPORTS"


def transport_name(value: Optional[str] = None) -> str:
    """``value``, else ``$PYG_DIST_TRANSPORT``, else the default; :class:`InvalidArgumentError` for another name."""
    where, arg = ("init_rpc", "transport") if value is not None else ("init_rpc", TRANSPORT_ENV)
    text = value if value is not None else (raw(TRANSPORT_ENV).strip() or DEFAULT_TRANSPORT)
    if not isinstance(text, str) or text.strip().lower() not in TRANSPORTS:
        raise InvalidArgumentError(where, arg, text, f"one of {list(TRANSPORTS)}")
    return text.strip().lower()

def wire_mode(value: Any = None) -> str:
    """``value``, else ``$PYG_DIST_WIRE_PROTECTION``, else ``integrity``; :class:`InvalidArgumentError` otherwise."""
    where, arg = ("init_rpc", "wire_protection") if value is not None else ("sockets transport", WIRE_ENV)
    text = value if value is not None else (raw(WIRE_ENV).strip() or DEFAULT_MODE)
    if not isinstance(text, str) or text.strip().lower() not in MODES:
        raise InvalidArgumentError(where, arg, text, f"one of {list(MODES)}")
    return text.strip().lower()

def frame_max_bytes() -> int:
    """The most tensor bytes of one frame (``$PYG_DIST_FRAME_MAX_MB``, default 1024 MiB), read at each call."""
    return int(read_number(FRAME_MAX_ENV, DEFAULT_FRAME_MAX_MB) * (1 << 20))

def read_secret_file(path: str) -> bytes:
    """The secret in ``path``: a regular file only its owner may read or write, holding at least 16 bytes.

    A FIFO, a device or a folder is refused before it is opened (opening a FIFO would wait for a writer).
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path, f"a readable file ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path,
                                   f"a regular file (this is {_kind(info.st_mode)})")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path,
                                   f"a file only its owner can read (mode {stat.filemode(info.st_mode)}; "
                                   "chmod 600 it)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never waits for a FIFO's writer
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between the stat and the open
                raise InvalidArgumentError("sockets transport", SECRET_ENV, path, "a regular file")
            data = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path, f"a readable file ({exc.strerror})") from None
    data = data.strip()
    if len(data) < _MIN_SECRET:
        raise InvalidArgumentError("sockets transport", SECRET_ENV, path,
                                   f"a file of at least {_MIN_SECRET} bytes of secret ({len(data)})")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def file_secret() -> Optional[bytes]:
    """The secret of ``$PYG_DIST_SECRET_FILE``, or ``None`` when it is unset."""
    path = raw(SECRET_ENV).strip()
    return read_secret_file(path) if path else None

def tensorpipe_transports() -> Optional[List[str]]:
    """TensorPipe's own transports for the ``tensorpipe`` RPC transport: ``$PYG_DIST_TENSORPIPE_TRANSPORTS`` (comma
    list of ``uv``, ``shm``, ``ibv``; ``default``: ``None``, TensorPipe's own choice), else ``["uv"]`` (TCP).
    TensorPipe's default shared-memory transport busy-polls: measured here, an idle 2-rank world burned 35-95 % of
    a core per rank with it and ~0 % with ``uv``, which also works across machines. The old name,
    ``$PYG_DIST_RPC_TRANSPORTS``, is read when the new one is unset, with a ``DeprecationWarning``."""
    var = TP_TRANSPORTS_ENV
    if not raw(var).strip() and raw(TP_TRANSPORTS_OLD_ENV).strip():
        var = TP_TRANSPORTS_OLD_ENV
        warnings.warn(f"{TP_TRANSPORTS_OLD_ENV} is deprecated: set {TP_TRANSPORTS_ENV} (TensorPipe's own transports; "
                      "PYG_DIST_TRANSPORT picks pyg_dist's RPC transport)", DeprecationWarning, stacklevel=2)
    value = raw(var).strip() or "uv"
    if value == "default":
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names or any(n not in ("uv", "shm", "ibv") for n in names):
        raise InvalidArgumentError("init_rpc", var, value, "'default' or a comma list of uv, shm, ibv")
    return names


__all__ = ["TRANSPORT_ENV", "TRANSPORTS", "DEFAULT_TRANSPORT", "transport_name", "MODES", "WIRE_ENV", "DEFAULT_MODE",
           "wire_mode", "FRAME_MAX_ENV", "DEFAULT_FRAME_MAX_MB", "frame_max_bytes", "SECRET_ENV", "read_secret_file",
           "file_secret", "TP_TRANSPORTS_ENV", "TP_TRANSPORTS_OLD_ENV", "tensorpipe_transports"]
