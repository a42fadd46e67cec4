"""No orphans: a rank whose torchrun agent dies ends within the failure bound, whatever its loop touches.

torchrun's agent starts each rank as a child process (``subprocess.Popen`` in a session of its own) and
stops the ranks when it stops. An agent that is SIGKILLed (or OOM-killed) cannot: its ranks are re-parented
(to ``init`` or a subreaper) and would train on, unseen, for as long as their loop touches nothing that
fails (measured before this module: 1,952 more steps in 40 s). :func:`dist_session` therefore starts an
:class:`OrphanWatch` when, and only when, the process was launched by a torchrun agent
(``$TORCHELASTIC_RUN_ID`` is set): it records the parent's pid at start and

* polls ``os.getppid()`` from a daemon thread (every ``bound / 10`` s, at most 1 s): a changed parent
  means the agent is gone. This works wherever Python runs, whatever the main thread is blocked in;
* on Linux, also asks the kernel for a signal when the parent dies (``prctl(PR_SET_PDEATHSIG)``, through
  ctypes; only from the main thread and while that signal has no handler of the application's). The kernel
  sends it when the parent *thread* that started the process ends, which need not be the agent's death:
  the handler acts only when ``os.getppid()`` changed too, and otherwise ignores it.

When the agent is gone the rank writes one typed line on stderr, ``[rank r] AgentLostError: this rank's
parent, the torchrun agent pid N, is gone ...``, runs a bounded best-effort teardown (at most
``min(5, bound / 4)`` s: non-graceful RPC shutdown, then the process group) and ends with
``os._exit(EXIT_CODE)``: within ``interval + grace``, well inside the failure bound.

Not watched: a plain ``python script.py`` (no agent: its shell exiting normally never ends it), and tasks
that ``srun`` starts directly (Slurm's step daemon tracks and kills a step's processes itself; torchrun
under ``srun``, as ``examples/slurm/train.sbatch`` does, is watched like any torchrun). The watch follows the
rank's direct parent: a wrapper between the agent and Python (``torchrun --no-python run.sh``) must
``exec`` Python for the agent to be that parent.

Example:
    >>> launched_by_agent({"TORCHELASTIC_RUN_ID": "job1"}), launched_by_agent({})
    (True, False)
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import threading
from typing import Any, Callable, ContextManager, Mapping, Optional

from pyg_dist import timeouts
from pyg_dist.envvars import raw
from pyg_dist.errors import AgentLostError, InvalidArgumentError, check_seconds

#: Set by torchrun's agent in every rank's environment.
AGENT_ENV = "TORCHELASTIC_RUN_ID"
#: Exit status of a rank ended because its agent is gone.
EXIT_CODE = 1
_PR_SET_PDEATHSIG = 1


def launched_by_agent(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process is a rank a torchrun agent started (``$TORCHELASTIC_RUN_ID`` set)."""
    return bool(raw(AGENT_ENV, environ))


def _death_signal() -> Optional[int]:
    """The signal the kernel sends on the parent's death: one real-time signal nobody else handles."""
    base = getattr(signal, "SIGRTMIN", None)
    return None if base is None else int(base) + 3


