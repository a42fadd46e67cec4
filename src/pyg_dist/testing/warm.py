"""A warm parent for test ranks: one process that has imported torch and torch_geometric forks every rank.

A fresh interpreter spends about 4 s of CPU importing torch and torch_geometric before a rank does anything; a
suite that starts a few hundred ranks spends most of its time there. :func:`~.world.spawn_world` asks a
:class:`WarmParent` instead: a process started once, with the ranks' environment, that imports :data:`PRELOAD`
and then, for each rank, forks a *watcher*, which forks the *rank* and waits for it. The rank becomes what
``subprocess.Popen`` would have made (its own session, stdin from ``/dev/null``, stdout and stderr in its log,
the requested environment, working folder, ``sys.path`` and ``sys.argv``; the random generators re-seeded from
the OS, as a fresh interpreter has them) and runs :func:`~.rank.rank_main`; the watcher writes its exit
status (``Popen``'s ``returncode`` convention) next to the job file. Ranks alternate between :data:`SLOTS` parents,
each started with its own ``PYTHONHASHSEED``, so that neighbouring ranks order their sets and dicts differently,
as fresh interpreters do.

Only variables read after start-up may differ from the parent's environment (:func:`read_late`): the ranks' own
keys, ``PYG_DIST_*`` (pyg_dist is not preloaded), torchrun's ``TORCHELASTIC_*``, the interface names gloo and
TensorPipe read when they open sockets, pytest's current test. A world whose environment differs in anything else
(threads, allocator, numba, ``LD_*``) gets fresh interpreters, as does every world when ``PYG_DIST_WORLD_WARM=0``
or ``spawn_world(fresh=True)``.
"""
from __future__ import annotations

import atexit
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, Mapping, Optional

from pyg_dist import envvars
from pyg_dist.testing.rank import die_with_parent, rank_main

#: Imported once by the warm parent: what every rank would otherwise import itself.
PRELOAD = ("torch", "torch_geometric")

#: Variables a rank reads only after it starts (so a forked rank may take them from its request).
LATE_KEYS = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                       "PYTHONPATH", "PYTEST_CURRENT_TEST", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"})

#: Prefixes of such variables: pyg_dist's own (pyg_dist is not preloaded) and torchrun's (read at rendezvous).
LATE_PREFIXES = ("PYG_DIST_", "TORCHELASTIC_")

_REPLY_TIMEOUT = 120.0


def read_late(name: str) -> bool:
    """Whether variable ``name`` is read only after a rank starts (a forked rank may differ there)."""
    return name in LATE_KEYS or name.startswith(LATE_PREFIXES)


