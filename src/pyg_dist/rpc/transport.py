"""The transport seam: the one thing the runtime, calls and the leave protocol ask of the bytes' carrier.

An abstract base and nothing else. Each implementation lives in its own subpackage beside this file and is
chosen per process by :func:`pyg_dist.rpc.init_rpc`'s ``transport`` (``TrainConfig.transport``), else
``$PYG_DIST_TRANSPORT`` (:func:`pyg_dist.rpc.settings.transport_name`):

- ``sockets`` (:mod:`pyg_dist.rpc.sockets`, the default): pyg_dist's own TCP transport. One listener per process,
  a handshake in which each side proves its rank before a byte is interpreted, every frame's integrity checked or
  encrypted, struct-header frames of raw tensor bytes (no pickle), every length capped before allocation; junk
  on a listener closes that connection only.
- ``tensorpipe`` (:mod:`pyg_dist.rpc.tensorpipe`): ``torch.distributed.rpc`` over TensorPipe, as before (no
  authentication; it unpickles what reaches it; junk on its listener aborts the process).

What every transport goes through the same way -- the rendezvous store's port checked, the arrival barrier before
leaving, the store host lingering until every member left -- is not here: :mod:`.lifecycle` runs it around
:meth:`Transport.join` and :meth:`Transport.leave`, and the rendezvous itself is :mod:`.join`'s. Everything above
the seam (the callee table, :class:`~pyg_dist.rpc.RpcFuture`, the asyncio bridge, failure detection) is the
same for both. A call returns a ``torch.futures.Future`` completed with a :class:`~pyg_dist.rpc.CallReply` whose
value is still packed by :mod:`.wire`, or failed with an exception whose text says why (``"timed out"`` for a
timeout).
"""
from __future__ import annotations

import abc
from typing import Any, List, Optional, Tuple

import torch

from ..context import DistContext


class Transport(abc.ABC):
    """One process's carrier of calls. ``name`` labels its listeners (:mod:`pyg_dist.iface`)."""

    name = "transport"
    #: Seconds a survivor waits for a broken peer's failure line (:mod:`.verdict`): only a transport whose abort
    #: kills its process publishes while the connections break; every other failure publishes before them.
    said_wait = 0.0

    @abc.abstractmethod
    def join(self, ctx: DistContext, name: str, timeout: float, call_timeout: float, num_threads: int) -> None:
        """Meets every member (rendezvous within ``timeout``) and serves the callee table from then on."""

    @abc.abstractmethod
    def call(self, rank: int, op: str, payload: Any, partitioning: Optional[str],
             timeout: float) -> torch.futures.Future:
        """Starts callee ``op`` on RPC rank ``rank`` with a :mod:`.wire`-packed ``payload``."""

    @abc.abstractmethod
    def ping(self, rank: int, timeout: float) -> torch.futures.Future:
        """A future of whether RPC rank ``rank`` has entered ``shutdown_rpc`` (the arrival barrier's question)."""

    @abc.abstractmethod
    def barrier(self, timeout: float) -> None:
        """Returns when every member called it (PyG's ``global_barrier``)."""

    def arrival_counter(self) -> Optional[Tuple[Any, str, List[int]]]:
        """``(store, key, members called)`` when arrivals can be counted in a store (one operation per look, and
        only the members this one called asked directly); ``None``: every member is pinged
        (:func:`pyg_dist.rpc.leave.arrival_barrier`)."""
        return None

    @abc.abstractmethod
    def leave(self, together: bool, bound: float) -> Optional[str]:
        """Tears this member's part down, with every member (``together``: all arrived) or alone, each step within
        ``bound`` seconds; returns None, or what went wrong."""


__all__ = ["Transport"]
