"""Calling a partition: ``call_async`` (awaitable or waitable future) and ``call`` (blocking).

The caller names a *partition*, never a process: :meth:`DistContext.pick_rpc_rank` chooses the serving
RPC rank (itself when it serves that partition; then the callee runs right here, without RPC). Remote
calls are issued immediately, so the sampler can issue all of them, do its local work, then await.

Example (a one-partition world answers locally):
    >>> import asyncio, torch
    >>> from dataclasses import dataclass
    >>> from pyg_dist.context import DistContext
    >>> from pyg_dist.rpc import init_rpc, register_callee, shutdown_rpc, run_coroutine
    >>> @dataclass
    ... class Ids:
    ...     ids: torch.Tensor
    >>> _ = register_callee("doc_inc", lambda m: Ids(m.ids + 1), replace=True)
    >>> init_rpc(DistContext(rank=0, world_size=1, num_partitions=1))
    >>> call(0, "doc_inc", Ids(torch.tensor([1])))
    Ids(ids=tensor([2]))
    >>> async def both():
    ...     return await asyncio.gather(call_async(0, "doc_inc", Ids(torch.tensor([5]))),
    ...                                 call_async(0, "doc_inc", Ids(torch.tensor([7]))))
    >>> [r.ids.item() for r in run_coroutine(both(), timeout=10)]
    [6, 8]
    >>> shutdown_rpc()
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Optional

import torch

from ..errors import PEER_LOST, InvalidArgumentError, PyGDistError, RemoteCallError, RpcTimeoutError, check_seconds
from . import aio, callees, verdict, wire
from .state import require_state

#: Extra seconds a waiter allows beyond the call's own timeout before giving up on torch's verdict.
_GRACE = 5.0


class RpcFuture:
    """The pending result of one call; ``await`` it (any asyncio loop) or ``wait()`` for it.

    A failure raises :class:`RemoteCallError` (the callee raised, or the transport to the serving
    process broke, e.g. it died: then it quotes the line that process published, :mod:`.verdict`, or says it
    ended without saying why) or :class:`RpcTimeoutError`, naming the op, partition and RPC rank.
    """

    def __init__(self, fut: torch.futures.Future, op: str, partition: int, rank: int, name: str,
                 timeout: float, said_wait: float = 0.0):
        self._fut, self.op, self.partition, self.rank = fut, op, partition, rank
        self.said_wait = said_wait
        self.served_by, self.timeout = name, timeout
        #: Tensor bytes of the reply's value as it travelled (int32 ids count 4 bytes); set by the first
        #: ``wait()`` / ``await`` that returns it.
        self.reply_bytes = 0
        self._value: Any = None
        self._unpacked = False

    def done(self) -> bool:
        """True once the reply (or the failure) has arrived."""
        return self._fut.done()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Blocks until the reply arrives, at most ``timeout`` (default: the call's timeout + grace)."""
        bound = self.timeout + _GRACE if timeout is None else timeout
        if not self._fut.done():
            event = threading.Event()
            self._fut.add_done_callback(lambda _: event.set())
            if not event.wait(bound):
                raise self._timeout_error(bound)
        return self._result()

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> Any:
        if not self._fut.done():
            bound = self.timeout + _GRACE
            try:
                await asyncio.wait_for(aio.wrap_torch_future(self._fut), bound)
            except asyncio.TimeoutError:
                raise self._timeout_error(bound) from None
        return self._result()

    def _timeout_error(self, seconds: float) -> RpcTimeoutError:
        return RpcTimeoutError(f"call '{self.op}' to partition {self.partition} (rpc rank {self.rank}, "
                               f"{self.served_by}) got no reply within {seconds:g} s")

    def _result(self) -> Any:
        try:
            reply = self._fut.wait()
        except Exception as exc:  # transport failure or torch's own timeout
            raise self._transport_error(exc) from exc
        if reply.error is not None:
            raise RemoteCallError(self.op, self.partition, self.rank,
                                  f"callee raised on {reply.served_by or self.served_by}:\n{reply.error}")
        if not self._unpacked:  # widen the ids once, however often the result is asked for
            self._value, self.reply_bytes = wire.unpack(reply.value, f"partition {self.partition} (rpc rank "
                                                        f"{self.rank}, {reply.served_by or self.served_by})")
            self._unpacked = True
        return self._value

    def _transport_error(self, exc: Exception) -> PyGDistError:
        text = str(exc).strip()
        if isinstance(exc, PyGDistError):  # a frame, a cap or a handshake refused: the error says which
            return RemoteCallError(self.op, self.partition, self.rank, f"{self.served_by}: {text}")
        if "timeout" in text.lower() or "timed out" in text.lower():
            return self._timeout_error(self.timeout)
        why = verdict.said_by_rpc_rank(self.rank, self.served_by, self.said_wait) or PEER_LOST  # its own line
        return RemoteCallError(self.op, self.partition, self.rank,
                               f"RPC to {self.served_by} failed in transport: {why}: {text}")


def _check_payload(where: str, payload: Any) -> None:
    if payload is not None and (not dataclasses.is_dataclass(payload) or isinstance(payload, type)):
        raise InvalidArgumentError(where, "payload", payload,
                                   "a dataclass instance (typed message) or None")


def call_async(partition: int, op: str, payload: Any = None, *, timeout: Optional[float] = None) -> RpcFuture:
    """Starts callee ``op`` on ``payload`` in a process serving ``partition``; returns at once.

    Args:
        partition: Partition whose server should run the callee.
        op: Name of a callee registered in every process.
        payload: A dataclass instance (typed message) or None.
        timeout: Seconds before the call fails (default: ``init_rpc``'s ``call_timeout``).

    Returns:
        An :class:`RpcFuture`: ``await fut`` in a coroutine, or ``fut.wait()``.

    Raises:
        NotInitializedError: ``init_rpc`` was not called in this process.
        InvalidArgumentError: bad partition, unknown op, non-dataclass payload, bad timeout.
    """
    where = "call_async"
    state = require_state(where)
    ctx = state.ctx
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < ctx.num_partitions:
        raise InvalidArgumentError(where, "partition", partition, f"an int in [0, {ctx.num_partitions})")
    callees.lookup(op)  # every process registers the same table: an unknown name is a local bug
    _check_payload(where, payload)
    timeout = state.call_timeout if timeout is None else check_seconds(where, "timeout", timeout)
    target = ctx.pick_rpc_rank(partition)
    name = ctx.worker_name(target)
    if target == ctx.rpc_rank or not state.uses_rpc:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(callees.serve(op, payload, served_by=state.name))
        return RpcFuture(fut, op, partition, target, name, timeout)
    fut = state.transport.call(target, op, wire.pack(payload), callees.partitioning(), timeout)
    return RpcFuture(fut, op, partition, target, name, timeout, state.transport.said_wait)


def call(partition: int, op: str, payload: Any = None, *, timeout: Optional[float] = None) -> Any:
    """Runs callee ``op`` on ``payload`` in a process serving ``partition`` and returns its reply.

    Blocking version of :func:`call_async` (same arguments and errors).
    """
    return call_async(partition, op, payload, timeout=timeout).wait()
