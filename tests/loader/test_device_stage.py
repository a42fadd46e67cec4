"""The loaders' device stage and the device feature cache, on the CPU (CUDA runs: test_device_cuda.py)."""
from __future__ import annotations

import gc
import threading
import time

import pytest
import torch

import pyg_dist
from pyg_dist.context import DistContext
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader.device import DeviceStage, move_batch
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

CPU = torch.device("cpu")
NO_CUDA = not torch.cuda.is_available()


def _batches_equal(a, b):
    assert set(a.keys()) == set(b.keys())
    for k in a.keys():
        va, vb = a[k], b[k]
        if isinstance(va, torch.Tensor):
            assert va.dtype == vb.dtype and torch.equal(va, vb), k
        else:
            assert va == vb, k


def test_stage_hands_over_every_batch_in_order():
    data = pyg_dist.synthetic_graph(400, 5, num_features=6, seed=3)
    plain = list(pyg_dist.NeighborLoader(data, [4, 2], batch_size=32, shuffle=True, seed=11))
    staged = DeviceStage(iter(pyg_dist.NeighborLoader(data, [4, 2], batch_size=32, shuffle=True, seed=11)), CPU)
    assert len(staged) == len(plain)
    got = list(staged)
    assert len(got) == len(plain)
    for a, b in zip(got, plain):
        _batches_equal(a, b)
    seeds = torch.cat([b.n_id[:b.batch_size] for b in got])
    assert sorted(seeds.tolist()) == list(range(400))  # every seed exactly once


def test_stage_moves_tuples_and_dicts():
    items = [(torch.arange(3), {"a": torch.ones(2)}), (torch.arange(2), {"a": torch.zeros(1)})]
    got = list(DeviceStage(iter(items), CPU))
    assert [torch.equal(g[0], i[0]) and torch.equal(g[1]["a"], i[1]["a"]) for g, i in zip(got, items)] == [True] * 2


def test_stage_raises_the_source_error_after_the_good_batches():
    def source():
        yield torch.tensor([1])
        yield torch.tensor([2])
        raise ValueError("sampler broke at batch 2")

    stage = DeviceStage(source(), CPU)
    assert next(stage).item() == 1 and next(stage).item() == 2
    with pytest.raises(ValueError, match="batch 2"):
        next(stage)
    with pytest.raises(StopIteration):
        next(stage)


def test_dropped_stage_stops_its_thread():
    closed = threading.Event()

    def source():
        try:
            for i in range(10 ** 6):
                yield torch.tensor([i])
        finally:
            closed.set()

    stage = DeviceStage(source(), CPU)
    assert next(stage).item() == 0
    thread = stage._thread
    del stage
    gc.collect()
    deadline = time.time() + 10
    while thread.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    assert not thread.is_alive()
    assert closed.wait(5)


