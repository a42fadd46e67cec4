"""What a failing process tells its peers: its one typed line, left in the world's store before it exits.

A rank that fails on a :class:`~pyg_dist.errors.PyGDistError` (:func:`pyg_dist.train.entry.run_main`) or whose
TensorPipe transport aborts (:mod:`.abort`) calls :func:`publish` with the line it prints. A survivor that then
sees that peer gone (a call's connection breaks, a collective resets) asks :func:`said` and names the real
cause, ``peer rank 1 failed: CheckpointError: ...``; when nothing was published, the peer ended without saying
why (killed, out of memory) and the survivor says only that (:data:`~pyg_dist.errors.PEER_LOST`).

The store is the one the world already meets in: torchrun's agent store (it outlives every rank) under
torchrun, else the process group's store, else the RPC rendezvous store (``tcp://`` worlds, hosted by RPC rank
0). Keys live under ``pyg_dist/attempt_<n>/verdicts/``: ``rank/<RANK>`` and ``name/<rpc worker name>``. A
published line is a peer's bytes: read back capped at :data:`MAX_LINE` characters, one line, never executed.

Example:
    >>> said(rank=1) is None      # no world here: nothing to read
    True
"""
from __future__ import annotations

import datetime
import logging
import os
import re
import sys
import time
from typing import Any, Callable, Dict, Optional

from ..context import AGENT_STORE_ENV
from ..envvars import is_set, raw
from ..errors import PyGDistError
from ..group import attempt_prefix, attempt_store
from .state import live_state

LOG = logging.getLogger("pyg_dist.rpc")
#: Longest published line a survivor quotes (characters).
MAX_LINE = 600
#: Seconds one store operation may take here (a publisher is on its way out; a survivor is reporting).
STORE_TIMEOUT = 5.0
_PREFIX = "verdicts"
_STORES: Dict[int, Any] = {}  # pid -> the store client this process publishes / reads through
_MINE: Dict[int, str] = {}  # pid -> the line this process published
_RANK_TAG = re.compile(r"^\[rank [0-9?]+\] ")


def _open_store() -> Any:
    import torch.distributed as dist

    wait = datetime.timedelta(seconds=STORE_TIMEOUT)
    if raw(AGENT_STORE_ENV) == "True" and is_set("MASTER_ADDR") and is_set("MASTER_PORT"):
        return attempt_store(None, wait, prefix=_PREFIX)
    prefix = f"{attempt_prefix()}/{_PREFIX}"
    if dist.is_available() and dist.is_initialized():
        return dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())
    state = live_state()
    if state is not None and state.uses_rpc:
        from .join import rendezvous_store
        return dist.PrefixStore(prefix, rendezvous_store(state.ctx, STORE_TIMEOUT))
    return None


#: Key counting the lines published in this world (so that looking for one costs one operation).
COUNT_KEY = "said/count"


def world_store() -> Any:
    """This process's client of the world's store (opened once per process), or ``None`` outside a world or
    when the store cannot be reached (logged at DEBUG: the caller's own line still goes out)."""
    pid = os.getpid()
    if pid not in _STORES:
        try:
            _STORES[pid] = _open_store()
        except Exception as exc:  # noqa: BLE001 -- no store, no verdicts: callers fall back to what they know
            LOG.debug("pyg_dist: the world's store is unreachable (%s); failure lines stay local", exc)
            return None
    return _STORES[pid]


def _keys() -> list:
    """``rank/<RANK>`` for a trainer (a sampler worker inherits its trainer's RANK: only its name), the RPC name."""
    state = live_state()
    trainer = state is None or state.ctx.worker_id is None
    keys = [f"rank/{raw('RANK')}"] if trainer and raw("RANK").isdigit() else []
    if state is not None:
        keys.append(f"name/{state.name}")
    return keys


