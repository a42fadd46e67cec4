"""Process worlds for tests: :func:`free_port` and :func:`spawn_world`.

``spawn_world(n, fn, *args)`` starts ``n`` fresh Python processes on 127.0.0.1 with torchrun's
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) plus a free ``PYG_DIST_RPC_PORT``, runs ``fn(rank, world_size, *args)`` in each, and
returns the per-rank return values. Each rank logs to its own file; on the first failure (an exception,
a non-zero exit, a signal) or on timeout every rank is killed, with its whole process group, and the
failure is re-raised with its rank, its traceback and the tail of its log.

``fn`` and ``args`` are pickled: ``fn`` must be a module-level function of an importable module (a test
module works: the child gets the parent's ``sys.path``).
"""
from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from pyg_dist._alloc import launch_env
from pyg_dist.envvars import read_flag
from pyg_dist.errors import InvalidArgumentError, PyGDistError, check_positive_int
from pyg_dist.testing.warm import start_rank

_LOG_TAIL = 4000


class RankFailedError(PyGDistError, RuntimeError):
    """A rank of a spawned world failed; carries its rank, traceback (or exit status) and log."""

    def __init__(self, rank: int, problem: str, log_path: str, log_tail: str):
        self.rank, self.problem, self.log_path, self.log_tail = rank, problem, log_path, log_tail
        super().__init__(f"rank {rank} failed: {problem}\n--- tail of {log_path} ---\n{log_tail}")


class WorldTimeoutError(PyGDistError, TimeoutError):
    """A spawned world did not finish in time; every rank was killed."""

    def __init__(self, timeout: float, pending: List[int], logs: Dict[int, str]):
        self.timeout, self.pending = timeout, pending
        tails = "\n".join(f"--- rank {r} ---\n{t}" for r, t in logs.items())
        super().__init__(f"world did not finish within {timeout:g} s; ranks {pending} still running "
                         f"(all killed)\n{tails}")


#: Where test ports are drawn: below Linux's ephemeral range (32768-60999 by default), so that no outgoing
#: connection of another test (gloo, TensorPipe) takes a port between its pick and its use.
TEST_PORTS = (20000, 32000)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (see :func:`free_ports`)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct TCP ports that were free a moment ago, drawn at random from :data:`TEST_PORTS` (the
    OS's choice of an ephemeral one when none there binds)."""
    import random
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            for port in [random.randrange(*TEST_PORTS) for _ in range(50)] + [0]:
                try:
                    sock.bind((host, port))
                    break
                except OSError:
                    continue
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _ports_apart(args: Tuple[Any, ...]) -> List[int]:
    """Two free ports (MASTER_PORT, PYG_DIST_RPC_PORT) other than any port-like int among ``args``: a port the
    caller picked and released a moment before may be handed out again."""
    taken = {a for a in args if isinstance(a, int) and not isinstance(a, bool) and 1024 <= a < 65536}
    while True:
        ports = free_ports(2)
        if not taken.intersection(ports):
            return ports


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _LOG_TAIL))
            return fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<log unreadable: {exc}>"


def _rank_env(rank: int, world_size: int, ports: List[int], extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    env = {k: v for k, v in launch_env().items() if not k.startswith("TORCHELASTIC_")}
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[0]),
        "PYG_DIST_RPC_PORT": str(ports[1]),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    })
    env.update(extra or {})
    return env


def _kill_all(procs: Dict[int, Any]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the rank and anything it started
            except (ProcessLookupError, PermissionError):
                pass
    for proc in procs.values():
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def _outcome(rank: int, proc: Any, result_path: str):
    """(ok, value_or_problem) for a finished rank."""
    try:
        with open(result_path, "rb") as fh:
            status, value = pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError):
        status, value = "error", f"exited with status {proc.returncode} without reporting a result"
        if proc.returncode is not None and proc.returncode < 0:
            value = f"killed by signal {signal.Signals(-proc.returncode).name}"
    if status == "ok" and proc.returncode != 0:
        return False, f"returned, then exited with status {proc.returncode}"
    return status == "ok", value