@pytest.mark.skipif(not NO_CUDA, reason="checks the error raised on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_typed_error():
    data = pyg_dist.synthetic_graph(100, 4, num_features=4, seed=0)
    for make in (lambda: pyg_dist.NeighborLoader(data, [2], batch_size=8, device="cuda"),
                 lambda: pyg_dist.LinkNeighborLoader(data, [2], batch_size=8, device="cuda:0")):
        with pytest.raises(InvalidArgumentError, match="argument 'device' got 'cuda.*torch sees no CUDA device"):
            make()
    from pyg_dist.train.session import TrainConfig
    with pytest.raises(InvalidArgumentError, match="'device' got 'cuda'"):
        TrainConfig("/tmp/x", device="cuda")
    with pytest.raises(InvalidArgumentError, match="'gpu_cache_bytes' got 1024"):
        TrainConfig("/tmp/x", gpu_cache_bytes=1024)
    with pytest.raises(InvalidArgumentError, match="'backend' got 'nccl'"):
        TrainConfig("/tmp/x", device="cpu", backend="nccl")


def test_bad_device_values():
    data = pyg_dist.synthetic_graph(100, 4, num_features=4, seed=0)
    for bad in ("tpu", 3.5, "cuda:x"):
        with pytest.raises(InvalidArgumentError, match="argument 'device'"):
            pyg_dist.NeighborLoader(data, [2], batch_size=8, device=bad)
    assert pyg_dist.NeighborLoader(data, [2], batch_size=8, device="cpu").device == CPU


def test_gradient_backend_and_rank_device():
    from pyg_dist.train.session import TrainConfig
    from pyg_dist.train.startup import gradient_backend, rank_device
    cfg = TrainConfig("/tmp/x")
    gpu = torch.device("cuda", 0)

    def ctx(world, local_world):
        return DistContext(rank=0, world_size=world, num_partitions=1, local_rank=0, local_world_size=local_world)

    assert gradient_backend(cfg, ctx(2, 2), CPU, 0) == "gloo"
    assert gradient_backend(cfg, ctx(1, 1), gpu, 1) == "cpu:gloo,cuda:nccl"
    assert gradient_backend(cfg, ctx(8, 4), gpu, 4) == "cpu:gloo,cuda:nccl"     # one GPU per rank, two machines
    assert gradient_backend(cfg, ctx(2, 2), gpu, 1) == "gloo"                   # two ranks share one GPU
    assert gradient_backend(TrainConfig("/tmp/x", backend="gloo"), ctx(1, 1), gpu, 1) == "gloo"
    with pytest.raises(InvalidArgumentError, match="2 ranks on this machine share 1 GPU"):
        gradient_backend(TrainConfig("/tmp/x", backend="nccl"), ctx(2, 2), gpu, 1)
    if NO_CUDA:
        assert rank_device(cfg, ctx(2, 2)) == CPU
    assert rank_device(TrainConfig("/tmp/x", device="cpu"), ctx(1, 1)) == CPU


def test_buffer_pool_pins_only_while_a_stage_runs_in_its_own_process():
    from pyg_dist.store.buffers import BufferPool
    pool = BufferPool(1 << 20)
    assert not pool.pinned
    pool.pin(True)
    pool.pin(True)
    pool.pin(False)
    assert pool.pinned
    pool._pinning = (pool._pinning[0] + 1, 1)  # as a forked child sees its parent's count
    assert not pool.pinned
    pool.pin(False)
    assert not pool.pinned


def test_move_batch_without_a_cache_refuses_cached_rows():
    from torch_geometric.data import Data

    from pyg_dist.cache.device import DeviceRows
    from pyg_dist.errors import PyGDistError
    from pyg_dist.loader.batch import HostBatch
    d = Data(n_id=torch.arange(3))
    rows = {"_N": DeviceRows(3, torch.tensor([0]), torch.tensor([0]), torch.tensor([1, 2]))}
    with pytest.raises(PyGDistError, match="no gpu_cache"):
        move_batch(HostBatch(d, rows), CPU)


# ------------------------------------------------------------------ the device cache in a spawned world
def _graph():
    return pyg_dist.synthetic_graph(600, 6, num_features=8, edge_dim=3, seed=1)


def _cache_rank(rank, world_size, root, cache_ratio):
    from pyg_dist.cache.device import build_device_cache
    from pyg_dist.format import load_original_ids
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data, orig = _graph(), load_original_ids(root)["_N"]
    with dist_session(TrainConfig(root, timeout=60, cache_ratio=cache_ratio)) as env:
        own = env.feature_store.get_global_id().numel()
        cache = build_device_cache(env.feature_store, env.graph_store, "cpu", max_bytes=own * (8 * 4 + 8 + 8) // 2)
        host_cached = env.feature_store.cache.entries["_N"].ids if env.feature_store.cache is not None else None
        held = cache.index._slots.entries["_N"].ids
        with pytest.raises(InvalidArgumentError, match="gpu_cache"):
            DistNeighborLoader(env, [4, 3], batch_size=32, device="cpu", gpu_cache=cache, transform=lambda d: d)
        from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
        ready = DistNeighborSampler(env.graph_store, env.feature_store, [4, 3])      # built without the index
        with pytest.raises(InvalidArgumentError, match="neighbor_sampler.*device_index=gpu_cache.index"):
            DistNeighborLoader(env, [4, 3], batch_size=32, device="cpu", gpu_cache=cache, neighbor_sampler=ready)
        with pytest.raises(InvalidArgumentError, match="device_index"):
            DistNeighborSampler(env.graph_store, env.feature_store, [4, 3], device_index=held)
        assert ready.device_index is None                                           # nothing set on it
        plain = DistNeighborLoader(env, [4, 3], batch_size=32, shuffle=True, seed=5, device=None, gpu_cache=None)
        cached = DistNeighborLoader(env, [4, 3], batch_size=32, shuffle=True, seed=5, device="cpu", gpu_cache=cache)
        n = 0
        for a, b in zip(plain, cached):
            assert not hasattr(b, "_device_rows")
            _batches_equal(a, b)                      # the same batch, rows from the cache or the host
            on = orig[b.n_id]
            assert torch.equal(b.x, data.x[on]) and torch.equal(b.y, data.y[on])
            n += 1
        stats = cache.index.stats
        plain.shutdown()
        cached.shutdown()
        return (n, len(plain), stats.hits["_N"], stats.misses["_N"], held.numel(), own,
                None if host_cached is None else bool(torch.isin(host_cached, held).all()))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("cache_ratio", [None, 0.3])
def test_device_cache_batches_equal_host_batches(tmp_path, cache_ratio):
    root = tmp_path / "g"
    Partitioner(_graph(), 2, method="metis").save(root, overwrite=True, progress=False)
    for n, batches, hits, misses, held, own, remote_first in spawn_world(2, _cache_rank, str(root), cache_ratio,
                                                                         timeout=150):
        assert n == batches > 0
        assert hits > 0 and misses > 0                 # half the budget: some rows on the "device", some not
        assert 0 < held < own
        if cache_ratio is not None:
            assert remote_first                        # the host cache's rows come first


def test_build_device_cache_takes_the_most_reached_rows(tmp_path):
    from pyg_dist.cache.device import build_device_cache
    from pyg_dist.format import load_original_ids
    from pyg_dist.store import load_stores

    data = _graph()
    root = tmp_path / "one"
    Partitioner(data, 1, method="random").save(root, overwrite=True, progress=False)
    gs, fs = load_stores(str(root), ctx=DistContext(rank=0, world_size=1, num_partitions=1))
    orig = load_original_ids(str(root))["_N"]
    row_bytes = 8 * 4 + 8 + 8                                   # x (8 float32), y (int64) and the id
    cache = build_device_cache(fs, gs, "cpu", max_bytes=200 * row_bytes)
    ids = cache.index._slots.entries["_N"].ids
    assert ids.numel() == 200 and torch.equal(ids, ids.sort().values)
    rows = cache.rows["_N"]
    assert torch.equal(rows["x"], data.x[orig[ids]]) and torch.equal(rows["y"], data.y[orig[ids]])
    reached = torch.bincount(data.edge_index[0], minlength=data.num_nodes)[orig]   # in-edges each id is the source of
    chosen = torch.zeros(data.num_nodes, dtype=torch.bool)
    chosen[ids] = True
    assert reached[chosen].min() >= reached[~chosen].max()      # no row left out is reached more than one kept
    for bad, match in ((0, "max_bytes"), (1.5, "max_bytes"), (True, "max_bytes")):
        with pytest.raises(InvalidArgumentError, match=match):
            build_device_cache(fs, gs, "cpu", max_bytes=bad)
    with pytest.raises(InvalidArgumentError, match="build_device_cache: argument 'attr_names'"):
        build_device_cache(fs, gs, "cpu", max_bytes=1 << 20, attr_names=["nope"])
    with pytest.raises(InvalidArgumentError, match="feature_store"):
        build_device_cache(gs, gs, "cpu", max_bytes=1 << 20)


def test_device_cache_ranks_owned_rows_by_the_host_caches_count_in_a_hybrid_folder(tmp_path):
    """A hybrid folder holds every destination's in-edges; the device cache's owned rows are ranked by the
    in-edges of OWNED nodes only, as the host cache ranks remote rows (it counted every edge before)."""
    from pyg_dist.cache.ranking import owned_degree_ranking
    from pyg_dist.format import load_original_ids
    from pyg_dist.store import load_stores

    data = _graph()
    root = tmp_path / "hybrid"
    Partitioner(data, 2, method="hybrid", base_method="random").save(root, overwrite=True, progress=False)
    gs, _ = load_stores(str(root), ctx=DistContext(rank=0, world_size=2, num_partitions=2))
    orig = load_original_ids(str(root))["_N"]                   # orig[global id] = the original id
    owned = gs.book.owned_ids("_N", 0)
    owned_orig = torch.zeros(data.num_nodes, dtype=torch.bool)
    owned_orig[orig[owned]] = True
    src, dst = data.edge_index
    counts = torch.bincount(src[owned_orig[dst]], minlength=data.num_nodes)[orig[owned]]   # per owned global id
    order = sorted(range(owned.numel()), key=lambda i: (counts[i] == 0, -int(counts[i]), int(owned[i])))
    assert torch.equal(owned_degree_ranking(gs, "_N"), owned[torch.tensor(order)])
    every = torch.bincount(src, minlength=data.num_nodes)[orig[owned]]
    assert not torch.equal(every, counts)                       # the folder's every-edge count would rank otherwise
