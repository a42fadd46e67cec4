"""The order every transport joins and leaves in, written once: :func:`enter_world` and :func:`leave_world`.

Joining: the store host's port is checked free before anything listens (:func:`.join.check_store_port`), then the
transport meets the others (:meth:`~pyg_dist.rpc.transport.Transport.join`: its rendezvous, bounded by the start-up
timeout). Leaving (graceful): the arrival barrier (:func:`.leave.arrival_barrier`: nobody tears down a server a
peer still calls), the transport's own teardown (:meth:`~pyg_dist.rpc.transport.Transport.leave`), then, in a
``tcp://`` world, every member reports "left" and the store host lingers until all did
(:func:`.leave.report_left_or_linger`). After a failure (``graceful=False``) only the teardown runs.

Example:
    >>> STEP_BOUND
    30.0
"""
from __future__ import annotations

from typing import Optional

from ..context import DistContext
from . import join, leave
from .transport import Transport

#: The most seconds one step of a graceful leave may take (the arrival barrier has the whole timeout).
STEP_BOUND = 30.0


def enter_world(transport: Transport, ctx: DistContext, name: str, timeout: float, call_timeout: float,
                num_threads: int) -> None:
    """Joins ``transport`` to the world of ``ctx`` as ``name`` (see the module docstring)."""
    join.check_store_port(ctx)
    transport.join(ctx, name, timeout, call_timeout, num_threads)


def leave_world(transport: Transport, ctx: DistContext, graceful: bool, timeout: float) -> Optional[str]:
    """Takes ``transport`` out of the world: None, or what went wrong (see the module docstring)."""
    problem = leave.arrival_barrier(transport, ctx, timeout) if graceful else None
    together = graceful and problem is None  # a transport's own graceful path would wait for the dead
    bound = min(timeout, STEP_BOUND)
    problem = transport.leave(together, bound) or problem
    if together:
        problem = leave.report_left_or_linger(ctx, bound) or problem
    return problem


__all__ = ["STEP_BOUND", "enter_world", "leave_world"]
