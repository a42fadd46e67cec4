"""Remote-feature cache in spawned RPC worlds (2 and 4 ranks, homo and hetero): with caches filled at
start-up (``degree`` and ``presample``) and written by the partitioner, every lookup and every sampled
batch equals the original rows; ids the cache holds are never requested from their owner (the remote
rows counted equal the oracle's remote-and-uncached ids, and a lookup of cached ids only sends nothing);
the cache stays within its budget; the loaders with sampler workers see the same rows.
"""
from __future__ import annotations

import pytest
import torch

from pyg_dist import rpc
from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import original_attrs, served_folders, spawn_world

HOMO = dict(num_nodes=1500, avg_degree=6, num_features=12, community_size=60, node_time=True, seed=21)
HETERO = dict(num_nodes=1500, avg_degree=6, num_features=6, community_size=60, hetero=True, node_time=True,
              seed=22)
FANOUT = [4, 3]


def _expected_remote(fs, group, ids: torch.Tensor) -> int:
    """Oracle: ids owned elsewhere and not in the cache (counted with Python sets)."""
    cached = set(fs.cache.entries[group].ids.tolist()) if fs.cache is not None and group in fs.cache.entries else set()
    owner = fs.book.owner(group, ids).tolist()
    return sum(1 for i, o in zip(ids.tolist(), owner) if o != fs.partition and i not in cached)


def _check_lookups(fs, data, orig, gen) -> dict:
    """Random ids of every node type: rows equal the originals; remote rows = oracle; cached-only lookups
    send no request; returns hit counts."""
    from pyg_dist.sampler.features import fetch_features_async
    from pyg_dist.sampler.stats import SamplerStats
    out = {}
    for t in fs.node_types:
        ids = torch.randint(0, orig[t].numel(), (500,), generator=gen)
        expected = original_attrs(data, t)
        names = [n for n in ("x", "y", "time") if n in expected]
        stats = SamplerStats()

        async def fetch():
            return await fetch_features_async(fs, {t: ids}, {}, {t: names}, {}, stats)
        got = rpc.run_coroutine(fetch(), timeout=60)
        for n in names:
            assert torch.equal(got.node[t][n], expected[n][orig[t][ids]]), (t, n)
        assert stats.feature_rows_remote == _expected_remote(fs, t, ids), t
        assert stats.feature_rows_local + stats.feature_rows_cached + stats.feature_rows_remote == ids.numel()
        out[t] = stats.feature_rows_cached
        if fs.cache is not None and t in fs.cache.entries and fs.cache.entries[t].ids.numel():
            cached_ids = fs.cache.entries[t].ids[:50]
            fut = fs.lookup_many_async({t: cached_ids}, {t: names})
            assert fut.plan.requests == {}, "cached ids were requested from their owner"
            res = fut.wait()
            for n in names:
                assert torch.equal(res[t][n], expected[n][orig[t][cached_ids]]), (t, n)
    return out


def _budget_ok(fs, ratio) -> bool:
    from pyg_dist.cache.fill import budget_rows, cached_attrs
    attrs = cached_attrs(fs, None)
    rows = budget_rows(fs, attrs, ratio, None)
    own = sum(fs.book.owned_ids(t, fs.partition).numel() * (fs.cache.entries[t].row_bytes - 8)
              for t in fs.cache.entries)
    return fs.cache.nbytes <= ratio * own + 1 and all(fs.cache.entries[t].ids.numel() <= rows[t] for t in attrs
                                                      if t in fs.cache.entries)


