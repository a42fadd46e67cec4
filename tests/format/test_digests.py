"""META.json lists every file of a folder with its size and content digest, and the folder id (fingerprint) is
derived from them: at open a file of the wrong size fails (one stat), with verify=True a file of the right size
but other content fails too, naming the file; ``pyg-dist-partition --verify`` reports per partition."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zlib

import pytest
import torch

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.store import LocalGraphStore, load_stores

CACHES = ("feature_cache.pt", "topology_cache.pt")


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(500, 6, num_features=4, node_time=True, edge_dim=2, seed=7)


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """Folders of the same graph: random seeds 0 (twice) and 1, and metis seed 0."""
    root = tmp_path_factory.mktemp("runs")
    for name, method, seed in (("r0", "random", 0), ("r0b", "random", 0), ("r1", "random", 1), ("m0", "metis", 0)):
        Partitioner(data, 2, method, seed=seed, cache_ratio=0.2, cache_topology=True).save(root / name,
                                                                                            progress=False)
    return root


def _copy(runs, name, tmp_path):
    shutil.copytree(runs / name, tmp_path / name)
    return tmp_path / name


def _oracle_fingerprint(files):
    """The documented rule: sha256 over the sorted [path, bytes, digest] of the non-cache files, 32 hex digits."""
    h = hashlib.sha256()
    for rel in sorted(r for r in files if r.split("/")[-1] not in CACHES):
        h.update(json.dumps([rel, files[rel]["bytes"], files[rel]["digest"]]).encode() + b"\n")
    return h.hexdigest()[:32]


def test_every_file_is_listed_with_its_size_and_digest(runs):
    root = runs / "r0"
    section = read_meta(root).extra
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    stamps = {f"part_{p}/pyg_dist.json" for p in range(2)}
    assert set(section["files"]) == on_disk - stamps - {"META.json"} and section["files_digest"] == "crc32"
    assert {f"part_{p}/{c}" for p in range(2) for c in CACHES} <= set(section["files"])
    for rel, entry in section["files"].items():
        raw = (root / rel).read_bytes()
        span = max(len(raw) - 4096, 0)              # 16 blocks of 4 KiB, evenly spaced, first and last included
        blocks = b"".join(raw[o:o + 4096] for o in sorted({span * i // 15 for i in range(16)}))
        assert entry == {"bytes": len(raw), "digest": f"{zlib.crc32(raw):08x}",
                         "sample": f"{zlib.crc32(blocks):08x}"}, rel
    fp = section["fingerprint"]
    assert fp == _oracle_fingerprint(section["files"])
    for p in range(2):  # the stamps and caches embed the content-derived id
        assert json.loads(M.part_stamp_path(root, p).read_text())["fingerprint"] == fp
        assert torch.load(M.feature_cache_path(root, p), weights_only=True)["info"]["fingerprint"] == fp


def test_the_fingerprint_is_the_content(runs, data, tmp_path):
    fp = {name: read_meta(runs / name).extra["fingerprint"] for name in ("r0", "r0b", "r1", "m0")}
    assert fp["r0"] == fp["r0b"] and len({fp["r0"], fp["r1"], fp["m0"]}) == 3
    assert read_meta(runs / "r0").extra["files"] == read_meta(runs / "r0b").extra["files"]
    OutOfCorePartitioner(data, 2, "random", seed=0, chunk_size=300).save(tmp_path / "ooc", progress=False)
    mem = Partitioner(data, 2, "random", seed=0)
    mem.save(tmp_path / "mem", progress=False)   # no caches: the out-of-core partitioner writes none
    ooc_meta, mem_meta = read_meta(tmp_path / "ooc").extra, read_meta(tmp_path / "mem").extra
    assert ooc_meta["files"] == mem_meta["files"] and ooc_meta["fingerprint"] == mem_meta["fingerprint"]


def test_a_file_of_another_run_with_the_same_size_is_refused(runs, tmp_path):
    root = _copy(runs, "r0", tmp_path)
    theirs = runs / "r1" / "part_0" / "node_feats.pt"
    assert theirs.stat().st_size == (root / "part_0" / "node_feats.pt").stat().st_size  # same counts, other rows
    shutil.copy(theirs, root / "part_0" / "node_feats.pt")
    for part in (0, 1):                                   # the sampled digest tells at every open, on every rank
        with pytest.raises(PartitionFormatError, match=r"part_0/node_feats.pt.*sampled digest.*another "
                           r"partitioning run"):
            load_stores(root, part)
    meta = json.loads((root / "META.json").read_text())  # without samples (a file differing between samples):
    for entry in meta["pyg_dist"]["files"].values():      # only the whole-file digest can tell
        del entry["sample"]
    (root / "META.json").write_text(json.dumps(meta))
    load_stores(root, 0, verify=False)                    # sizes agree: the cheap check cannot tell
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats.pt.*content differs.*crc32"):
        load_stores(root, 0)                              # the default re-hashes the files it opens
    load_stores(root, 1, verify=True)                     # partition 1 does not read part_0's files
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats.pt.*content differs.*crc32.*another "
                       r"partitioning run"):
        load_stores(root, 0, verify=True)
    with pytest.raises(PartitionFormatError, match=r"node_feats.pt.*content differs"):
        LocalGraphStore.from_partition(root, 0, verify=True)


def test_the_sampled_digest_reads_blocks_across_the_file(tmp_path):
    from pyg_dist.format.digests import SAMPLE_BYTES, SAMPLES, sample_digest
    path = tmp_path / "f.bin"
    data = bytearray(os.urandom(SAMPLES * SAMPLE_BYTES * 4 + 123))
    path.write_bytes(data)
    first = sample_digest(path, len(data))
    last = len(data) - SAMPLE_BYTES                       # the last block starts here: a change in it is seen
    data[last + 7] ^= 0xFF
    path.write_bytes(data)
    assert sample_digest(path, len(data)) != first
    small = tmp_path / "s.bin"
    small.write_bytes(b"abc")                             # smaller than one block: the whole file
    assert sample_digest(small, 3) == f"{zlib.crc32(b'abc'):08x}"


@pytest.mark.parametrize("rel,change", [("part_1/graph.pt", "truncate"), ("edge_map.pt", "extend"),
                                        ("part_1/feature_cache.pt", "truncate")])
def test_a_truncated_or_extended_file_fails_without_verify(runs, tmp_path, rel, change):
    root = _copy(runs, "r0", tmp_path)
    path, size = root / rel, (root / rel).stat().st_size
    if change == "truncate":
        with open(path, "r+b") as f:
            f.truncate(size - 7)
    else:
        with open(path, "ab") as f:
            f.write(b"\0" * 5)
    got = size - 7 if change == "truncate" else size + 5
    for part in (0, 1):                                    # every rank fails, not only the file's owner
        with pytest.raises(PartitionFormatError, match=rf"{rel}.*holds {got} bytes but META.json lists {size}: a "
                           r"file from another partitioning run or a truncated copy"):
            load_stores(root, part)


def test_a_folder_without_digests_opens_as_before(runs, tmp_path, capsys):
    root = _copy(runs, "r0", tmp_path)
    meta = json.loads(M.meta_path(root).read_text())
    del meta["pyg_dist"]["files"], meta["pyg_dist"]["files_digest"]
    M.meta_path(root).write_text(json.dumps(meta))
    with open(root / "edge_map.pt", "ab") as f:
        f.write(b"\0")                                     # nothing to compare it with
    load_stores(root, 0, verify=True)
    assert main(["--verify", str(root)]) == 0
    assert "lists no file digests" in capsys.readouterr().out


def test_an_edited_files_list_is_caught_by_verify(runs, tmp_path):
    root = _copy(runs, "r0", tmp_path)
    meta = json.loads(M.meta_path(root).read_text())
    meta["pyg_dist"]["files"]["node_map.pt"]["digest"] = "00000000"
    M.meta_path(root).write_text(json.dumps(meta))
    load_stores(root, 0, verify=False)
    for verify in (True, "once"):                         # the default checks the fingerprint too
        with pytest.raises(PartitionFormatError, match=r"META.json.*fingerprint .* is not the one its files list"):
            load_stores(root, 0, verify=verify)


def test_verify_cli_lines_and_exit_codes(runs, tmp_path, capsys):
    assert main(["--verify", str(runs / "r0")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "META.json: ok" and [ln.split(":")[0] for ln in lines[1:4]] == ["part_0", "part_1",
                                                                                       "shared files"]
    assert all(": ok (" in ln for ln in lines[1:4]) and lines[-1].endswith(": ok")
    root = _copy(runs, "r0", tmp_path)
    shutil.copy(runs / "r1" / "part_1" / "node_feats.pt", root / "part_1" / "node_feats.pt")
    with open(root / "node_map.pt", "ab") as f:
        f.write(b"\0")
    assert main(["--verify", str(root)]) == 1
    out = dict(ln.split(": ", 1) for ln in capsys.readouterr().out.splitlines()[:4])
    assert out["part_0"].startswith("ok") and out["META.json"] == "ok"
    assert out["part_1"].startswith("part_1/node_feats.pt: content differs from META.json's crc32 digest")
    assert out["shared files"].startswith("node_map.pt: holds")
    assert main(["--verify", str(tmp_path / "nothing")]) == 2
    assert "META.json" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "pyg_dist.partition.cli", "--verify", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "part_1/node_feats.pt: content differs" in done.stdout
