"""``$PYG_DIST_IFNAME``: the network interface every pyg_dist listener binds (default: the interface that
reaches ``MASTER_ADDR``).

With it set, the rendezvous stores pyg_dist hosts listen on that interface's IPv4 address, and
TensorPipe / gloo get it as ``$TP_SOCKET_IFNAME`` / ``$GLOO_SOCKET_IFNAME`` unless those are set
already. Use the private interface of a multi-homed machine (``lo`` on one machine).

Example:
    >>> interface_address("lo")
    '127.0.0.1'
"""
from __future__ import annotations

import os

from pyg_dist.errors import InvalidArgumentError

IFNAME_ENV = "PYG_DIST_IFNAME"
_SIOCGIFADDR = 0x8915  # Linux: the IPv4 address of an interface


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name`` (Linux), or InvalidArgumentError naming it."""
    import socket
    import struct
    try:
        import fcntl
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
    except (ImportError, OSError) as e:
        raise InvalidArgumentError("pyg_dist listeners", f"${IFNAME_ENV}", name,
                                   f"a network interface with an IPv4 address on this machine ({e})") from None
    return socket.inet_ntoa(packed[20:24])


def listen_address(master_addr: str) -> str:
    """Where pyg_dist's own listeners bind: ``$PYG_DIST_IFNAME``'s address, else ``master_addr``."""
    name = os.environ.get(IFNAME_ENV, "").strip()
    return interface_address(name) if name else master_addr


def apply_ifname() -> None:
    """Passes ``$PYG_DIST_IFNAME`` on to TensorPipe and gloo (where their own variables are unset)."""
    name = os.environ.get(IFNAME_ENV, "").strip()
    if name:
        interface_address(name)  # a typo fails here, naming the variable, not deep inside torch
        os.environ.setdefault("TP_SOCKET_IFNAME", name)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)


__all__ = ["IFNAME_ENV", "interface_address", "listen_address", "apply_ifname"]