def spawn_world(world_size: int, fn: Callable[..., Any], *args: Any, timeout: float = 120.0,
                env: Optional[Mapping[str, str]] = None, may_die: Iterable[int] = (),
                log_dir: Optional[str] = None, fresh: Optional[bool] = None) -> List[Any]:
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes; returns their results.

    Args:
        world_size: Number of ranks.
        fn: Module-level function; its return value must be picklable.
        *args: Extra picklable arguments for ``fn``.
        timeout: Seconds for the whole world; then every rank is killed.
        env: Extra environment variables for every rank (override the defaults).
        may_die: Ranks allowed to die or fail (their result is ``None``); the others still must succeed.
        log_dir: Where the per-rank logs go (default: a temporary folder, removed on success).
        fresh: Start every rank as a fresh interpreter. Default (``$PYG_DIST_WORLD_WARM``, on): fork the ranks
            from a warm parent that has imported torch and torch_geometric (:mod:`.warm`) where ``env`` changes
            no variable read at start-up; a fresh interpreter otherwise.

    Raises:
        RankFailedError: the first rank (not in ``may_die``) to fail, with traceback and log tail.
        WorldTimeoutError: ``timeout`` passed; names the ranks still running.

    Example:
        >>> # in my_tests.py: def add_rank(rank, world_size, base): return base + rank
        >>> spawn_world(2, my_tests.add_rank, 10, timeout=60)   # doctest: +SKIP
        [10, 11]
    """
    check_positive_int("spawn_world", "world_size", world_size)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise InvalidArgumentError("spawn_world", "timeout", timeout, "a positive number of seconds")
    try:
        pickle.dumps((fn, args))
    except Exception as exc:  # noqa: BLE001 -- lambdas, local functions, unpicklable args
        raise InvalidArgumentError("spawn_world", "fn/args", (fn, args),
                                   f"a module-level function and picklable arguments ({exc})") from exc
    may_die = set(may_die)
    own_dir = log_dir is None
    logs: str = tempfile.mkdtemp(prefix="pyg_dist_world_") if log_dir is None else log_dir
    os.makedirs(logs, exist_ok=True)
    ports = _ports_apart(args)
    warm = read_flag("PYG_DIST_WORLD_WARM", True) if fresh is None else not fresh
    default_env = _rank_env(0, world_size, ports, None) if warm else None
    procs: Dict[int, Any] = {}
    try:
        for rank in range(world_size):
            env_r = _rank_env(rank, world_size, ports, env)
            procs[rank] = _start_rank(rank, world_size, (fn, args), logs, env_r, default_env)
        results = _supervise(procs, logs, timeout, may_die)
    finally:
        _kill_all(procs)
    if own_dir:
        shutil.rmtree(logs, ignore_errors=True)
    return results


def _paths(log_dir: str, rank: int):
    return (os.path.join(log_dir, f"rank{rank}.job"), os.path.join(log_dir, f"rank{rank}.result"),
            os.path.join(log_dir, f"rank{rank}.log"))


def _start_rank(rank: int, world_size: int, work: Tuple[Callable[..., Any], Tuple[Any, ...]], log_dir: str,
                env: Dict[str, str], default_env: Optional[Dict[str, str]]) -> Any:
    """A rank's process: forked from a warm parent when ``default_env`` is given and ``env`` allows it
    (:func:`.warm.start_rank`), else a fresh interpreter."""
    fn, args = work
    job, result, log = _paths(log_dir, rank)
    with open(job, "wb") as fh:
        pickle.dump((fn, rank, world_size, args, result), fh)
    if default_env is not None:
        open(log, "wb").close()
        forked = start_rank(rank, job, log, env, default_env)
        if forked is not None:
            return forked
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "import sys; from pyg_dist.testing.rank import rank_main; rank_main(sys.argv[1])",
             job], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)


def _supervise(procs: Dict[int, Any], log_dir: str, timeout: float, may_die: set) -> List[Any]:
    deadline = time.monotonic() + timeout
    results: Dict[int, Any] = {}
    while len(results) < len(procs):
        for rank, proc in procs.items():
            if rank in results or proc.poll() is None:
                continue
            ok, value = _outcome(rank, proc, _paths(log_dir, rank)[1])
            if not ok and rank not in may_die:
                log = _paths(log_dir, rank)[2]
                raise RankFailedError(rank, value, log, _tail(log))
            results[rank] = value if ok else None
        if len(results) == len(procs):
            break
        if time.monotonic() > deadline:
            pending = [r for r in procs if r not in results]
            raise WorldTimeoutError(timeout, pending, {r: _tail(_paths(log_dir, r)[2]) for r in pending})
        time.sleep(0.05)
    return [results[r] for r in sorted(procs)]
