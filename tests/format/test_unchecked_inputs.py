"""The last unchecked inputs of a partition folder (issue 52, item 6), each refused typed where it enters, naming
the file, by opening and by ``pyg-dist-partition --verify`` alike (every case passed both on the code before)."""
from __future__ import annotations

import json
import logging
import os
import shutil

import pytest
import torch

import pyg_dist
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import digests as D
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main as cli_main
from pyg_dist.store import load_stores


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    data = pyg_dist.synthetic_graph(800, 6, num_features=8, seed=3)
    root = tmp_path_factory.mktemp("inputs") / "p2"
    Partitioner(data, 2, method="random", seed=0).save(root, progress=False)
    return root


def _copy(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / "copy", symlinks=True)


def _meta(root):
    return json.loads((root / "META.json").read_text())


def _write_meta(root, meta):
    (root / "META.json").write_text(json.dumps(meta))


def _relist(root, rels):
    """Lists ``rels`` in META.json with the digests of what they hold now, and the fingerprint that gives (what a
    careless rewrite, or someone covering a change, would do): only the content checks stay to catch them."""
    meta = _meta(root)
    meta["pyg_dist"]["files"].update(D.file_digests(root, rels))
    meta["pyg_dist"]["fingerprint"] = fp = D.folder_fingerprint(meta["pyg_dist"]["files"])
    _write_meta(root, meta)
    for p in range(meta["num_parts"]):
        stamp = json.loads((root / f"part_{p}" / "pyg_dist.json").read_text())
        stamp["fingerprint"] = fp
        (root / f"part_{p}" / "pyg_dist.json").write_text(json.dumps(stamp))


def _unlist(root):
    """An older folder: META.json lists no digests and no fingerprint (nor the stamps' check)."""
    meta = _meta(root)
    for key in ("files", "fingerprint", "files_digest"):
        meta["pyg_dist"].pop(key, None)
    _write_meta(root, meta)


def _verify(root, capsys):
    code = cli_main(["--verify", str(root)])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("value", [10 ** 30, 1e30, -5, "300", True, [400]])
def test_a_bound_that_is_no_sane_integer_is_named(folder, tmp_path, capsys, value):
    root = _copy(folder, tmp_path)
    meta = _meta(root)
    meta["pyg_dist"]["node_bounds"]["_N"][1] = value
    _write_meta(root, meta)
    with pytest.raises(PartitionFormatError, match=r"META.json.*node_bounds\['_N'\]\[1\]"):
        read_meta(root)
    with pytest.raises(PartitionFormatError, match="node_bounds"):
        load_stores(root, 0)
    code, out = _verify(root, capsys)
    assert code == 2 and "node_bounds['_N'][1]" in out and "Traceback" not in out


def test_rows_of_another_width_are_refused(folder, tmp_path, capsys):
    root = _copy(folder, tmp_path)
    path = root / "part_1" / "node_feats.pt"
    raw = torch.load(path, weights_only=True)
    raw["feats"]["x"] = torch.cat([raw["feats"]["x"], torch.zeros(raw["feats"]["x"].size(0), 1)], 1)  # 9 columns
    torch.save(raw, path)
    _relist(root, ["part_1/node_feats.pt"])
    load_stores(root, 0)                                                   # partition 0 is intact
    with pytest.raises(PartitionFormatError, match=r"part_1/node_feats.pt.*'x' of '_N' has rows of shape \[9\]; "
                                                   r"META.json records \[8\]"):
        load_stores(root, 1)
    code, out = _verify(root, capsys)
    assert code == 1 and "rows of shape [9]" in out, out
    meta = _meta(root)                                                     # a folder without the record:
    del meta["pyg_dist"]["attr_shapes"]
    _write_meta(root, meta)
    code, out = _verify(root, capsys)                                      # the partitions are compared
    assert code == 1 and "rows of differing shapes: node _N x: part_0 [8], part_1 [9]" in out, out


@pytest.mark.parametrize("case", ["a copy of part_0", "float64 rows", "truncated labels"])
def test_verify_refuses_what_opening_refuses(folder, tmp_path, capsys, case):
    """An older folder (no digests): ``--verify`` used to check presence only, and say ok."""
    root = _copy(folder, tmp_path)
    _unlist(root)
    if case == "a copy of part_0":
        for name in ("graph.pt", "node_feats.pt", "edge_feats.pt"):
            shutil.copy(root / "part_0" / name, root / "part_1" / name)
    else:
        path = root / "part_1" / "node_feats.pt"
        raw = torch.load(path, weights_only=True)
        if case == "float64 rows":
            raw["feats"]["x"] = raw["feats"]["x"].double()
        else:
            raw["feats"]["y"] = raw["feats"]["y"][:-3]
        torch.save(raw, path)
    with pytest.raises(PartitionFormatError, match="part_1/"):
        load_stores(root, 1, verify=False)
    code, out = _verify(root, capsys)
    assert code == 1 and "part_1 (opened as a rank would): " in out and "part_1 (opened as a rank would): ok" not in out
    assert "part_0 (opened as a rank would): ok" in out, out


def test_a_link_out_of_the_folder_is_refused_unread(folder, tmp_path, capsys):
    root = _copy(folder, tmp_path)
    outside = tmp_path / "elsewhere.pt"
    shutil.copy(root / "part_1" / "node_feats.pt", outside)               # a loadable file, outside the folder
    (root / "part_1" / "node_feats.pt").unlink()
    os.symlink(outside, root / "part_1" / "node_feats.pt")
    _relist(root, ["part_1/node_feats.pt"])                                 # the digests agree with it
    for verify in ("once", True, False):
        with pytest.raises(PartitionFormatError, match=r"part_1/node_feats.pt.*resolves to .*elsewhere.pt, outside"):
            load_stores(root, 0, verify=verify)                              # any rank: every partition's files
    code, out = _verify(root, capsys)
    assert code == 1 and "outside" in out, out
    # a link that stays inside its partition folder, and a whole part_<i> folder on another disk, still open
    os.unlink(root / "part_1" / "node_feats.pt")
    shutil.copy(outside, root / "part_1" / "feats.real")
    os.symlink("feats.real", root / "part_1" / "node_feats.pt")
    shutil.move(root / "part_1", tmp_path / "disk2")
    os.symlink(tmp_path / "disk2", root / "part_1")
    load_stores(root, 1)


def test_a_folder_without_digests_says_so(folder, tmp_path, caplog):
    root = _copy(folder, tmp_path)
    _unlist(root)
    with caplog.at_level(logging.WARNING, logger="pyg_dist"):
        load_stores(root, 0)
        load_stores(root, 1)
    said = [r.getMessage() for r in caplog.records if "lists no file digests" in r.getMessage()]
    assert len(said) == 1 and "content is not checked" in said[0], said     # once per folder and process
