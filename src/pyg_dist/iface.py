"""Where the job listens: ``$PYG_DIST_IFNAME``, else the interface that owns ``MASTER_ADDR``'s address.

Every socket pyg_dist opens (its rendezvous stores) binds that interface's address, and TensorPipe /
gloo get the interface as ``$TP_SOCKET_IFNAME`` / ``$GLOO_SOCKET_IFNAME`` unless those are set already
(they win). Without this, TensorPipe and gloo bind the address the *hostname* resolves to, which on a
multi-homed machine is often the public one. ``MASTER_ADDR=127.0.0.1`` (``torchrun --standalone``)
means loopback. Each rank logs once which interface it chose and, after start-up, what it listens on.

Example:
    >>> interface_address("lo")
    '127.0.0.1'
    >>> interface_for("127.0.0.1")
    'lo'
"""
from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from typing import Dict, List, Optional, Tuple

from pyg_dist.envvars import hand_down, raw
from pyg_dist.errors import InvalidArgumentError

IFNAME_ENV = "PYG_DIST_IFNAME"
_SIOCGIFADDR = 0x8915  # Linux: the IPv4 address of an interface
LOG = logging.getLogger("pyg_dist.iface")
_LOGGED: set = set()


def _address_of(name: str) -> Optional[str]:
    import struct
    try:
        import fcntl
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
    except (ImportError, OSError):
        return None
    return socket.inet_ntoa(packed[20:24])


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name`` (Linux), or InvalidArgumentError naming it."""
    addr = _address_of(name)
    if addr is None:
        raise InvalidArgumentError("pyg_dist listeners", f"${IFNAME_ENV}", name,
                                   "a network interface with an IPv4 address on this machine")
    return addr


def _resolve(host: str) -> Optional[str]:
    try:
        return socket.gethostbyname(host)
    except (OSError, UnicodeError):
        return None


def _source_address(addr: str) -> Optional[str]:
    """The local address the kernel would send from to reach ``addr`` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            return s.getsockname()[0]
    except OSError:
        return None


def interface_for(host: str) -> Optional[str]:
    """The interface owning ``host``'s address (a local master), else the one that routes to it, else
    ``None`` (unresolvable, or no IPv4 interface matches)."""
    addr = _resolve(host)
    if addr is None:
        return None
    if ipaddress.ip_address(addr).is_loopback:
        return next((n for _, n in socket.if_nameindex() if _address_of(n) == "127.0.0.1"), None)
    names = [n for _, n in socket.if_nameindex()]
    for want in (addr, _source_address(addr)):
        match = next((n for n in names if want is not None and _address_of(n) == want), None)
        if match is not None:
            return match
    return None


def chosen_interface(master_addr: Optional[str] = None) -> Optional[str]:
    """``$PYG_DIST_IFNAME`` (checked), else :func:`interface_for` ``master_addr`` (default
    ``$MASTER_ADDR``), else ``None`` (torch's own choice)."""
    name = raw(IFNAME_ENV).strip()
    if name:
        interface_address(name)  # a typo fails here, naming the variable, not deep inside torch
        return name
    master = master_addr or raw("MASTER_ADDR").strip()
    return interface_for(master) if master else None


def listen_address(master_addr: str) -> str:
    """Where pyg_dist's own listeners bind: ``$PYG_DIST_IFNAME``'s address, else ``master_addr``."""
    name = raw(IFNAME_ENV).strip()
    return interface_address(name) if name else master_addr


def own_address(master_addr: str) -> str:
    """Where a listener that every machine of the job opens for itself binds (the ``sockets`` transport's): the
    IPv4 address of :func:`chosen_interface` (``$PYG_DIST_IFNAME``, else the interface that owns or routes to
    ``master_addr``), else the local address that routes to ``master_addr``, else ``master_addr`` itself."""
    name = chosen_interface(master_addr)
    addr = _address_of(name) if name else None
    if addr is None:
        resolved = _resolve(master_addr)
        addr = (_source_address(resolved) if resolved else None) or master_addr
    return addr


