"""Script entry points: one line per pyg_dist failure, logging per rank, the compile announcement."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import pytest

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError, RemoteCallError
from pyg_dist.train import entry
from pyg_dist.train.entry import one_line, progress, run_main, setup_logging


@pytest.fixture(autouse=True)
def _no_bounded_exit_for_pytest(monkeypatch):
    """``run_main`` called in this process arms a bounded exit for the failure or interrupt it ends with; the
    test's end takes it back (pytest's own exit is not that rank's)."""
    monkeypatch.setitem(entry._NOW, "leaving", None)


def _fail(exc):
    def main(argv):
        raise exc
    return main


def test_run_main_prints_one_line_and_exits_1(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(SystemExit) as info:
        run_main(_fail(PartitionFormatError("/x/META.json", "file is missing")), [])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err == "[rank 3] PartitionFormatError: partition format error in '/x/META.json': file is missing\n"


def test_run_main_traceback_switch_and_other_errors(capsys, monkeypatch):
    monkeypatch.setenv("PYG_DIST_TRACEBACK", "1")
    with pytest.raises(SystemExit):
        run_main(_fail(InvalidArgumentError("f", "x", 1, "2")), [])
    assert "Traceback" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):  # not a pyg_dist error: left to Python
        run_main(_fail(ZeroDivisionError()), [])
    with pytest.raises(SystemExit) as info:
        run_main(_fail(KeyboardInterrupt()), [])
    assert info.value.code == 130 and "interrupted" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        run_main(lambda argv: None, [])
    assert info.value.code == 0


#: A script whose ``main`` leaves a thread that never ends (a thread pool's task, or a plain thread), then ends
#: as ``HOW`` says: the interpreter's exit would wait for that thread for ever.
STUCK = textwrap.dedent("""
    import concurrent.futures, sys, threading
    from pyg_dist.errors import CheckpointError
    from pyg_dist.train.entry import run_main

    def stuck_here_for_ever():
        threading.Event().wait()

    class Finalized:
        def __del__(self):  # run as Python finalizes this module, after daemon threads were stopped
            stuck_here_for_ever()

    def main(argv):
        global last
        how, where = argv
        if where == "pool":
            concurrent.futures.ThreadPoolExecutor(1).submit(stuck_here_for_ever)
        elif where == "thread":
            threading.Thread(target=stuck_here_for_ever).start()
        else:
            last = Finalized()
        if how == "interrupt":
            raise KeyboardInterrupt
        raise CheckpointError("cannot write /x: No space left on device")

    run_main(main, sys.argv[1:])
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how,where,status,line", [
    ("interrupt", "pool", 130, "[rank 0] interrupted"),
    ("interrupt", "thread", 130, "[rank 0] interrupted"),
    ("fail", "pool", 1, "[rank 0] CheckpointError: cannot write /x: No space left on device")])
def test_a_failed_or_interrupted_rank_whose_exit_hangs_ends_after_the_grace_with_its_stacks(tmp_path, how, where,
                                                                                          status, line):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script), how, where], capture_output=True, text=True, timeout=90)
    took = time.monotonic() - start
    assert done.returncode == status, done.stderr
    assert entry.EXIT_GRACE_S <= took < entry.EXIT_GRACE_S + 30, took
    err = done.stderr.splitlines()
    assert err[0] == line, done.stderr      # its own line first, and the last one that names the rank
    assert [e for e in err if e.startswith("[rank ")] == [line]
    assert err[1].startswith("pyg_dist (rank 0): the exit still runs 5 s after the rank's last line"), done.stderr
    assert "in stuck_here_for_ever" in done.stderr   # the stack of the thread that holds the exit


@pytest.mark.timeout(120)
def test_a_hang_in_python_s_late_finalization_is_ended_by_the_backstop(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script), "interrupt", "finalizer"], capture_output=True, text=True,
                          timeout=90)
    took = time.monotonic() - start
    assert done.returncode == 1, done.stderr    # faulthandler's exit status
    assert entry.EXIT_GRACE_S + 2 <= took < entry.EXIT_GRACE_S + 30, took
    assert done.stderr.splitlines()[0] == "[rank 0] interrupted", done.stderr
    assert "Timeout (0:00:07)!" in done.stderr and "in __del__" in done.stderr, done.stderr


def test_a_rank_that_ends_cleanly_is_not_cut_short_by_the_bound(tmp_path):
    """Success is not bounded: a thread the script left running is joined as Python always does."""
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent("""
        import sys, threading, time
        from pyg_dist.train.entry import run_main

        def main(argv):
            threading.Thread(target=lambda: (time.sleep(7), print("joined"))).start()

        run_main(main, [])
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert (done.returncode, done.stdout, done.stderr) == (0, "joined\n", "")


def test_one_line_of_a_remote_error_keeps_the_remote_exception():
    exc = RemoteCallError("pyg_dist.one_hop", 1, 3, "Traceback (most recent call last):\n  File x\nValueError: bad")
    assert one_line(exc) == ("RemoteCallError: remote call 'pyg_dist.one_hop' to partition 1 (rpc rank 3) failed: "
                             "... ValueError: bad")


def test_logging_per_rank_and_progress_off_without_a_terminal(capsys):
    setup_logging(rank=1)
    logging.getLogger("examples").info("hidden")
    setup_logging(rank=0)
    logging.getLogger("examples").info("shown")
    setup_logging(quiet=True, rank=0)
    logging.getLogger("pyg_dist").info("start-up message")
    logging.getLogger("examples").info("result")
    assert capsys.readouterr().out == "shown\nresult\n"
    items = [1, 2]
    assert progress(items, "x") is items  # stderr is not a terminal under pytest


def test_warmup_announces_a_slow_load(caplog):
    from pyg_dist.ops import numba_available, numba_unavailable_reason, warmup
    if not numba_available():
        pytest.skip(f"needs the numba kernels: {numba_unavailable_reason()}")
    with caplog.at_level(logging.INFO, logger="pyg_dist"):
        warmup(announce_after=0.0)
    text = caplog.text
    assert "compiling sampling kernels" in text and "sampling kernels ready in" in text


def test_every_lazy_public_name_imports_and_is_its_modules_object():
    import importlib

    import pyg_dist
    import pyg_dist.distributed
    import pyg_dist.embedding
    import pyg_dist.tma
    for pkg in (pyg_dist, pyg_dist.distributed, pyg_dist.embedding, pyg_dist.tma):
        assert pkg.__all__, pkg.__name__
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            owner = importlib.import_module(getattr(obj, "__module__", pkg.__name__))
            assert getattr(owner, name, obj) is obj, (pkg.__name__, name)
    assert pyg_dist.DistEmbedding is pyg_dist.embedding.DistEmbedding and pyg_dist.run_tma is pyg_dist.tma.run_tma
