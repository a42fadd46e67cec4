"""The orphan watch's two paths, with real processes: the kernel's parent-death signal (which also fires when
only the parent *thread* that started the child ends: then the child must live on), and the poll thread."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pyg_dist.train import orphan

#: A parent that starts the child from a helper thread which then ends, and lives on until killed.
PARENT = textwrap.dedent("""
    import subprocess, sys, threading, time
    def start():
        subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
        time.sleep(2.0)            # the child is armed by then
    t = threading.Thread(target=start)
    t.start(); t.join()            # the child's parent thread is gone, the parent process is not
    time.sleep(600)
""")
#: The child: an OrphanWatch whose poll thread is slowed to 60 s (signal path) or that is started off the main
#: thread (no signal handler there: poll path); prints its pid and how it is armed, then loops.
CHILD = textwrap.dedent("""
    import os, sys, threading, time
    from pyg_dist.train.orphan import OrphanWatch
    w = OrphanWatch(1, on_orphan=lambda grace: print("teardown", grace, flush=True), bound=2.0)
    if sys.argv[1] == "signal":
        w.interval = 60.0
        w.start()
    else:
        t = threading.Thread(target=w.start); t.start(); t.join()
    print(os.getpid(), w.signal_armed, flush=True)
    seen = 0
    while True:
        time.sleep(0.01)
        if w.ignored_signals != seen:
            seen = w.ignored_signals
            print("ignored", seen, flush=True)
""")


def _gone(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _until_gone(pid: int, limit: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if _gone(pid):
            return time.monotonic() - t0
        time.sleep(0.01)
    return float("inf")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["signal", "poll"])
def test_child_outlives_its_parent_thread_and_ends_with_its_parent_process(path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, path], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.STDOUT, start_new_session=True)
    child = None
    try:
        pid, armed = parent.stdout.readline().split()
        child = int(pid)
        assert armed == ("True" if path == "signal" else "False")
        if path == "signal":                  # the signal for the parent thread's end came and was ignored
            assert parent.stdout.readline().strip() == "ignored 1"
        time.sleep(2.5)
        assert not _gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        took = _until_gone(child, 10.0)
        rest = parent.stdout.read()
        # signal: at once (the poll thread sleeps 60 s); poll: within its interval (0.2 s) + grace
        assert took < (1.0 if path == "signal" else 2.0), (took, rest)
        assert f"[rank 1] AgentLostError: this rank's parent, the torchrun agent pid {parent.pid}, is gone" in rest
        assert "teardown 0.5" in rest
    finally:
        for pid in (child, parent.pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGKILL)
        parent.wait()


def test_watch_only_under_an_agent(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert isinstance(orphan.watch_agent(0), contextlib.nullcontext)        # plain `python script.py`
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    watch = orphan.watch_agent(0)
    assert isinstance(watch, orphan.OrphanWatch) and watch.parent == os.getppid()
    with watch:                                                              # same parent: nothing happens
        time.sleep(3 * watch.interval)
    assert not watch._thread.is_alive()
    assert signal.getsignal(orphan._death_signal()) in (signal.SIG_DFL, None)   # the handler is undone


def test_bad_arguments():
    from pyg_dist.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="rank"):
        orphan.OrphanWatch(-1)
    with pytest.raises(InvalidArgumentError, match="bound"):
        orphan.OrphanWatch(0, bound=0)
