"""The chunk-wise generator: symmetric pairs, ids in range and shuffled, node files, and no accidental
alignment of its id shuffle with a partitioner's seeded permutation."""
from __future__ import annotations

import numpy as np

from pyg_dist.datasets.chunked_synthetic import write_dcsbm_chunks
from pyg_dist.partition.ooc.chunked import open_chunked
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner


def test_generator_writes_symmetric_chunks_and_node_files(tmp_path):
    written = write_dcsbm_chunks(tmp_path, 5000, 20000, chunk_pairs=6000, x_dim=4, num_classes=5, train_frac=0.1,
                                 community_size=100, progress=False)
    files = sorted((tmp_path / "edges").glob("*.npy"))
    assert len(files) == 4
    edges = np.concatenate([np.load(f) for f in files], 1).astype(np.int64)
    assert edges.shape[1] == written and 0.95 * 40000 < written <= 40000  # self loops dropped
    assert edges.min() >= 0 and edges.max() < 5000 and not (edges[0] == edges[1]).any()
    fwd, bwd = np.sort(edges[0] * 5000 + edges[1]), np.sort(edges[1] * 5000 + edges[0])
    assert np.array_equal(fwd, bwd)  # every pair both ways
    g = open_chunked(tmp_path)
    assert g.num_nodes == {"_N": 5000} and g.num_edges(g.edge_types[0]) == written
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (5000,) and set(np.unique(y)) <= set(range(5)) and (y[1:] != y[:-1]).mean() > 0.5
    x = np.load(tmp_path / "x.npy")
    assert x.shape == (5000, 4) and (x.argmax(1) == y % 4).mean() > 0.5  # learnable from x
    assert 300 < np.load(tmp_path / "train_mask.npy").sum() < 700
    for seed in (0, 1):  # a random partition cuts about 3/4 of the edges (no alignment with the shuffle)
        stats = OutOfCorePartitioner(g, 4, "random", seed=seed).save(tmp_path / f"p{seed}", progress=False)
        assert 0.7 < stats["edge_cut"] < 0.8
