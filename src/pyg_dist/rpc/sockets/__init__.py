"""The ``sockets`` transport, pyg_dist's own (the default): :class:`SocketTransport` and the pieces only it uses.

``transport`` (listener, connections, calls in flight) -> ``meet`` (entries in the rendezvous store) ->
``auth`` (the handshake, the keys) -> ``conn`` (frames on a socket) -> ``seal`` (every frame's integrity or
encryption) -> ``frames`` (struct headers and raw tensor bytes, no pickle). Its settings are read in
:mod:`pyg_dist.rpc.settings`; the order it joins and leaves in is :mod:`pyg_dist.rpc.lifecycle`'s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyg_dist._lazy import lazy_names

if TYPE_CHECKING:  # visible to IDEs and type checkers; imported on first use at run time
    from pyg_dist.rpc.sockets.transport import MAX_HANDSHAKING, MAX_PER_PEER, SocketTransport

_LAZY = {
    # public name: the module that defines it
    "SocketTransport": "pyg_dist.rpc.sockets.transport",
    "MAX_HANDSHAKING": "pyg_dist.rpc.sockets.transport",
    "MAX_PER_PEER": "pyg_dist.rpc.sockets.transport",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _LAZY)
