"""A test rank's side of :func:`~.world.spawn_world`: :func:`rank_main` runs the pickled job and reports its
outcome to the parent through a file; :func:`die_with_parent` ties the process's life to its parent's.

A rank reaches :func:`rank_main` either as a fresh interpreter (``python -c``) or forked from a warm parent
(:mod:`.warm`); both run exactly this.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback


def die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this process if its parent dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rank_main(job_path: str) -> None:
    """Runs the job in ``job_path`` (``fn, rank, world_size, args, result_path``, pickled by the parent), writes
    ``("ok", value)`` or ``("error", traceback)`` to ``result_path`` and ends the process (status 0 or 1)."""
    die_with_parent()
    with open(job_path, "rb") as fh:
        fn, rank, world_size, args, result_path = pickle.load(fh)
    try:
        outcome = ("ok", fn(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 -- reported to the parent with the traceback
        outcome = ("error", traceback.format_exc())
        traceback.print_exc()
    tmp = result_path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            pickle.dump(outcome, fh)
    except Exception:  # noqa: BLE001 -- an unpicklable result is a failure of the rank
        outcome = ("error", f"result of rank {rank} is not picklable:\n{traceback.format_exc()}")
        with open(tmp, "wb") as fh:
            pickle.dump(outcome, fh)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if outcome[0] == "ok" else 1)


__all__ = ["rank_main", "die_with_parent"]