def base_of(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` less the variables :func:`read_late` names: what a forked rank inherits from its parent."""
    return {k: v for k, v in env.items() if not read_late(k)}


class ForkedRank:
    """A rank forked by the warm parent, seen as ``subprocess.Popen`` sees a child: ``pid`` (its session's
    leader, so ``killpg`` reaches what it started), :meth:`poll`, :meth:`wait`, ``returncode``."""

    def __init__(self, pid: int, status_path: str):
        self.pid, self.status_path = pid, status_path
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        """The rank's exit status once its watcher has written it (``-signal`` if a signal ended it), else
        ``None``."""
        if self.returncode is None and os.path.exists(self.status_path):
            with open(self.status_path) as fh:
                self.returncode = int(fh.read())
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        """The exit status, waiting up to ``timeout`` seconds (``subprocess.TimeoutExpired`` after)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code


class WarmParent:
    """The warm parent process (see the module's docstring); ``base`` is the environment it was started with,
    less the late variables."""

    def __init__(self, env: Mapping[str, str]):
        self.base = base_of(env)
        own = dict(env, PYTHONHASHSEED=str(random.randrange(1, 2**32)))  # its ranks' string hashes: its own draw
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from pyg_dist.testing.warm import serve; serve()"], env=own,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a rank with environment ``env`` can be forked from this parent (it is alive, and ``env``
        differs from its own in late variables only)."""
        return self.proc.poll() is None and base_of(env) == self.base

    def start(self, job: str, log: str, env: Mapping[str, str]) -> Optional[ForkedRank]:
        """Forks a rank for ``job`` (``None`` when the parent does not answer: the caller starts a fresh one)."""
        status = job + ".exit"
        request = {"job": job, "log": log, "env": dict(env), "cwd": os.getcwd(), "status": status}
        send, answer = self.proc.stdin, self.proc.stdout
        try:
            if send is None or answer is None:
                raise OSError("the warm parent has no pipes")
            send.write((json.dumps(request) + "\n").encode())
            send.flush()
            ready, _, _ = select.select([answer], [], [], _REPLY_TIMEOUT)
            pid = int(json.loads(answer.readline() if ready else b"")["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            self.close()
            return None
        return ForkedRank(pid, status)

    def close(self) -> None:
        """Ends the warm parent (ranks it forked die with it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


#: Ranks alternate between this many warm parents, each with its own ``PYTHONHASHSEED``: a rank's set and dict
#: orders differ from its neighbour's, as between fresh interpreters (a test of ranks that must agree sees it).
SLOTS = 2

_PARENTS: Dict[int, WarmParent] = {}  # one per slot: started on first use, replaced when the environment moved


def start_rank(rank: int, job: str, log: str, env: Mapping[str, str],
               default_env: Mapping[str, str]) -> Optional[ForkedRank]:
    """Forks rank ``rank`` (environment ``env``) from a warm parent, or ``None``: ``env`` differs from
    ``default_env`` (what a world without extra variables gets) in a variable read at start-up, or the parent
    did not answer. A parent for ``default_env`` is started, or replaced, as needed."""
    if base_of(env) != base_of(default_env):
        return None
    slot = rank % SLOTS
    parent = _PARENTS.get(slot)
    if parent is None or not parent.serves(env):
        if parent is not None:
            parent.close()
        elif not _PARENTS:
            atexit.register(_close_all)
        parent = _PARENTS[slot] = WarmParent(default_env)
    return parent.start(job, log, env)


def _close_all() -> None:
    for parent in _PARENTS.values():
        parent.close()


def serve() -> None:
    """The warm parent's main loop: preload, then one watcher per request line on stdin, until it closes."""
    die_with_parent()
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # watchers are reaped by the kernel
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if os.fork() == 0:
            _watch(request)


def _watch(request: Dict[str, Any]) -> None:
    """A watcher: forks the rank, answers its pid, waits for it and writes its exit status."""
    try:
        die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            _become_rank(request)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 0)
        os.dup2(quiet, 1)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        tmp = request["status"] + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(status))
        os.replace(tmp, request["status"])
    finally:
        os._exit(0)


def _become_rank(request: Dict[str, Any]) -> None:
    """The rank: what ``subprocess.Popen(start_new_session=True)`` of a fresh ``python -c`` would have set up,
    then :func:`~.rank.rank_main` (which never returns)."""
    try:
        os.setsid()
        quiet = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(quiet, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        envvars.become(request["env"], why="a rank forked by the warm parent takes the environment it was asked for")
        os.chdir(request["cwd"])
        wanted = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = wanted
        sys.argv = ["-c", request["job"]]
        _reseed()
        rank_main(request["job"])
    except BaseException:  # noqa: BLE001 -- the rank could not become one: its log says why, its status is 70
        traceback.print_exc()
    finally:
        os._exit(70)


def _reseed() -> None:
    """The generators as a fresh interpreter has them, each drawn from the OS: torch's default one and numpy's
    global one (Python's ``random`` re-seeds itself after a fork)."""
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


__all__ = ["WarmParent", "ForkedRank", "start_rank", "read_late", "base_of", "serve", "PRELOAD", "LATE_KEYS",
           "LATE_PREFIXES", "SLOTS"]
