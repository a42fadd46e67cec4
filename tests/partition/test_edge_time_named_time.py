"""An edge attribute named ``time`` is edge time, as PyG's ``Partitioner`` decides (``is_edge_level_time``), in
``pyg_dist.distributed.Partitioner`` and in pyg_dist's own partitioner and CLI alike (issue 53); an ambiguous
graph is reported when it is partitioned, and a loader asking for time the folder lacks says how to fix it."""
from __future__ import annotations

import logging

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main as cli_main

RATES = ("user", "rates", "movie")


def _ratings(both=False):
    gen = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["user"].num_nodes = 30
    data["movie"].x = torch.rand(20, 4, generator=gen)
    data[RATES].edge_index = torch.stack([torch.randint(0, 30, (90,), generator=gen),
                                          torch.randint(0, 20, (90,), generator=gen)])
    data[RATES].time = torch.randperm(90, generator=gen)
    data["movie", "rev", "user"].edge_index = data[RATES].edge_index.flip(0)
    data["movie", "rev", "user"].time = data[RATES].time
    if both:
        data[RATES].edge_time = data[RATES].time + 1
    return data


def _edge_time_of(root, etype):
    """Every edge's time as the folder holds it, by the input's edge id."""
    from pyg_dist.format import load_original_ids
    from pyg_dist.store import load_stores
    meta = read_meta(root)
    out = torch.full((meta.num_edges[etype],), -1, dtype=torch.long)
    for p in range(meta.num_parts):
        _, fs = load_stores(root, p)
        out[fs.get_global_id(etype)] = fs.get_tensor(etype, "edge_time")
    original = torch.empty_like(out)
    original[load_original_ids(root)[etype]] = out
    return original


def test_hetero_time_on_edges_is_edge_time_in_every_partitioner(tmp_path):
    from torch_geometric.distributed import Partitioner as PyGPartitioner

    from pyg_dist.distributed import Partitioner as CompatPartitioner
    data = _ratings()
    assert PyGPartitioner(data, 2, str(tmp_path / "unused")).is_edge_level_time      # PyG's own verdict
    compat = CompatPartitioner(data, 2, str(tmp_path / "pyg"))
    assert compat.is_edge_level_time
    compat.generate_partition(progress=False)
    Partitioner(data, 2, method="random").save(tmp_path / "native", progress=False)
    torch.save(data, tmp_path / "ratings.pt")
    assert cli_main(["--dataset", "pyg", "--root", str(tmp_path / "ratings.pt"), "--num-parts", "2",
                     "--method", "random", "--out", str(tmp_path / "cli")]) == 0
    for folder in ("pyg", "native", "cli"):
        meta = read_meta(tmp_path / folder)
        assert set(meta.edge_time_types) == {RATES, ("movie", "rev", "user")}, folder
        assert not meta.node_time_types, folder
    for folder in ("native", "cli"):                        # the values, by edge id, as given
        assert torch.equal(_edge_time_of(tmp_path / folder, RATES), data[RATES].time), folder


def test_homogeneous_time_per_edge_is_edge_time_and_ambiguity_is_said(tmp_path, caplog):
    edge_index = torch.stack([torch.arange(40) % 10, (torch.arange(40) * 3) % 10])
    data = Data(edge_index=edge_index, num_nodes=10, x=torch.rand(10, 3), time=torch.arange(40))
    Partitioner(data, 2, method="random").save(tmp_path / "edge", progress=False)
    meta = read_meta(tmp_path / "edge")
    assert meta.edge_time_types and not meta.node_time_types
    square = Data(edge_index=edge_index[:, :10], num_nodes=10, x=torch.rand(10, 3), time=torch.arange(10))
    with caplog.at_level(logging.WARNING, logger="pyg_dist"):
        Partitioner(square, 2, method="random").save(tmp_path / "square", progress=False)
    meta = read_meta(tmp_path / "square")
    assert meta.node_time_types and not meta.edge_time_types                          # node time, as before
    assert any("one per node and one per edge" in r.getMessage() and "edge_time" in r.getMessage()
               for r in caplog.records)


def test_time_and_edge_time_on_one_edge_type_is_refused_when_partitioning(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"both 'time' and 'edge_time'.*PyG's Partitioner"):
        Partitioner(_ratings(both=True), 2, method="random").save(tmp_path / "x", progress=False)


def test_a_loader_asking_for_missing_time_says_how_to_fix_it(tmp_path):
    from pyg_dist.loader.link_loader import LinkNeighborLoader  # noqa: F401  (the one-machine loader imports)
    from pyg_dist.sampler.dist_neighbor import _time_level
    data = _ratings()
    del data[RATES].time, data["movie", "rev", "user"].time
    data[RATES].stamp = torch.arange(90)
    Partitioner(data, 2, method="random").save(tmp_path / "p", progress=False)
    with pytest.raises(InvalidArgumentError, match=r"'edge_time'.*the folder has it for \[\].*partition it again"):
        _time_level(read_meta(tmp_path / "p"), "edge_time")
