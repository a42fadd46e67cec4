"""Chunked inputs of the out-of-core partitioner: every source format yields the same edges, chunk by chunk,
and a folder in each layout partitions into the in-memory partitioner's folder; the CLI path."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main as cli_main
from pyg_dist.partition.ooc.chunked import ArrayEdges, CsvEdges, FileChunkEdges, ParquetEdges, open_chunked
from pyg_dist.testing import check_roundtrip
from tests.partition.ooc.test_out_of_core import assert_same_folder


def _data():
    data = synthetic_graph(500, 6, num_features=4, community_size=50, seed=2)
    del data.val_mask, data.test_mask
    return data


def _edges(source, chunk):
    got = list(source.chunks(chunk))
    assert all(s.size <= chunk for _, s, _ in got)
    assert [start for start, _, _ in got] == list(np.cumsum([0] + [s.size for _, s, _ in got[:-1]]))
    return np.stack([np.concatenate([s for _, s, _ in got]), np.concatenate([d for _, _, d in got])])


def _write_layout(folder, data, layout):
    folder.mkdir()
    ei = data.edge_index.numpy()
    if layout == "npy":
        np.save(folder / "edges.npy", ei)
    elif layout == "chunks":
        (folder / "edges").mkdir()
        for i, lo in enumerate(range(0, ei.shape[1], 700)):
            part = ei[:, lo:lo + 700]
            if i % 2:
                torch.save(torch.from_numpy(part.T.copy()), folder / "edges" / f"{i:03d}.pt")
            else:
                np.save(folder / "edges" / f"{i:03d}.npy", part)
    elif layout == "csv.gz":
        with gzip.open(folder / "edge.csv.gz", "wt") as f:
            f.write("\n".join(f"{a},{b}" for a, b in ei.T) + "\n")
    elif layout == "parquet":
        pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow")
        import pyarrow.parquet as pq
        (folder / "edges").mkdir()
        for i, lo in enumerate(range(0, ei.shape[1], 900)):
            table = pa.table({"src": ei[0, lo:lo + 900], "dst": ei[1, lo:lo + 900]})
            pq.write_table(table, folder / "edges" / f"part-{i}.parquet")
    for key in ("x", "y", "train_mask"):
        np.save(folder / f"{key}.npy", data[key].numpy())


@pytest.mark.parametrize("layout", ["npy", "chunks", "csv.gz", "parquet"])
def test_every_layout_partitions_like_in_memory(tmp_path, layout):
    data = _data()
    _write_layout(tmp_path / "in", data, layout)
    g = open_chunked(tmp_path / "in")
    assert g.num_nodes == {"_N": 500} and g.num_edges(("_N", "_E", "_N")) == data.num_edges
    assert np.array_equal(_edges(g.edges[("_N", "_E", "_N")], 333), data.edge_index.numpy())
    from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
    OutOfCorePartitioner(g, 3, "random", seed=1, chunk_size=256).save(tmp_path / "ooc", progress=False)
    Partitioner(data, 3, "random", seed=1).save(tmp_path / "mem", progress=False)
    assert_same_folder(tmp_path / "mem", tmp_path / "ooc")


def test_csv_blocks_split_mid_line_and_comments(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text("# a comment\n0 1\n2,3\n\n4\t5\n" * 50)
    src = CsvEdges(path, block_bytes=7)  # a block boundary inside almost every line
    got = _edges(src, 16)
    assert src.num_edges == 150 and got[:, :3].tolist() == [[0, 2, 4], [1, 3, 5]]
    path.write_text("0,1\n2\n")
    with pytest.raises(InvalidArgumentError, match="two integer columns"):
        list(CsvEdges(path).chunks(8))


def test_source_errors(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"\[2, E\]"):
        ArrayEdges(torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(InvalidArgumentError, match="an existing file"):
        CsvEdges(tmp_path / "missing.csv")
    torch.save({"not": "a tensor"}, tmp_path / "bad.pt")
    with pytest.raises(InvalidArgumentError, match="a tensor"):
        FileChunkEdges([tmp_path / "bad.pt"])
    with pytest.raises(InvalidArgumentError, match="edges.npy"):
        open_chunked(tmp_path)
    pa = pytest.importorskip("pyarrow", reason="Parquet input needs pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"a": [0], "b": [1]}), tmp_path / "e.parquet")
    with pytest.raises(InvalidArgumentError, match="columns"):
        ParquetEdges([tmp_path / "e.parquet"])


def test_cli_out_of_core(tmp_path, capsys):
    data = _data()
    _write_layout(tmp_path / "in", data, "npy")
    rc = cli_main(["--dataset", "chunked", "--root", str(tmp_path / "in"), "--num-parts", "2", "--method",
                   "coarsen", "--memory-budget", "64KB", "--chunk-size", "500", "--out", str(tmp_path / "o"),
                   "--quiet"])
    assert rc == 0 and "edge cut" in capsys.readouterr().out
    check_roundtrip(data, tmp_path / "o")
    rc = cli_main(["--dataset", "synthetic", "--num-nodes", "300", "--out-of-core", "--num-parts", "2",
                   "--method", "fennel", "--out", str(tmp_path / "s"), "--quiet"])
    assert rc == 0
    rc = cli_main(["--dataset", "chunked", "--root", str(tmp_path / "in"), "--num-parts", "2", "--method",
                   "metis", "--out", str(tmp_path / "m"), "--quiet"])
    assert rc == 2 and "--method" in capsys.readouterr().err
