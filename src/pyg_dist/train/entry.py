"""What a script built on pyg_dist needs around its ``main``: logging, progress bars, and one clear
line per failure.

* :func:`run_main` runs ``main(argv)`` and turns a :class:`~pyg_dist.errors.PyGDistError` into one
  line on stderr, ``[rank r] ErrorType: message``, and exit status 1 (every rank of a torchrun job
  prints its own line). The full traceback goes to the ``pyg_dist`` log at DEBUG, or to stderr when
  ``$PYG_DIST_TRACEBACK=1``. Ctrl-C ends with ``[rank r] interrupted`` and status 130. The failing rank
  publishes its line (:mod:`pyg_dist.rpc.verdict`): a peer that sees it gone says ``peer rank 1 failed:
  CheckpointError: ...`` instead of guessing; SIGTERM from torchrun still lets a rank say its line.
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
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Iterable, Optional, Sequence

from pyg_dist.envvars import raw
from pyg_dist.errors import PEER_LOST, PeerFailedError, PyGDistError

LOG = logging.getLogger("pyg_dist")
#: Set to 1 to print full tracebacks of pyg_dist errors instead of one line.
TRACEBACK_ENV = "PYG_DIST_TRACEBACK"


def env_rank() -> int:
    """This process's rank under torchrun (``$RANK``), 0 otherwise."""
    try:
        return int(raw("RANK", default="0"))
    except ValueError:
        return 0


def one_line(exc: BaseException) -> str:
    """``ErrorType: message`` in one line (a remote failure keeps its first line and the remote error)."""
    from pyg_dist.rpc.verdict import line_of
    return line_of(exc)


#: What torch says when a peer of a collective or a DataLoader worker is gone: (pattern, phase).
_PEER_ERRORS = (
    (re.compile(r"Connection reset by peer|Connection closed by peer|Broken pipe|Timed out waiting|Socket Timeout",
                re.I), "a collective (DDP all_reduce / barrier)"),
    (re.compile(r"DataLoader worker \(pid(?:\(s\))? [^)]*\) (is killed by signal|exited unexpectedly)", re.I),
     "sampling (a sampler worker)"),
)


def peer_failure(exc: BaseException) -> Optional[PeerFailedError]:
    """The :class:`PeerFailedError` an untyped torch error stands for (a peer's death seen by gloo or by
    the DataLoader), or ``None``. The peer is named as far as the message tells (address, worker pid); when a
    trainer rank published its failure line before exiting (:mod:`pyg_dist.rpc.verdict`), the error quotes it
    (``peer rank 1 failed: CheckpointError: ...``), else it says only what is known (``PEER_LOST``)."""
    if isinstance(exc, PyGDistError) or not isinstance(exc, (RuntimeError, OSError)):
        return None
    text = str(exc)
    for pattern, phase in _PEER_ERRORS:
        if pattern.search(text):
            where = re.search(r"\[([0-9A-Za-z.:_-]+)\]:(\d+)", text)
            pids = re.search(r"\(pid(?:\(s\))? ([^)]*)\)", text)
            world = _world_size()
            other = f"rank {1 - env_rank()} " if world == 2 and not pids else ""  # the only peer there is
            if pids:
                peer = f"sampler worker (pid {pids.group(1)}) of rank {env_rank()}"
            else:
                peer = f"{other}at {where.group(1)}:{where.group(2)}" if where else other.strip() or "(unknown)"
            said = None if pids else _peer_said(world)
            detail = one_line(exc).split(': ', 1)[-1][:300]
            return PeerFailedError(phase, peer, detail if said else f"{PEER_LOST}: {detail}", said=said)
    return None


def _world_size() -> int:
    try:
        return int(raw("WORLD_SIZE", default="1"))
    except ValueError:
        return 1


def _peer_said(world: int) -> Optional[str]:
    """A peer trainer's published failure line (the other rank of a pair, else the first one found). No waiting:
    a rank publishes before it exits, so before its connections break and before torchrun's SIGTERM."""
    from pyg_dist.rpc import verdict
    if world < 2:
        return None
    return verdict.said(rank=1 - env_rank()) if world == 2 else verdict.any_said(world, env_rank())


