"""This process's place in the RPC world: set by :mod:`.runtime` (init and shutdown), read by the serving
side (:mod:`.calls`, :mod:`.leave`) through :func:`live_state`, so none of them reaches into another's privates.

Example:
    >>> live_state() is None     # not in an RPC world
    True
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Optional

from pyg_dist.context import DistContext
from pyg_dist.errors import NotInitializedError


@dataclass
class WorldState:
    """One process's membership: its context and worker name, whether a transport runs (several
    partitions), the per-call bound, and whether it is ready / leaving (read by peers' arrival barrier)."""
    ctx: DistContext
    name: str
    pid: int
    uses_rpc: bool
    call_timeout: float
    ready: bool = False
    leaving: bool = False
    #: The :class:`~pyg_dist.rpc.transport.Transport` carrying the calls (``None``: one partition, no RPC).
    transport: Any = None


#: Held while the state changes (init / shutdown).
LOCK = threading.RLock()
_STATE: Optional[WorldState] = None


def live_state() -> Optional[WorldState]:
    """This process's state, or ``None`` outside a world (a forked child never inherits its parent's)."""
    state = _STATE
    if state is None or state.pid != os.getpid():
        return None
    return state


def set_state(state: Optional[WorldState]) -> None:
    """Enters (``state``) or leaves (``None``) the world; only :mod:`.runtime` calls it, under :data:`LOCK`."""
    global _STATE
    _STATE = state


def require_state(where: str) -> WorldState:
    """This process's state; :class:`NotInitializedError` naming ``where`` outside a world."""
    state = live_state()
    if state is None:
        raise NotInitializedError(f"{where}: pyg_dist RPC is not initialised in this process; call "
                                  "pyg_dist.rpc.init_rpc(ctx) first")
    return state
