"""Partition writes are durable and honest: a full disk mid-way is a one-line FileWriteError naming the file,
"No space left on device" and the bytes needed and free, leaving the old folder byte-identical and no
temporary folder; a write whose size is known is refused before anything is written; an overwrite is one
atomic exchange (or two renames where the exchange is unavailable); a real full tmpfs behaves the same."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from pyg_dist import _fsio
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import FileWriteError
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.partition.source import typed_graph
from pyg_dist.partition.writer import estimate_bytes

_Usage = namedtuple("_Usage", "total used free")


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(600, 6, num_features=8, node_time=True, edge_dim=2, seed=3)


def _snapshot(root: Path):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _full_after(calls: int, monkeypatch):
    """``torch.save`` writes its first ``calls - 1`` files, then the disk is full half-way through the next."""
    real, seen = torch.save, []

    def save(obj, f, *args, **kwargs):
        seen.append(f)
        if len(seen) == calls:
            f.write(b"PK\x03\x04 partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(obj, f, *args, **kwargs)
    monkeypatch.setattr(torch, "save", save)
    return seen


@pytest.mark.parametrize("partitioner", ["memory", "ooc"])
def test_a_full_disk_mid_write_is_typed_and_keeps_the_old_folder(tmp_path, data, monkeypatch, partitioner):
    out = tmp_path / "out"
    make = (lambda seed: Partitioner(data, 2, "random", seed=seed, cache_ratio=0.3)) if partitioner == "memory" \
        else (lambda seed: OutOfCorePartitioner(data, 2, "random", seed=seed, chunk_size=500))
    make(0).save(out, progress=False)
    before = _snapshot(out)
    _full_after(4, monkeypatch)
    with pytest.raises(FileWriteError) as e:
        make(1).save(out, overwrite=True, progress=False)
    msg = str(e.value)
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    assert "No space left on device" in msg and "needs" in msg and "free on that filesystem" in msg
    assert "\n" not in msg and Path(e.value.path).name.endswith(".pt") and e.value.path in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]          # no temporary folder left
    assert _snapshot(out) == before                                       # the old folder, byte for byte


def test_a_folder_that_cannot_fit_is_refused_before_any_file(tmp_path, data, monkeypatch):
    needed = estimate_bytes(typed_graph(data), 2, False)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: _Usage(10 ** 12, 10 ** 12 - 4096, 4096))
    monkeypatch.setattr(torch, "save", lambda *a, **k: pytest.fail("a file was written"))
    with pytest.raises(FileWriteError, match=rf"cannot write '.*out'.*No space left on device.*needs .*{needed} "
                       r"bytes.*4096 bytes free on that filesystem; the 2 partitions.*checked before writing") as e:
        Partitioner(data, 2, "random").save(tmp_path / "out", progress=False)
    assert e.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_the_estimate_is_a_close_lower_bound(tmp_path, data):
    g = typed_graph(data)
    for method, parts in (("random", 3), ("hybrid", 2)):
        kw = {"base_method": "random"} if method == "hybrid" else {}
        Partitioner(data, parts, method, **kw).save(tmp_path / method, progress=False)
        written = sum(f["bytes"] for f in read_meta(tmp_path / method).extra["files"].values())
        assert 0.8 * written < estimate_bytes(g, parts, method == "hybrid") <= written, method


def _spy_renames(monkeypatch, exchange_works: bool):
    calls = {"exchange": 0, "rename": 0}
    real_exchange, real_rename = _fsio.exchange, os.rename

    def exchange(a, b):
        calls["exchange"] += 1
        return real_exchange(a, b) if exchange_works else False

    def rename(a, b):
        calls["rename"] += 1
        return real_rename(a, b)
    monkeypatch.setattr(_fsio, "exchange", exchange)
    monkeypatch.setattr(os, "rename", rename)
    return calls


@pytest.mark.parametrize("exchange_works", [True, False])
def test_an_overwrite_is_one_swap(tmp_path, data, monkeypatch, exchange_works):
    out = tmp_path / "out"
    calls = _spy_renames(monkeypatch, exchange_works)
    Partitioner(data, 2, "random", seed=0).save(out, progress=False)
    assert calls == {"exchange": 0, "rename": 1}                           # a fresh folder: one rename
    old = read_meta(out).extra["fingerprint"]
    (out / "stray.txt").write_text("from the old folder")
    Partitioner(data, 2, "random", seed=1).save(out, overwrite=True, progress=False)
    assert calls == ({"exchange": 1, "rename": 1} if exchange_works else {"exchange": 1, "rename": 3})
    assert read_meta(out).extra["fingerprint"] != old and not (out / "stray.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]          # no .old / .tmp sibling


def test_exchange_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / f"{d.name}.txt").write_text(d.name)
    if not _fsio.exchange(a, b):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here: the two-rename path is tested above")
    assert [p.name for p in a.iterdir()] == ["b.txt"] and [p.name for p in b.iterdir()] == ["a.txt"]
    with pytest.raises(FileNotFoundError):
        _fsio.exchange(a, tmp_path / "missing")


def test_save_reports_the_disk_error_torch_hides(tmp_path, monkeypatch):
    """torch turns a failed write of its file object into "unexpected pos ..."; the error of the file is kept."""
    real_open = open

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, b):
            self.n += len(b)
            if self.n > 3000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(_fsio, "open", lambda *a, **k: Full(real_open(*a, **k)), raising=False)
    with pytest.raises(FileWriteError, match=r"x\.pt': No space left on device \(needs 40000 bytes, .* free"):
        _fsio.save({"w": torch.zeros(10000)}, tmp_path / "x.pt")
    assert list(tmp_path.iterdir()) == []                                 # the partial file is removed


def _mount_tmpfs(where: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs root (mount -t tmpfs); the monkeypatched tests cover the logic")
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def test_a_real_full_tmpfs(tmp_path, monkeypatch):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    try:
        small, big = synthetic_graph(300, 4, seed=1), synthetic_graph(12000, 10, num_features=16, seed=2)
        out = disk / "out"
        Partitioner(small, 2, "random").save(out, progress=False)
        before = _snapshot(out)
        with pytest.raises(FileWriteError, match=r"No space left on device.*checked before writing"):
            Partitioner(big, 2, "random").save(out, overwrite=True, progress=False)   # the check, for real
        monkeypatch.setattr(_fsio, "check_free", lambda *a: None)           # now the kernel says it
        with pytest.raises(FileWriteError, match=r"\.pt': No space left on device \(needs .* free on that") as e:
            Partitioner(big, 2, "random").save(out, overwrite=True, progress=False)
        assert e.value.errno == errno.ENOSPC and "\n" not in str(e.value)
        assert sorted(p.name for p in disk.iterdir()) == ["out"] and _snapshot(out) == before
    finally:
        subprocess.run(["umount", str(disk)], check=False)
