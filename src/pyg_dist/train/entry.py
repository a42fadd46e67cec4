"""What a script built on pyg_dist needs around its ``main``: logging, progress bars, and one clear
line per failure.

* :func:`run_main` runs ``main(argv)`` and turns a :class:`~pyg_dist.errors.PyGDistError` into one
  line on stderr, ``[rank r] ErrorType: message``, and exit status 1 (every rank of a torchrun job
  prints its own line). The full traceback goes to the ``pyg_dist`` log at DEBUG, or to stderr when
  ``$PYG_DIST_TRACEBACK=1``. Ctrl-C ends with ``[rank r] interrupted`` and status 130.
* :func:`setup_logging` sends log records to stdout as ``message`` lines: INFO on rank 0, only
  warnings on the other ranks, so a job's output is not repeated once per rank.
* :func:`progress` wraps an iterable in a tqdm bar on rank 0 when stderr is a terminal.

Example::

    from pyg_dist.train.entry import run_main

    def main(argv):
        ...

    if __name__ == "__main__":
        run_main(main, sys.argv[1:])
"""
from __future__ import annotations

import logging
import os
import re
import sys
import traceback
from typing import Callable, Iterable, Optional, Sequence

from pyg_dist.errors import PEER_GONE, PEER_LOST, PeerFailedError, PyGDistError

LOG = logging.getLogger("pyg_dist")
#: Set to 1 to print full tracebacks of pyg_dist errors instead of one line.
TRACEBACK_ENV = "PYG_DIST_TRACEBACK"


def env_rank() -> int:
    """This process's rank under torchrun (``$RANK``), 0 otherwise."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def one_line(exc: BaseException) -> str:
    """``ErrorType: message`` in one line (a remote failure keeps its first line and the remote error)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1:
        text += f" ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"


#: What torch says when a peer of a collective or a DataLoader worker is gone: (pattern, phase).
_PEER_ERRORS = (
    (re.compile(r"Connection reset by peer|Connection closed by peer|Broken pipe|Timed out waiting|Socket Timeout",
                re.I), "a collective (DDP all_reduce / barrier)"),
    (re.compile(r"DataLoader worker \(pid(?:\(s\))? [^)]*\) (is killed by signal|exited unexpectedly)", re.I),
     "sampling (a sampler worker)"),
)


def peer_failure(exc: BaseException) -> Optional[PeerFailedError]:
    """The :class:`PeerFailedError` an untyped torch error stands for (a peer's death seen by gloo or by
    the DataLoader), or ``None``. The peer is named as far as the message tells (address, worker pid)."""
    if isinstance(exc, PyGDistError) or not isinstance(exc, (RuntimeError, OSError)):
        return None
    text = str(exc)
    for pattern, phase in _PEER_ERRORS:
        if pattern.search(text):
            where = re.search(r"\[([0-9A-Za-z.:_-]+)\]:(\d+)", text)
            pids = re.search(r"\(pid(?:\(s\))? ([^)]*)\)", text)
            world = os.environ.get("WORLD_SIZE")
            other = f"rank {1 - env_rank()} " if world == "2" and not pids else ""  # the only peer there is
            if pids:
                peer = f"sampler worker (pid {pids.group(1)}) of rank {env_rank()}"
            else:
                peer = f"{other}at {where.group(1)}:{where.group(2)}" if where else other.strip() or "(unknown)"
            return PeerFailedError(phase, peer, f"{_gone()}: {one_line(exc).split(': ', 1)[-1][:300]}")
    return None


def _gone() -> str:
    """Why a peer goes away, as this job's RPC transport allows (only TensorPipe aborts on a stray connection)."""
    from pyg_dist.rpc.transport import transport_name
    try:
        return PEER_GONE if transport_name() == "tensorpipe" else PEER_LOST
    except PyGDistError:
        return PEER_LOST


def _fail(rank: int, exc: BaseException) -> None:
    LOG.debug("[rank %d] failed", rank, exc_info=True)
    if os.environ.get(TRACEBACK_ENV) == "1":
        traceback.print_exc()
    _say(f"[rank {rank}] {one_line(exc)}")
    sys.exit(1)


def _say(line: str) -> None:
    """One line on stderr in ONE write: the ranks of a job share the launcher's pipe, and ``print`` may write the
    text and its newline separately (unbuffered stderr), so two ranks' lines could run together (seen in CI)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run_main(main: Callable[[Optional[Sequence[str]]], object], argv: Optional[Sequence[str]] = None) -> None:
    """Runs ``main(argv)``; exits 0, or 1 with one line per pyg_dist error (and per peer failure torch
    reports untyped: :func:`peer_failure`), 130 on Ctrl-C (after ``main``'s ``finally`` blocks ran).
    SIGTERM (torchrun stopping the job) keeps its default: it ends the process at once, even inside a
    blocking collective, where a Python handler would only run once the call returns."""
    rank = env_rank()
    try:
        main(argv)
    except PyGDistError as exc:
        _fail(rank, exc)
    except (RuntimeError, OSError) as exc:
        peer = peer_failure(exc)
        if peer is None:
            raise
        _fail(rank, peer)
    except KeyboardInterrupt:
        _say(f"[rank {rank}] interrupted")
        sys.exit(130)
    sys.exit(0)


def setup_logging(quiet: bool = False, rank: Optional[int] = None) -> None:
    """Log lines on stdout: INFO on rank 0, WARNING on the other ranks; ``quiet`` also silences
    pyg_dist's own INFO messages (start-up, kernel compilation) on rank 0."""
    rank = env_rank() if rank is None else rank
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s",
                        stream=sys.stdout, force=True)
    logging.getLogger("pyg_dist").setLevel(logging.WARNING if quiet else logging.NOTSET)


def progress(iterable: Iterable, desc: str, total: Optional[int] = None, quiet: bool = False,
             rank: Optional[int] = None):
    """``iterable`` in a tqdm bar (batches, batches/s) on rank 0 when stderr is a terminal; the bar
    has ``set_postfix`` for the loss. Otherwise the iterable itself."""
    rank = env_rank() if rank is None else rank
    if quiet or rank != 0 or not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, total=total, unit="batch", leave=False, dynamic_ncols=True)


__all__ = ["run_main", "setup_logging", "progress", "one_line", "env_rank", "peer_failure", "TRACEBACK_ENV"]
