"""A partition folder is trusted only after it is checked: flipped bytes are caught by default at open (whole-file
digests, remembered per machine), a loader dtype that cannot hold the stored values is refused, names in
META.json stay inside the folder, and only regular files are opened (a FIFO or a device never blocks)."""
from __future__ import annotations

import json
import os
import shutil
import time
import zlib

import pytest
import torch

import pyg_dist
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import digests as D
from pyg_dist.format import precision as P
from pyg_dist.format.meta import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main as cli_main
from pyg_dist.store import LocalFeatureStore, LocalGraphStore, load_stores
from pyg_dist.testing import spawn_world


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Files of 100s of KiB: the 16 sampled 4 KiB blocks leave most of every byte unread."""
    data = pyg_dist.synthetic_graph(6000, 12, num_features=24, edge_dim=4, node_time=True, seed=5)
    root = tmp_path_factory.mktemp("trust") / "p2"
    Partitioner(data, 2, method="random", seed=0).save(root, progress=False)
    return root


def _copy(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / "copy")


def _unsampled_offset(size: int) -> int:
    """An offset near the middle of a file of ``size`` bytes that no sampled block covers."""
    span = max(size - D.SAMPLE_BYTES, 0)
    blocks = sorted({span * i // (D.SAMPLES - 1) for i in range(D.SAMPLES)})
    if span // (D.SAMPLES - 1) < 2 * D.SAMPLE_BYTES:                      # a small file: sampled whole anyway
        return size // 2
    mid = next(b for b in blocks if b >= size // 2)
    off = mid - D.SAMPLE_BYTES // 2 - 4                 # between two sampled blocks
    assert not any(b <= off < b + D.SAMPLE_BYTES or b <= off + 3 < b + D.SAMPLE_BYTES for b in blocks)
    return off


def _flip(path, keep_mtime: bool = False) -> None:
    st = os.stat(path)
    off = _unsampled_offset(st.st_size)
    with open(path, "r+b") as f:
        f.seek(off)
        old = f.read(4)
        f.seek(off)
        f.write(bytes(b ^ 0xFF for b in old))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# ------------------------------------------------------------------------------------ 3. bit rot by default
def test_a_flip_in_any_file_a_rank_opens_is_caught_by_default(folder, tmp_path):
    root = _copy(folder, tmp_path)
    rels = [r for r in D.listed(read_meta(root)) if r.split("/")[0] in ("part_1", "pyg_dist") and "node_time" in r
            or r.startswith("part_1/")]
    assert {"part_1/graph.pt", "part_1/node_feats.pt", "part_1/edge_feats.pt"} <= set(rels)
    assert any(r.startswith("pyg_dist/node_time/") for r in rels)            # the shared node times too
    for rel in rels:
        _flip(root / rel)
        with pytest.raises(PartitionFormatError, match=rf"{rel}.*content differs from META.json's"):
            LocalFeatureStore.from_partition(root, 1)                       # default settings
        if _unsampled_offset((root / rel).stat().st_size) != (root / rel).stat().st_size // 2:
            LocalGraphStore.from_partition(root, 1, verify=False)           # the opt-out reads sampled blocks only
        _flip(root / rel)                                                   # flipped back: opens again
        LocalFeatureStore.from_partition(root, 1)


def test_a_flip_in_an_original_id_file_is_caught_when_it_is_read(folder, tmp_path):
    """The original ids are read only to map results back (load_original_ids): checked there, once."""
    from pyg_dist.format import load_original_ids
    root = _copy(folder, tmp_path)
    rels = [r for r in D.listed(read_meta(root)) if r.startswith("pyg_dist/original_ids/")]
    assert {"pyg_dist/original_ids/node/_N.pt"} <= set(rels), rels
    want = load_original_ids(root)
    for rel in rels:
        _flip(root / rel)
        with pytest.raises(PartitionFormatError, match=rf"{rel}.*content differs from META.json's"):
            load_original_ids(root)
        _flip(root / rel)
        got = load_original_ids(root)
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_the_check_is_remembered_per_unchanged_file(folder, tmp_path, monkeypatch):
    from pyg_dist.format import verified as V
    root = _copy(folder, tmp_path)
    meta = read_meta(root)
    first = V.check_once(meta, 0)
    assert first == sum((root / r).stat().st_size for r in V.opened_files(meta, 0))   # cold: read whole
    assert V.cache_path().is_dir() and str(tmp_path / "xdg") in str(V.cache_path())
    assert len(list(V.cache_path().glob("*.json"))) == len(V.opened_files(meta, 0))  # one entry per file
    assert V.check_once(meta, 0) == 0                                      # remembered: nothing re-hashed
    _flip(root / "part_0" / "node_feats.pt", keep_mtime=True)            # bit rot: size, mtime, inode kept
    with pytest.raises(PartitionFormatError, match="node_feats.pt.*differs from what this machine verified"):
        V.check_once(meta, 0)                  # its blocks are re-read every open (a small file: all of them)
    _flip(root / "part_0" / "node_feats.pt", keep_mtime=True)
    assert V.check_once(meta, 0) == 0
    monkeypatch.setattr(V, "MAX_AGE_S", 0.0)                              # an entry past its age: re-hashed
    assert V.check_once(meta, 0) > 0
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    os.utime(root / "part_0" / "node_feats.pt")                           # any other change: re-hashed
    _flip(root / "part_0" / "node_feats.pt")
    with pytest.raises(PartitionFormatError, match="node_feats.pt.*content differs"):
        V.check_once(meta, 0)
    with pytest.raises(PartitionFormatError, match="node_feats.pt.*content differs"):
        load_stores(root, 0, verify=True)                                 # True re-hashes every time


def test_an_unwritable_cache_folder_is_no_error(folder, monkeypatch, tmp_path):
    from pyg_dist.format import verified as V
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))                    # mkdir below a file fails
    meta = read_meta(folder)
    assert V.check_once(meta, 0) > 0 and V.check_once(meta, 0) > 0       # checked every time instead
    with pytest.raises(InvalidArgumentError, match="verify"):
        load_stores(folder, 0, verify="sometimes")


def _open_rank(rank, world, root):
    from pyg_dist.train.session import TrainConfig, dist_session
    try:
        with dist_session(TrainConfig(root, timeout=60)):
            return "opened"
    except PartitionFormatError as exc:
        return str(exc)


@pytest.mark.timeout(150)
def test_two_ranks_refuse_a_flipped_feature_file_by_default(folder, tmp_path, monkeypatch):
    root = _copy(folder, tmp_path)
    _flip(root / "part_1" / "node_feats.pt")
    res = spawn_world(2, _open_rank, str(root), timeout=120)
    assert "node_feats.pt" in res[1] and "content differs" in res[1]
    assert "node_feats.pt" in res[0]                                      # rank 0 hears why rank 1 stopped


# ------------------------------------------------------------------------------------ 4. lossy casts
@pytest.fixture(scope="module")
def big_bf16(tmp_path_factory):
    data = pyg_dist.synthetic_graph(600, 6, num_features=8, seed=1)
    data.x[::7] *= 2e4                                                    # values up to ~1e5
    root = tmp_path_factory.mktemp("bf16") / "p2"
    Partitioner(data, 2, method="random", seed=0, feature_dtype="bfloat16").save(root, progress=False)
    return root, data


def test_meta_records_the_stored_range(big_bf16):
    root, data = big_bf16
    rng = read_meta(root).extra["attr_ranges"]["node"]["_N"]["x"]
    want = data.x.to(torch.bfloat16).double()
    assert rng == [float(want.min()), float(want.max())] and max(map(abs, rng)) > 65504


def test_a_dtype_that_cannot_hold_the_values_is_refused(big_bf16, tmp_path):
    root, _ = big_bf16
    for part in (0, 1):
        fs = LocalFeatureStore.from_partition(root, part)
        with pytest.raises(InvalidArgumentError, match=r"feature_dtype.*'x' of '_N'.*span \[.*\] \(META.json\)"):
            P.check_batch_dtype("DistNeighborLoader", torch.float16, fs.partition_meta, fs.columns())
        for ok in (torch.float32, torch.bfloat16, torch.float64, None):
            P.check_batch_dtype("DistNeighborLoader", ok, fs.partition_meta, fs.columns())
    old = shutil.copytree(root, tmp_path / "old")                         # written before the record
    meta = json.loads((old / "META.json").read_text())
    del meta["pyg_dist"]["attr_ranges"]
    (old / "META.json").write_text(json.dumps(meta))
    fs = LocalFeatureStore.from_partition(old, 0)
    with pytest.raises(InvalidArgumentError, match=r"'x'.*this partition's rows"):
        P.check_batch_dtype("DistNeighborLoader", torch.float16, fs.partition_meta, fs.columns())


def test_int8_rows_that_overflow_their_decoding_target_are_refused():
    from pyg_dist.errors import QuantisationError
    from pyg_dist.store.quant import QuantRows, check_chunks
    dst = torch.empty(4, 64, dtype=torch.float16)                         # a float16 folder's rows
    codes = torch.full((2, 64), 127, dtype=torch.int8)
    fine = QuantRows(codes, torch.full((2,), 10.0), torch.full((2,), 1000.0))
    assert check_chunks(1, "x", [fine], dst, 2, "int8")
    big = QuantRows(codes, torch.full((2,), 600.0), torch.full((2,), 1000.0))   # up to 77200 > 65504
    with pytest.raises(QuantisationError, match=r"partition 1.*'x'.*decode to .*float16"):
        check_chunks(1, "x", [big], dst, 2, "int8")


def _loader_rank(rank, world, root):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(root, timeout=60, feature_dtype=None)) as env:
        try:
            DistNeighborLoader(env, [3, 2], input_nodes="train_mask", batch_size=16, seed=0,
                               feature_dtype=torch.float16)
            return "built"
        except InvalidArgumentError as exc:
            return str(exc)


@pytest.mark.timeout(150)
def test_two_ranks_loader_refuses_float16_for_bfloat16_values_of_1e5(big_bf16):
    root, _ = big_bf16
    for out in spawn_world(2, _loader_rank, str(root), timeout=120):
        assert "feature_dtype" in out and "'x'" in out and "float16" in out


# ------------------------------------------------------------------------------------ 5. a folder is a folder
def _list(root, rel):
    """Lists ``rel`` in META.json with the size and digests of what it names (so only its name is wrong)."""
    meta = json.loads((root / "META.json").read_text())
    if rel == "/dev/zero":                       # 0 bytes by stat, yet an endless read
        entry = {"bytes": 0, "digest": "00000000", "sample": f"{zlib.crc32(bytes(D.SAMPLE_BYTES)):08x}"}
    else:
        entry = D.file_digests(root, [rel])[rel]
    meta["pyg_dist"]["files"][rel] = entry
    (root / "META.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("rel", ["../other/part_1/node_feats.pt", "/dev/zero", "part_0/./graph.pt",
                                 "part_0//graph.pt", "part_0/../part_1/graph.pt"])
@pytest.mark.timeout(60)
def test_names_outside_the_folder_are_refused(folder, tmp_path, capsys, rel):
    root = _copy(folder, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(root / "part_1", other / "part_1")                   # a real file out there
    _list(root, rel)
    for verify in (False, True, "once"):
        with pytest.raises(PartitionFormatError, match=rf"META.json.*'files' entry '{rel}'"):
            load_stores(root, 0, verify=verify)
    assert cli_main(["--verify", str(root)]) != 0
    assert rel in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_fifo_or_device_is_named_and_never_opened(folder, tmp_path, capsys):
    root = _copy(folder, tmp_path)
    fifo = root / "part_1" / "node_feats.pt"
    fifo.unlink()
    os.mkfifo(fifo)                                                       # an open() would block forever
    start = time.perf_counter()
    for part in (0, 1):
        for verify in (False, True, "once"):
            with pytest.raises(PartitionFormatError, match=r"part_1/node_feats.pt.*is a FIFO, not a regular file"):
                load_stores(root, part, verify=verify)
    assert cli_main(["--verify", str(root)]) == 1
    assert "is a FIFO" in capsys.readouterr().out
    stamp = root / "part_0" / "pyg_dist.json"                            # unlisted, still read at open
    stamp.unlink()
    os.mkfifo(stamp)
    with pytest.raises(PartitionFormatError, match=r"pyg_dist.json.*FIFO"):
        LocalGraphStore.from_partition(root, 0, verify=False)
    assert time.perf_counter() - start < 30


def test_symlinked_part_folders_still_open(folder, tmp_path):
    root = _copy(folder, tmp_path)
    shutil.move(root / "part_1", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", root / "part_1")
    for verify in ("once", "once", True):                                 # cold, remembered, every time
        load_stores(root, 1, verify=verify)
    assert cli_main(["--verify", str(root)]) == 0