def line_of(exc: BaseException, rank: Optional[int] = None) -> str:
    """``[rank r] ErrorType: message`` in one line (a remote failure keeps its first and its last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1:
        text += f" ... {lines[-1]}"
    tag = "" if rank is None else f"[rank {rank}] "
    return f"{tag}{type(exc).__name__}: {text}"


def own_line() -> Optional[str]:
    """The line this process published (:func:`publish`, :func:`publish_in_flight`), or ``None``."""
    return _MINE.get(os.getpid())


def publish_in_flight() -> bool:
    """Publishes the exception now propagating through the caller's ``finally`` (a failing rank leaving RPC and
    its process group: peers see the connections break next, so its line must be there first). Only a
    :class:`~pyg_dist.errors.PyGDistError` (what ``run_main`` prints as it is; an untyped torch error is published
    by ``run_main`` as the ``PeerFailedError`` it stands for), and only the first line of a process."""
    exc = sys.exc_info()[1]
    if not isinstance(exc, PyGDistError) or os.getpid() in _MINE:
        return False
    rank = raw("RANK")
    return publish(line_of(exc, int(rank) if rank.isdigit() else None))


def publish(line: str) -> bool:
    """Leaves ``line`` (this process's one failure line) for its peers; returns whether it could. The first line a
    process publishes stays: the cause, not what its own teardown ran into afterwards."""
    if os.getpid() in _MINE:
        return True
    _MINE[os.getpid()] = line.strip()[:MAX_LINE]
    store = world_store()
    keys = _keys()
    if store is None or not keys:
        return False
    try:
        for key in keys:
            store.set(key, line.strip()[:MAX_LINE].encode("utf-8", "replace"))
        store.add(COUNT_KEY, 1)  # after the line: a reader that sees the count finds the line
        return True
    except Exception as exc:  # noqa: BLE001 -- best effort on the way out; the line is printed anyway
        LOG.debug("pyg_dist: could not publish the failure line: %s", exc)
        return False


def said(rank: Optional[int] = None, name: Optional[str] = None, wait: float = 0.0) -> Optional[str]:
    """``peer rank R failed: ErrorType: ...`` (or ``peer NAME failed: ...``) when that peer published its line
    (the trainer ``rank`` or the RPC worker ``name``) now or within ``wait`` seconds, else ``None``."""
    store = world_store()
    key = f"rank/{rank}" if rank is not None else f"name/{name}" if name is not None else None
    if store is None or key is None:
        return None
    deadline = time.monotonic() + wait
    try:
        while not store.check([key]):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        raw = bytes(store.get(key))[:MAX_LINE]
    except Exception as exc:  # noqa: BLE001 -- the store's host is gone too: nothing more is known
        LOG.debug("pyg_dist: could not read %s's failure line: %s", key, exc)
        return None
    text = " ".join(raw.decode("utf-8", "replace").split())  # one line, whatever the peer wrote
    tag = _RANK_TAG.match(text)
    who = f"rank {rank}" if rank is not None else (tag.group(0)[1:-2] if tag else str(name))
    return f"peer {who} failed: {text[tag.end():] if tag else text}"


#: Seconds a survivor waits for a broken peer's line (it may still be on its way: an aborting process writes it
#: as it dies; a silent death costs this much before the survivor says what little it knows).
SAID_WAIT = 3.0


def said_by_rpc_rank(rpc_rank: int, name: str, wait: float = 0.0) -> Optional[str]:
    """What RPC member ``rpc_rank`` (worker ``name``) published, else what its trainer rank published (a rank
    that leaves RPC in its ``finally`` publishes then), waiting up to ``wait`` seconds for either, else ``None``."""
    state = live_state()
    try:
        trainer = state.ctx.trainer_of_rpc_rank(rpc_rank) if state is not None else None
    except Exception:  # noqa: BLE001 -- an RPC rank outside this world's table: only the name is known
        trainer = None
    deadline = time.monotonic() + wait
    while True:
        found = said(name=name) or (said(rank=trainer) if trainer is not None else None)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def anyone_said() -> bool:
    """Whether any process of the world published a line (one store operation, whatever the world's size)."""
    store = world_store()
    try:
        return store is not None and int(store.add(COUNT_KEY, 0)) > 0
    except Exception as exc:  # noqa: BLE001 -- the store's host is gone: nothing more is known
        LOG.debug("pyg_dist: could not read the count of failure lines: %s", exc)
        return False


def any_said(world_size: int, me: int) -> Optional[str]:
    """The first published line of a trainer rank other than ``me`` in a world of ``world_size``, or ``None``.
    One store operation while nobody published (ranks that wait for each other call it every few tenths of a
    second: asking every rank's key would cost the store the square of the world size)."""
    if not anyone_said():
        return None
    for rank in range(world_size):
        if rank != me:
            found = said(rank=rank)
            if found:
                return found
    return None


def enter(rank: int) -> None:
    """Marks trainer ``rank`` as running its script's ``main`` (:func:`wait_entered` waits for the marks)."""
    store = world_store()
    if store is not None:
        try:
            store.set(f"entered/{rank}", b"1")
        except Exception as exc:  # noqa: BLE001 -- then a failing peer lingers its full bound for this rank
            LOG.debug("pyg_dist: could not mark rank %d as started: %s", rank, exc)


def wait_entered(world_size: int, bound: float, stop: Optional[Callable[[], bool]] = None) -> None:
    """Returns once every trainer rank of the world marked itself started (:func:`enter`), at most ``bound``
    seconds, or as soon as ``stop()`` is true (a peer still importing its modules when this rank fails gets
    there, and can say its own line)."""
    store = world_store()
    if store is None:
        return
    keys = [f"entered/{r}" for r in range(world_size)]
    deadline = time.monotonic() + bound
    try:
        while not store.check(keys) and time.monotonic() < deadline and not (stop is not None and stop()):
            time.sleep(0.05)
    except Exception as exc:  # noqa: BLE001 -- the store went away: nobody is left to wait for
        LOG.debug("pyg_dist: stopped waiting for the other ranks: %s", exc)


__all__ = ["publish", "publish_in_flight", "own_line", "line_of", "said", "said_by_rpc_rank", "any_said", "anyone_said",
           "enter",
           "wait_entered", "world_store", "MAX_LINE", "STORE_TIMEOUT",
           "SAID_WAIT"]