def _world(rank, world_size, jobs):
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist.sampler.cache_policy import build_cache
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.sampler.stats import SamplerStats

    ctx = DistContext.from_env(num_partitions=world_size)
    report = []
    for root, spec, data, orig, gs, fs in served_folders(jobs, ctx):
        folder_cache = fs.cache
        gen = torch.Generator().manual_seed(7 + rank)
        with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
            for policy in ("folder", "degree", "presample", "none"):
                if policy in ("degree", "presample"):
                    fs.set_cache(build_cache(gs, fs, policy, cache_ratio=0.3, num_neighbors=FANOUT,
                                             presample_batches=4, batch_size=64))
                    assert _budget_ok(fs, 0.3)
                elif policy == "none":
                    fs.set_cache(None)
                else:
                    assert folder_cache is not None and _budget_ok(fs, 0.3)
                hits = _check_lookups(fs, data, orig, gen)
                stats = SamplerStats()
                sampler = DistNeighborSampler(gs, fs, FANOUT, stats=stats)
                t0 = fs.node_types[0]
                seeds = fs.get_global_id(t0 if fs.is_hetero else None)[:40]
                out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds, input_type=t0 if fs.is_hetero else None))
                nodes = out.node if isinstance(out.node, dict) else {t0: out.node}
                feats = out.metadata.features.node
                for t, v in nodes.items():
                    assert torch.equal(feats[t]["x"], original_attrs(data, t)["x"][orig[t][v]]), (policy, t)
                report.append((policy, sum(hits.values()), stats.feature_rows_cached))
        fs.set_cache(None)
    return report


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for parts in (2, 4):
        for name, spec in (("homo", HOMO), ("hetero", HETERO)):
            root = tmp_path_factory.mktemp(f"cache-{name}-{parts}")
            Partitioner(synthetic_graph(**spec), parts, method="random", cache_ratio=0.3).save(
                root, overwrite=True, progress=False)
            out[(name, parts)] = (str(root), spec)
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_cached_lookups_and_batches_equal_originals(folders, world_size):
    jobs = [folders[("homo", world_size)], folders[("hetero", world_size)]]
    reports = spawn_world(world_size, _world, jobs, timeout=300)
    for report in reports:
        by_policy = {}
        for policy, hits, sampled_hits in report:
            by_policy.setdefault(policy, []).append(hits + sampled_hits)
        assert all(h > 0 for p in ("folder", "degree", "presample") for h in by_policy[p]), by_policy
        assert all(h == 0 for h in by_policy["none"]), by_policy


class _ReportCache:
    """``worker_init_fn``: writes what the worker's feature store holds as its cache to ``path``."""

    def __init__(self, path):
        self.path = path

    def __call__(self, worker_id):
        import gc

        from pyg_dist.store import LocalFeatureStore
        stores = [o for o in gc.get_objects() if isinstance(o, LocalFeatureStore)]
        caches = [fs.cache for fs in stores if fs.cache is not None]
        with open("/proc/self/maps") as f:
            mapped = "feature_cache.pt" in f.read()
        c = caches[0] if caches else None
        info = None if c is None else {"rows": c.num_rows, "shared": all(e.ids.is_shared() for e in c.entries.values()),
                                       "file": c.path is not None, "mapped": mapped}
        torch.save(info, self.path)


def _loader_rank(rank, world_size, root, runtime, report_dir):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data, orig = synthetic_graph(**HOMO), load_original_ids(root)
    path = f"{report_dir}/worker-{rank}.pt"
    config = TrainConfig(root, num_workers=1, timeout=60, cache_ratio=0.3 if runtime else None)
    with dist_session(config) as env:
        mine = env.feature_store.cache
        for t, e in mine.entries.items():  # filled through the process group (runtime) or read from the folder
            want = original_attrs(data, t)
            assert all(torch.equal(col, want[n][orig[t][e.ids]]) for n, col in e.cols.items()), t
        loader = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", batch_size=32, num_workers=1,
                                    worker_init_fn=_ReportCache(path),
                                    **({"multiprocessing_context": "spawn"} if runtime else {}))
        batches = 0
        try:
            for batch in loader:
                on = orig["_N"][batch.n_id]
                assert torch.equal(batch.x, data.x[on]) and torch.equal(batch.y, data.y[on])
                batches += 1
        finally:
            loader.shutdown()
    return batches, mine.num_rows, torch.load(path)


@pytest.mark.parametrize("runtime", [False, True], ids=["folder-cache-fork", "filled-cache-spawn"])
def test_loader_workers_share_the_cache(folders, tmp_path, runtime):
    root, _ = folders[("homo", 2)]
    out = spawn_world(2, _loader_rank, root, runtime, str(tmp_path), timeout=300)
    for batches, rows, worker in out:
        assert batches > 0 and worker is not None and worker["rows"] == rows and rows["_N"] > 0
        if runtime:   # filled at start-up: shared memory, handed to the spawned worker as a handle
            assert worker["shared"] and not worker["file"]
        else:         # written by the partitioner: the worker maps the same file
            assert worker["file"] and worker["mapped"]
