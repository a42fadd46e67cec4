"""Ranks that opened different partitionings never train on each other's rows: the session stops at start-up
with one line naming the ranks, and a request from another partitioning is refused by the owner."""
from __future__ import annotations

import time

import pytest
import torch

import pyg_dist
from pyg_dist.errors import PartitionFormatError, RemoteCallError
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

DATA = dict(num_nodes=400, avg_degree=5, num_features=8, seed=4)


def _data():
    return pyg_dist.synthetic_graph(DATA["num_nodes"], DATA["avg_degree"], num_features=DATA["num_features"],
                                    seed=DATA["seed"])


def _two_runs(tmp_path):
    data = _data()
    for seed in (0, 1):  # two partitioner runs: what two machines hold after one was re-partitioned
        Partitioner(data, 2, method="random", seed=seed).save(tmp_path / f"s{seed}", progress=False)
    return [str(tmp_path / "s0"), str(tmp_path / "s1")]


def _session_rank(rank, world, roots):
    from pyg_dist.train.session import TrainConfig, dist_session
    start = time.perf_counter()
    try:
        with dist_session(TrainConfig(roots[rank], timeout=120)):
            return "opened", time.perf_counter() - start
    except PartitionFormatError as exc:
        return str(exc), time.perf_counter() - start


@pytest.mark.timeout(150)
def test_ranks_with_different_partitionings_stop_at_start_up(tmp_path):
    roots = _two_runs(tmp_path)
    res = spawn_world(2, _session_rank, roots, timeout=120)
    for text, seconds in res:  # both ranks, one line, naming rank 1 as the odd one
        assert "ranks [1] opened a different partitioning" in text and "rank 0" in text, text
        assert seconds < 60
    res = spawn_world(2, _session_rank, [roots[0], roots[0]], timeout=120)
    assert [text for text, _ in res] == ["opened", "opened"]


def _lookup_rank(rank, world, roots):
    """Serves its own folder, then rank 0 asks partition 1 for its rows' features."""
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.format import load_original_ids
    from pyg_dist.sampler.dist_neighbor import serve_partition
    from pyg_dist.store import load_stores
    ctx = DistContext.from_env(num_partitions=world)
    graph, feats = load_stores(roots[rank], ctx=ctx)
    serve_partition(graph, feats)
    rpc.init_rpc(ctx, timeout=60)
    try:
        if rank == 1:
            return None
        ids = torch.arange(DATA["num_nodes"])  # every node: half of them owned by partition 1
        try:
            x = feats.lookup_features(ids, timeout=30)
        except RemoteCallError as exc:
            return str(exc)
        orig = load_original_ids(roots[0])["_N"]  # global id -> the generator's id
        return bool(torch.equal(x, _data().x[orig[ids]]))
    finally:
        rpc.shutdown_rpc()


@pytest.mark.timeout(150)
def test_an_owner_refuses_a_request_from_another_partitioning(tmp_path):
    roots = _two_runs(tmp_path)
    res = spawn_world(2, _lookup_rank, roots, timeout=120)
    assert "partition 1" in res[0] and "PartitionMismatch" in res[0], res[0]
    assert "refused 'pyg_dist.lookup_features'" in res[0]
    res = spawn_world(2, _lookup_rank, [roots[0], roots[0]], timeout=120)
    assert res[0] is True                                   # the same folder: rows exact against the original x