def listening_socket(addr: str, port: int) -> socket.socket:
    """A listening TCP socket bound to ``addr`` (through :func:`listen_address`) only, never all
    interfaces; hand its ``fileno()`` to ``TCPStore(master_listen_fd=...)``."""
    addr = listen_address(addr)
    family, kind, proto, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(sockaddr)
    sock.listen(1024)
    return sock


def apply_ifname(master_addr: Optional[str] = None) -> Optional[str]:
    """Points TensorPipe and gloo at :func:`chosen_interface` (where their own variables are unset) and
    logs the choice once per process; returns the interface name (``None``: left to torch)."""
    name = chosen_interface(master_addr)
    if name:
        hand_down("TP_SOCKET_IFNAME", name, to="TensorPipe (the interface it binds)", keep_set=True)
        hand_down("GLOO_SOCKET_IFNAME", name, to="gloo (the interface it binds)", keep_set=True)
    if os.getpid() not in _LOGGED:
        _LOGGED.add(os.getpid())
        LOG.info("rank %s listens on interface %s (TensorPipe %s, gloo %s)", raw("RANK", default="?"),
                 name or "of torch's choice", raw("TP_SOCKET_IFNAME", default="default"),
                 raw("GLOO_SOCKET_IFNAME", default="default"))
    return name


def _hex_address(text: str) -> Tuple[str, int]:
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words), int(port, 16)


def listeners(pid: Optional[int] = None) -> List[Tuple[str, int]]:
    """Sorted ``(address, port)`` of the TCP sockets process ``pid`` (default: this one) listens on
    (Linux ``/proc``; empty elsewhere)."""
    base = f"/proc/{pid or os.getpid()}"
    inodes = set()
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            inodes.add(os.readlink(f"{base}/fd/{fd}")[8:-1])
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    found: set = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{base}/net/{table}") as fh:
                rows = [line.split() for line in fh.readlines()[1:]]
        except OSError:
            continue
        found.update(_hex_address(r[1]) for r in rows if r[3] == "0A" and r[9] in inodes)  # 0A: LISTEN
    return sorted(found)


#: (address, port) -> what opened it, in the order the job's pieces started (see :func:`note_listeners`).
_KINDS: Dict[Tuple[str, int], str] = {}


def note_listeners(kind: str) -> None:
    """Labels this process's listeners not labelled yet as ``kind`` (call right after a piece started:
    ``"process-group store"``, ``"gloo"``, ``"rpc store"``, ``"tensorpipe"``)."""
    for key in listeners():
        _KINDS.setdefault(key, kind)


def listener_kinds() -> Dict[str, List[Tuple[str, int]]]:
    """What this process listens on, by kind (``"other"``: opened by nothing pyg_dist labelled)."""
    out: Dict[str, List[Tuple[str, int]]] = {}
    for key in listeners():
        out.setdefault(_KINDS.get(key, "other"), []).append(key)
    return out


def log_listeners() -> None:
    """Logs (INFO) this process's listening addresses and ports by kind, once the job's sockets are open."""
    kinds = listener_kinds()
    LOG.info("rank %s listens on %s", raw("RANK", default="?"), "; ".join(
        f"{k} {sorted({a for a, _ in v})} ports {[p for _, p in v]}" for k, v in kinds.items()) or "nothing")


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that the OS reports free (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port_free(port: int, where: str = "init_rpc") -> None:
    """Raises :class:`InvalidArgumentError` naming ``port`` if something already listens on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are fine
        sock.bind(("", port))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise InvalidArgumentError(
                where, "rpc_port", port,
                f"a free TCP port (it is in use: {exc.strerror}); choose another with "
                "DistContext(rpc_port=...) or $PYG_DIST_RPC_PORT") from None
        raise
    finally:
        sock.close()


__all__ = ["pick_free_port", "check_port_free", "IFNAME_ENV", "interface_address", "interface_for", "chosen_interface",
           "listen_address", "own_address", "listening_socket", "apply_ifname", "listeners", "note_listeners",
           "listener_kinds", "log_listeners"]
