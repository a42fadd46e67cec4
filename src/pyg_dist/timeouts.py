"""The one bound every wait on a peer derives from: a peer that dies, hangs or becomes unreachable after
start-up ends every other rank within it.

``failure_timeout`` (default 20 s; ``TrainConfig.failure_timeout`` or ``$PYG_DIST_FAILURE_TIMEOUT``) sets:

* each remote call's timeout (sampling hops, feature lookups, cache fills): ``RpcTimeoutError`` naming
  the op, the partition and the RPC rank;
* the process group's timeout for every collective after start-up (DDP's all_reduce, barriers, the
  seed-balance agreement, checkpoint barriers): gloo's timeout, reported as :class:`~pyg_dist.errors.
  PeerFailedError` by :func:`pyg_dist.train.entry.run_main`;
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

from pyg_dist.errors import RpcTimeoutError, check_seconds

LOG = logging.getLogger("pyg_dist")
FAILURE_TIMEOUT_ENV = "PYG_DIST_FAILURE_TIMEOUT"
DEFAULT_FAILURE_TIMEOUT = 20.0


def failure_timeout() -> float:
    """The bound in force: ``$PYG_DIST_FAILURE_TIMEOUT``, else 20 s."""
    text = os.environ.get(FAILURE_TIMEOUT_ENV)
    if text is None:
        return DEFAULT_FAILURE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    return check_seconds("environment", FAILURE_TIMEOUT_ENV, value if value > 0 else text)


def set_failure_timeout(seconds: float) -> None:
    """Sets the bound for this process and the processes it starts from now on."""
    os.environ[FAILURE_TIMEOUT_ENV] = repr(check_seconds("set_failure_timeout", "seconds", seconds))


def call_timeout() -> float:
    """Default timeout of one remote call."""
    return failure_timeout()


def apply_to_process_group() -> bool:
    """Sets the default process group's collective timeout to the bound (after start-up, whose rendezvous
    needs longer); ``False`` when this torch offers no way to change it (the init timeout stays)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    setter = getattr(c10d, "_set_pg_timeout", None)
    if not dist.is_initialized() or setter is None:
        return False
    try:
        setter(datetime.timedelta(seconds=failure_timeout()))
    except (RuntimeError, TypeError, ValueError) as exc:  # a backend without the hook
        LOG.debug("process group timeout unchanged: %s", exc)
        return False
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
           "FAILURE_TIMEOUT_ENV",           "DEFAULT_FAILURE_TIMEOUT"]
