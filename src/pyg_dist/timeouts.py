"""The one bound every wait on a peer derives from: a peer that dies, hangs or becomes unreachable after
start-up ends every other rank within it.

``failure_timeout`` (default 20 s; ``TrainConfig.failure_timeout`` or ``$PYG_DIST_FAILURE_TIMEOUT``) sets:

* each remote call's timeout (sampling hops, feature lookups, cache fills): ``RpcTimeoutError`` naming
  the op, the partition and the RPC rank;
* the process group's timeout for every collective after start-up (DDP's all_reduce, barriers, the
  seed-balance agreement, checkpoint barriers): gloo's timeout, reported as :class:`~pyg_dist.errors.
  PeerFailedError` by :func:`pyg_dist.train.entry.run_main`. One wait keeps the start-up bound: the first
  batch's gate (:func:`first_step_gate`), where every rank waits until all have their first batch, so that
  DDP's first all-reduce does not wait for the slowest rank's first batch under the failure bound;
* the shutdown's arrival barrier (a live peer that never arrives).
* a rank's orphan watch (:mod:`pyg_dist.train.orphan`): a rank whose torchrun agent died ends within it
  (it polls its parent every ``bound / 10`` s, at most 1 s, and tears down for at most ``min(5, bound / 4)`` s).

A peer that dies outright is seen sooner (its connections reset: about a second). Start-up (rendezvous,
opening partitions, filling caches) has its own, longer ``TrainConfig.timeout``. The bound must exceed
the longest time one rank works while another waits for it at a collective (e.g. rank 0 alone writing a
large model file); raise it for such scripts.

The value lives in the environment, so sampler workers (forked or spawned) inherit it.
"""
from __future__ import annotations

import datetime
import logging
import os
import threading
from typing import Any, Callable

from pyg_dist.envvars import hand_down, read_number
from pyg_dist.errors import RpcTimeoutError, check_seconds

LOG = logging.getLogger("pyg_dist")
FAILURE_TIMEOUT_ENV = "PYG_DIST_FAILURE_TIMEOUT"
DEFAULT_FAILURE_TIMEOUT = 20.0


def failure_timeout() -> float:
    """The bound in force: ``$PYG_DIST_FAILURE_TIMEOUT``, else 20 s."""
    return read_number(FAILURE_TIMEOUT_ENV, DEFAULT_FAILURE_TIMEOUT)


def set_failure_timeout(seconds: float) -> None:
    """Sets the bound for this process and the processes it starts from now on."""
    hand_down(FAILURE_TIMEOUT_ENV, repr(check_seconds("set_failure_timeout", "seconds", seconds)),
              to="this process and the sampler workers it starts")


def call_timeout() -> float:
    """Default timeout of one remote call."""
    return failure_timeout()


def apply_to_process_group() -> bool:
    """Sets the default process group's collective timeout to the bound (after start-up, whose rendezvous
    needs longer); ``False`` when this torch offers no way to change it (the init timeout stays)."""
    return _set_group_timeout(failure_timeout())


def _set_group_timeout(seconds: float) -> bool:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    setter = getattr(c10d, "_set_pg_timeout", None)
    if not dist.is_initialized() or setter is None:
        return False
    try:
        setter(datetime.timedelta(seconds=seconds))
    except (RuntimeError, TypeError, ValueError) as exc:  # a backend without the hook
        LOG.debug("process group timeout unchanged: %s", exc)
        return False
    return True


#: pid -> the start-up bound (s) of this process's first-batch gate, while the gate is ahead.
_GATE: dict = {}


def hold_first_step(bound: float) -> None:
    """``dist_session`` formed the process group and its start-up is over: this process's first batch from a
    distributed loader passes :func:`first_step_gate`, which waits for the other ranks for up to ``bound`` s."""
    _GATE[os.getpid()] = check_seconds("hold_first_step", "bound", bound)


def first_step_gate() -> bool:
    """Waits until every rank of the process group has its first batch (a barrier under the start-up bound of
    :func:`hold_first_step`), then collectives are back under the failure bound. Every distributed loader calls it
    when it has this rank's first batch, before handing it over; it acts once per process, and only after
    :func:`hold_first_step` (a drop-in loader under a user's own process group passes straight through).

    Ranks on a crowded machine reach their first batch tens of seconds apart (measured: 64 ranks on 2 cores;
    dialing and authenticating peers, the first kernels): without the gate DDP's first all-reduce waits for the
    slowest rank under the failure bound, and the job fails. The seed agreement before it (when the loader is
    built) and every step after it stay under the failure bound, and a rank that dies at the gate breaks its
    connections (seen in about a second); only a rank that hangs before its first batch is waited for as long as
    start-up. ``True`` when this call waited at the gate."""
    bound = _GATE.pop(os.getpid(), None)
    if bound is None:
        return False
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return False
    _set_group_timeout(bound)
    try:
        dist.barrier()
    finally:
        apply_to_process_group()
    return True


def run_bounded(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Runs ``fn`` in a helper thread; raises its error, or RpcTimeoutError after ``timeout`` s."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"pyg_dist-{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RpcTimeoutError(f"{what} did not complete within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


__all__ = ["run_bounded", "failure_timeout", "set_failure_timeout", "call_timeout", "apply_to_process_group",
           "hold_first_step", "first_step_gate", "FAILURE_TIMEOUT_ENV",
           "DEFAULT_FAILURE_TIMEOUT"]