#: Seconds a failing rank waits, at most, for every rank to have started its ``main`` (one still importing when
#: this rank fails would be stopped by torchrun before it could say its own line).
LINGER_S = 30.0
#: Seconds a rank stopped by SIGTERM after a peer published its failure gives its own ``main`` to say its line.
TERM_GRACE_S = 10.0
#: ... and when no peer published one (a peer killed, or the job stopped from outside): a survivor noticing the
#: dead peer says its own ``PeerFailedError`` in this time.
TERM_QUIET_S = 2.0
#: Exit status of a rank that SIGTERM stopped (128 + 15, as a shell reports it).
TERM_STATUS = 143
#: Seconds the interpreter's exit of a failed or interrupted rank may take (after ``main``'s ``finally`` blocks
#: and its last line) before the rank dumps its threads' stacks and ends: :func:`_bound_exit`.
EXIT_GRACE_S = 5.0
_SPEAK = threading.RLock()  # re-entrant: the SIGTERM handler may run in the main thread inside _say
_NOW: dict = {"spoken": False, "terminating": False, "rank": 0, "pid": None, "leaving": None}


def _fail(rank: int, exc: BaseException) -> None:
    LOG.debug("[rank %d] failed", rank, exc_info=True)
    if raw(TRACEBACK_ENV) == "1":
        traceback.print_exc()
    line = f"[rank {rank}] {one_line(exc)}"
    _say(line)
    from pyg_dist.rpc import verdict
    verdict.publish(line)  # before exiting: survivors quote it instead of guessing
    if _under_torchrun():  # a peer still starting up gets there before torchrun stops it
        verdict.wait_entered(_world_size(), LINGER_S, stop=lambda: _NOW["terminating"])
    _bound_exit(rank, 1)
    sys.exit(1)


def _bound_exit(rank: int, status: int) -> None:
    """Bounds the interpreter's exit of a failed or interrupted rank: once it starts (``threading``'s exit hook,
    before non-daemon threads are joined), a rank still alive :data:`EXIT_GRACE_S` later (a thread pool's task
    blocked, an exit handler waiting) writes every thread's stack to stderr and ends with ``status`` at once:
    its launcher, which waits 30 s before SIGKILL, and its peers are not held. Its last ``[rank r]`` line stays
    the one it said. A hang in Python's late finalization (after daemon threads stopped) is caught 2 s later by
    :func:`faulthandler.dump_traceback_later` (its stacks, status 1). Only in this process: a forked child does
    not inherit it."""
    _NOW["leaving"] = (os.getpid(), status, rank)
    if _NOW.get("exit_armed") == os.getpid():
        return
    _NOW["exit_armed"] = os.getpid()
    started = threading.Event()
    hook = getattr(threading, "_register_atexit", None)
    if hook is None:  # no such hook in this Python: atexit's run after the threads were joined
        return
    hook(lambda: _exit_started(started))
    threading.Thread(target=_exit_watch, args=(started,), name="pyg_dist-exit", daemon=True).start()


def _exit_started(started: threading.Event) -> None:
    """The interpreter's exit began (``threading``'s exit hook, in the main thread)."""
    if (_NOW.get("leaving") or (None,))[0] != os.getpid():
        return  # run_main's exit was taken back (a test) or belongs to another process
    import faulthandler
    try:  # the backstop, in C: Python's late finalization stops daemon threads like _exit_watch
        faulthandler.dump_traceback_later(EXIT_GRACE_S + 2.0, exit=True, file=sys.stderr)
    except (OSError, ValueError, RuntimeError):
        pass
    started.set()


