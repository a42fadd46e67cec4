"""Script entry points: one line per pyg_dist failure, logging per rank, the compile announcement."""
from __future__ import annotations

import logging

import pytest

from pyg_dist.errors import InvalidArgumentError, PartitionFormatError, RemoteCallError
from pyg_dist.train.entry import one_line, progress, run_main, setup_logging


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
