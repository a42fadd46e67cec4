"""Out-of-core partitioner: exact round trip with tiny chunks, identical folders to the in-memory writer,
balance and cut of the bounded-memory methods, typed errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.ooc.chunked import ArrayEdges, ChunkedGraph
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner, parse_bytes
from pyg_dist.testing import check_roundtrip
from tests.partition.test_partition import _hetero, _homo


def _same(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    else:
        assert a == b, (path, a, b)


def assert_same_folder(one: Path, two: Path) -> None:
    """Every file of the two folders holds the same tensors; META differs only in run-specific keys."""
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for f in files:
        if f.suffix == ".pt":
            _same(torch.load(one / f, weights_only=True), torch.load(two / f, weights_only=True), str(f))
    metas = [json.loads((d / "META.json").read_text()) for d in (one, two)]
    for m in metas:
        s = m["pyg_dist"]
        for key in ("fingerprint", "out_of_core"):
            s.pop(key, None)
        for key in ("seconds", "cpu_seconds", "bytes_per_part"):
            s["stats"].pop(key)
    _same(metas[0], metas[1])


@pytest.mark.parametrize("make,parts", [(_homo, 3), (_hetero, 2)])
def test_random_writes_the_in_memory_folder_bit_for_bit(tmp_path, make, parts):
    data = make()
    Partitioner(data, parts, "random", seed=4).save(tmp_path / "mem", progress=False)
    OutOfCorePartitioner(data, parts, "random", seed=4, chunk_size=97).save(tmp_path / "ooc", progress=False)
    assert_same_folder(tmp_path / "mem", tmp_path / "ooc")


@pytest.mark.parametrize("method", ["coarsen", "fennel"])
@pytest.mark.parametrize("make", [_homo, _hetero])
def test_roundtrip_exact_with_tiny_chunks_and_blocks(tmp_path, method, make):
    data = make()
    stats = OutOfCorePartitioner(data, 3, method, chunk_size=50, memory_budget="20KB").save(
        tmp_path / "out", progress=False)
    meta = check_roundtrip(data, tmp_path / "out")
    assert meta.method == method and meta.extra["out_of_core"]["blocks"] > 1
    assert stats["edge_cut"] < 0.5  # random would cut about 2/3 of the edges


def _cut_and_balance(data, part, tmp_path):
    stats = part.save(tmp_path / "out", overwrite=True, progress=False)
    return stats["edge_cut"], max(stats["constraint_balance"].values())


def test_bounded_methods_cut_near_metis_and_respect_balance(tmp_path):
    data = synthetic_graph(4000, 10, num_features=4, community_size=100, seed=3)
    perm = torch.randperm(4000, generator=torch.Generator().manual_seed(0))  # ids carry no community order
    data.edge_index = perm[data.edge_index]
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        data[key] = data[key][torch.argsort(perm)]
    metis, metis_bal = _cut_and_balance(data, Partitioner(data, 4, "metis"), tmp_path)
    coarsen, coarsen_bal = _cut_and_balance(data, OutOfCorePartitioner(data, 4, "coarsen", memory_budget="50KB"),
                                            tmp_path)
    fennel, fennel_bal = _cut_and_balance(data, OutOfCorePartitioner(data, 4, "fennel", memory_budget="50KB"),
                                          tmp_path)
    random, _ = _cut_and_balance(data, OutOfCorePartitioner(data, 4, "random"), tmp_path)
    assert coarsen <= 1.3 * metis, (coarsen, metis)
    assert fennel < 0.6 * random, (fennel, random)
    # a cap of 3 % per constraint, or one node's weight above the mean where that is larger
    assert coarsen_bal <= 1.06 and fennel_bal <= 1.06 and metis_bal <= 1.06


def test_chunked_graph_from_arrays_and_memmaps(tmp_path):
    data = _homo()
    np.save(tmp_path / "e.npy", data.edge_index.t().numpy())  # [E, 2] layout
    np.save(tmp_path / "x.npy", data.x.numpy())
    g = ChunkedGraph(num_nodes={"_N": data.num_nodes}, edges={("_N", "_E", "_N"): ArrayEdges(tmp_path / "e.npy")},
                     node_attrs={"_N": {"x": np.load(tmp_path / "x.npy", mmap_mode="r"), "y": data.y}})
    OutOfCorePartitioner(g, 2, "random", chunk_size=64).save(tmp_path / "ooc", progress=False)
    sub = data.clone()
    for key in list(sub.keys()):
        if key not in ("edge_index", "x", "y", "num_nodes"):
            del sub[key]
    check_roundtrip(sub, tmp_path / "ooc")
    Partitioner(sub, 2, "random").save(tmp_path / "mem", progress=False)
    assert_same_folder(tmp_path / "mem", tmp_path / "ooc")


def test_typed_errors(tmp_path):
    data = _homo(100)
    with pytest.raises(InvalidArgumentError, match="method"):
        OutOfCorePartitioner(data, 2, "metis")
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        OutOfCorePartitioner(data, 2, memory_budget="lots")
    with pytest.raises(InvalidArgumentError, match="num_parts"):
        OutOfCorePartitioner(data, 101)
    with pytest.raises(InvalidArgumentError, match="chunk_size"):
        OutOfCorePartitioner(data, 2, chunk_size=0)
    bad = ChunkedGraph(num_nodes={"_N": 10}, edges={("_N", "_E", "_N"): ArrayEdges(torch.tensor([[0, 3], [1, 10]]))})
    with pytest.raises(InvalidArgumentError, match=r"destination ids in \[1, 10\]"):
        OutOfCorePartitioner(bad, 2, "coarsen").save(tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.tmp-*"))
    rows = ChunkedGraph(num_nodes={"_N": 10}, edges={("_N", "_E", "_N"): ArrayEdges(torch.tensor([[0], [1]]))},
                        node_attrs={"_N": {"x": torch.zeros(9, 2)}})
    with pytest.raises(InvalidArgumentError, match="one row per node"):
        OutOfCorePartitioner(rows, 2)
    nan = _homo(100)
    nan.x[5, 0] = float("nan")
    with pytest.raises(InvalidArgumentError, match="NaN"):
        OutOfCorePartitioner(nan, 2, "random").save(tmp_path / "n", progress=False)
    OutOfCorePartitioner(nan, 2, "random", allow_nonfinite=True).save(tmp_path / "n", progress=False)
    assert read_meta(tmp_path / "n").num_parts == 2


@pytest.mark.parametrize("text,value", [("8GB", 8 * 10 ** 9), ("512MiB", 512 * 2 ** 20), ("1.5e9", 1_500_000_000),
                                        (123, 123)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value