def _exit_watch(started: threading.Event) -> None:
    started.wait()
    time.sleep(EXIT_GRACE_S)
    leaving = _NOW.get("leaving")
    if not leaving or leaving[0] != os.getpid():
        return
    import faulthandler
    try:
        sys.stderr.write(f"pyg_dist (rank {leaving[2]}): the exit still runs {EXIT_GRACE_S:g} s after the "
                         f"rank's last line; its threads' stacks follow, then it ends with status {leaving[1]}\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (OSError, ValueError, RuntimeError):  # a closed stderr: end anyway
        pass
    os._exit(leaving[1])


def _say(line: str) -> None:
    """One line on stderr in ONE write: the ranks of a job share the launcher's pipe, and ``print`` may write the
    text and its newline separately (unbuffered stderr), so two ranks' lines could run together (seen in CI).
    stdout is flushed first (its log lines come before), stderr after: nothing stays in a buffer at exit."""
    with _SPEAK:
        _flush(sys.stdout)
        sys.stderr.write(line + "\n")
        _flush(sys.stderr)
        _NOW["spoken"] = True


def _flush(stream) -> None:
    try:
        stream.flush()
    except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said there
        pass


def _under_torchrun() -> bool:
    from pyg_dist.context import AGENT_STORE_ENV
    return raw(AGENT_STORE_ENV) == "True" and _world_size() > 1


def run_main(main: Callable[[Optional[Sequence[str]]], object], argv: Optional[Sequence[str]] = None) -> None:
    """Runs ``main(argv)``; exits 0, or 1 with one line per pyg_dist error (and per peer failure torch
    reports untyped: :func:`peer_failure`), 130 on Ctrl-C (after ``main``'s ``finally`` blocks ran).

    A failing rank publishes its line for its peers (:mod:`pyg_dist.rpc.verdict`) and, under torchrun, waits (at
    most :data:`LINGER_S`) until every rank has started ``main``, so that each can say its own line. SIGTERM
    (torchrun stopping the job) is watched from a helper thread, so it is seen even inside a blocking collective:
    when a peer published a failure, ``main`` gets :data:`TERM_GRACE_S` to say its own line (else
    :data:`TERM_QUIET_S`); after that the rank prints its own published failure or ``[rank r] terminated: ...``
    and exits with status 143, skipping ``finally`` blocks as the default SIGTERM did. A script that set its own
    SIGTERM handler keeps it."""
    rank = env_rank()
    watching = _watch_sigterm(rank)
    try:
        if _under_torchrun():
            from pyg_dist.rpc import verdict
            verdict.enter(rank)
        _run(main, argv, rank)
    finally:
        if watching:
            _unwatch(*watching)


def _run(main: Callable[[Optional[Sequence[str]]], object], argv: Optional[Sequence[str]], rank: int) -> None:
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
        _bound_exit(rank, 130)
        sys.exit(130)
    _flush(sys.stdout)
    sys.exit(0)


def _watch_sigterm(rank: int) -> Optional[tuple]:
    """Routes SIGTERM to :func:`_on_sigterm` (in the main thread only, and only while SIGTERM has its default);
    returns what :func:`_unwatch` restores, or ``None``."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    _NOW.update(rank=rank, pid=os.getpid(), spoken=False, terminating=False)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.signal(signal.SIGTERM, lambda *_: _start_stop())  # runs between bytecodes of the main thread
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)  # seen at once, even in a blocking call
    threading.Thread(target=_wakeups, args=(read_fd,), name="pyg_dist-sigterm", daemon=True).start()
    if not _NOW.get("at_fork"):
        os.register_at_fork(after_in_child=_forget_in_child)
        _NOW["at_fork"] = True
    return previous, write_fd


def _unwatch(previous: int, write_fd: int) -> None:
    """SIGTERM's default and the previous wakeup fd back (``run_main`` returned into a caller, e.g. a test)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(previous)
    _NOW["pid"] = None
    os.close(write_fd)  # the helper thread reads EOF and ends


def _wakeups(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            os.close(read_fd)
            return
        if signal.SIGTERM in data:
            _start_stop()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) gets SIGTERM's default back and stops writing to our pipe."""
    if _NOW["pid"] is None or os.getpid() == _NOW["pid"]:
        return
    _NOW["pid"] = None
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: the handler below still re-kills
        pass


def _start_stop() -> None:
    if os.getpid() != _NOW["pid"]:  # a forked child that kept the handler: die as SIGTERM's default would
        os._exit(TERM_STATUS)
    with _SPEAK:
        if _NOW["terminating"]:
            return
        _NOW["terminating"] = True
    threading.Thread(target=_on_sigterm, name="pyg_dist-stop", daemon=True).start()


def _on_sigterm() -> None:
    """SIGTERM arrived: give ``main`` its grace when a peer failed, then say why this rank stops, and exit."""
    if _NOW["spoken"]:
        return  # main said its line: it stops lingering (``terminating``) and exits with its own status
    peer = _peer_said(_world_size())
    deadline = time.monotonic() + (TERM_GRACE_S if peer else TERM_QUIET_S)
    while not _NOW["spoken"] and time.monotonic() < deadline:
        time.sleep(0.02)
    from pyg_dist.rpc import verdict
    with _SPEAK:
        if _NOW["spoken"]:
            return
        why = f"after {peer}" if peer else "the launcher is ending the job (a peer exited, or it was stopped)"
        _flush(sys.stdout)  # this rank's own failure, if its teardown published one, else why it stops
        sys.stderr.write((verdict.own_line() or f"[rank {_NOW['rank']}] terminated: SIGTERM {why}") + "\n")
        _flush(sys.stderr)
        _NOW["spoken"] = True
    os._exit(TERM_STATUS)


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
