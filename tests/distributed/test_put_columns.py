"""Columns a ``torch_geometric.distributed`` script adds to a store opened from a folder (issue 53): PyG's
``feature._global_id`` / ``feature._feat`` as such scripts read them, ``put_tensor`` of identity features for a
feature-less node type, and ``add_learnable``: every batch carries them exactly, with 0 and 2 sampler workers
started by fork and by spawn, remote rows included; the trainer's in-place updates reach the workers."""
from __future__ import annotations

import os

import pytest
import torch

import pyg_dist
from pyg_dist.testing import spawn_world

DIM = 4


def _graph():
    data = pyg_dist.synthetic_graph(500, 5, num_features=8, hetero=True, seed=7)
    del data["author"].x                          # a feature-less node type, as users in MovieLens
    return data


def _partition(tmp_path):
    from pyg_dist.distributed import Partitioner
    root = tmp_path / "pyg-2"
    Partitioner(_graph(), 2, str(root)).generate_partition(progress=False)
    return str(root)


def _rank(rank, world, root, workers, context, learnable):
    import torch.distributed as dist

    from pyg_dist.distributed import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore
    graph = LocalGraphStore.from_partition(root, rank)
    feature = LocalFeatureStore.from_partition(root, rank)
    # PyG's private dictionaries equal the public getters
    assert torch.equal(feature._global_id["paper"], feature.get_global_id("paper"))
    assert torch.equal(feature._feat[("paper", "x")], feature.get_tensor("paper", "x"))
    assert ("author", "x") not in feature._feat
    ids = feature._global_id["author"]
    rows = ids.float().view(-1, 1).repeat(1, DIM)     # row of id g is [g, g, g, g]: the oracle in every batch
    if learnable:                                     # pyg_dist's own way: a learnable column, updated in place
        feature.add_learnable("author", "x", rows)
    else:
        feature.put_tensor(rows, group_name="author", attr_name="x")   # PyG's identity-feature step
        assert torch.equal(feature._feat[("author", "x")], rows)
    name = "x"
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world, group_name="t")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seeds = feature.get_global_id("paper")
    kw = {"multiprocessing_context": context} if workers else {}
    loader = DistNeighborLoader(data=(feature, graph), num_neighbors=[4, 4], master_addr="127.0.0.1",
                                master_port=int(os.environ["MASTER_PORT"]) + 11, current_ctx=ctx,
                                input_nodes=("paper", seeds), batch_size=32, num_workers=workers, **kw)
    checked, remote = 0, 0
    for epoch, shift in enumerate((0.0, 1000.0)):
        if epoch:                                     # an optimizer step, in place, after the workers started
            dist.barrier()
            rows.add_(shift)
            dist.barrier()
        for batch in loader:
            b = batch["author"]
            got = getattr(b, name, None)
            assert got is not None, f"batch without author.{name}"
            assert torch.equal(got, b.n_id.float().view(-1, 1).repeat(1, DIM) + shift), epoch
            checked += b.n_id.numel()
            remote += int((~torch.isin(b.n_id, ids)).sum())
        if not learnable:
            break                                     # a put column is not updated: one epoch
    loader.shutdown()
    dist.barrier()
    return checked, remote


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers,context,learnable", [(0, None, False), (2, "fork", False), (2, "spawn", False),
                                                       (2, "forkserver", False), (0, None, True), (2, "fork", True),
                                                       (2, "spawn", True)])
def test_columns_added_in_the_trainer_reach_every_batch(tmp_path, workers, context, learnable):
    root = _partition(tmp_path)
    res = spawn_world(2, _rank, root, workers, context, learnable, timeout=240)
    assert all(checked > 0 for checked, _ in res)
    assert sum(remote for _, remote in res) > 0         # rows the other partition put, served by its process


def test_folder_columns_stay_read_only_and_puts_are_checked(tmp_path):
    from pyg_dist.distributed import LocalFeatureStore
    from pyg_dist.errors import InvalidArgumentError, PyGDistError
    root = _partition(tmp_path)
    feature = LocalFeatureStore.from_partition(root, 0)
    n = feature.get_global_id("author").numel()
    with pytest.raises(InvalidArgumentError, match="'x'.*comes from the partition folder"):
        feature.put_tensor(torch.zeros(feature.get_global_id("paper").numel(), 8), group_name="paper", attr_name="x")
    with pytest.raises(InvalidArgumentError, match=f"a tensor of {n} rows"):
        feature.put_tensor(torch.zeros(n + 1, 3), group_name="author", attr_name="x")
    feature.put_tensor(torch.zeros(n, 3), group_name="author", attr_name="x")
    feature.put_tensor(torch.ones(n, 3), group_name="author", attr_name="x")          # replaced, as in PyG
    assert torch.equal(feature.get_tensor("author", "x"), torch.ones(n, 3))
    assert feature.remove_tensor(group_name="author", attr_name="x")
    assert ("author", "x") not in feature._feat
    with pytest.raises(PyGDistError, match="read-only"):
        feature.remove_tensor(group_name="paper", attr_name="x")
    feature.put_tensor(torch.ones(n, 3), group_name="author", attr_name="x")
    assert "x" not in LocalFeatureStore.from_partition(root, 0).attr_names("author")   # the folder is untouched
    with pytest.raises(TypeError):
        feature._global_id["paper"] = torch.zeros(1)                                 # read-only views