def _prctl_pdeathsig(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` (0 clears it); ``False`` where there is no such call (not Linux)."""
    if not os.uname().sysname == "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class OrphanWatch:
    """Ends this process when its parent (the torchrun agent) is gone; see the module docstring.

    Args:
        rank: This process's rank (for the line on stderr).
        on_orphan: Best-effort teardown, called with the seconds it has (``grace``) from a helper thread before
            the process ends (it is not waited for longer).
        bound: The failure bound (default: :func:`pyg_dist.timeouts.failure_timeout`).
        parent: The parent to watch (default: ``os.getppid()`` now).

    Example:
        >>> with OrphanWatch(0) as watch:                       # doctest: +SKIP
        ...     train()                                         # ends the process if the agent dies
    """

    def __init__(self, rank: int, on_orphan: Optional[Callable[[float], None]] = None, bound: Optional[float] = None,
                 parent: Optional[int] = None):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise InvalidArgumentError("OrphanWatch", "rank", rank, "a non-negative int")
        self.rank, self.on_orphan = rank, on_orphan
        self.bound = timeouts.failure_timeout() if bound is None else check_seconds("OrphanWatch", "bound", bound)
        self.parent = os.getppid() if parent is None else parent
        self.interval = max(0.05, min(1.0, self.bound / 10))
        self.grace = max(0.2, min(5.0, self.bound / 4))
        self.signal_armed = False
        #: Parent-death signals that came while the parent process lived on (its starting thread ended).
        self.ignored_signals = 0
        self._stop = threading.Event()
        self._fired = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._old_handler: Any = None

    def __enter__(self) -> "OrphanWatch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "OrphanWatch":
        """Starts the poll thread and, where possible, the kernel's parent-death signal."""
        self._arm_signal()
        self._thread = threading.Thread(target=self._poll, name="pyg_dist-orphan-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops watching (the session is over): the thread ends, the signal and its handler are undone."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.interval + 1.0)
        signum = _death_signal()
        if self.signal_armed and signum is not None:
            _prctl_pdeathsig(0)
            if threading.current_thread() is threading.main_thread():
                signal.signal(signum, self._old_handler)
            self.signal_armed = False

    def _arm_signal(self) -> None:
        signum = _death_signal()
        if signum is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signum) not in (signal.SIG_DFL, None):
            return  # the application handles that signal: the poll thread alone watches
        self._old_handler = signal.signal(signum, self._on_signal)
        self.signal_armed = _prctl_pdeathsig(signum)
        if not self.signal_armed:
            signal.signal(signum, self._old_handler)

    def _on_signal(self, signum, frame) -> None:
        if os.getppid() != self.parent:
            self.orphaned()
        else:  # the thread that started this process ended, the agent lives on
            self.ignored_signals += 1

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            if os.getppid() != self.parent:
                self.orphaned()
                return

    def orphaned(self) -> None:
        """Writes the typed line, runs the bounded teardown and ends the process (once, whoever calls)."""
        if not self._fired.acquire(blocking=False):
            return
        err = AgentLostError(self.parent, os.getppid(), self.bound)
        try:  # a raw write: the main thread may hold sys.stderr's lock
            os.write(2, f"[rank {self.rank}] {type(err).__name__}: {err}\n".encode())
        except OSError:
            pass
        if self.on_orphan is not None:
            helper = threading.Thread(target=self._teardown, name="pyg_dist-orphan-teardown", daemon=True)
            helper.start()
            helper.join(self.grace)
        os._exit(EXIT_CODE)

    def _teardown(self) -> None:
        try:
            if self.on_orphan is not None:
                self.on_orphan(self.grace)
        except BaseException as exc:  # noqa: BLE001 -- said on stderr; the process ends next whatever happened
            try:
                os.write(2, f"pyg_dist: teardown after the agent was lost failed: {type(exc).__name__}: "
                         f"{exc}\n".encode())
            except OSError:
                pass


def watch_agent(rank: int, on_orphan: Optional[Callable[[bool, float], None]] = None) -> ContextManager:
    """An :class:`OrphanWatch` (to enter: it starts then) when a torchrun agent launched this process, else a
    context that does nothing (a plain ``python script.py`` is never ended by its shell's exit).
    ``on_orphan(False, grace)`` has :func:`pyg_dist.train.session.teardown`'s signature: RPC without waiting for
    peers, then the process group."""
    if not launched_by_agent():
        return contextlib.nullcontext()
    teardown = (lambda grace: on_orphan(False, grace)) if on_orphan is not None else None
    return OrphanWatch(rank, on_orphan=teardown)


__all__ = ["OrphanWatch", "watch_agent", "launched_by_agent", "AGENT_ENV", "EXIT_CODE"]
