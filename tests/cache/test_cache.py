"""Remote-feature cache without an RPC world: the cache's lookup against a dict oracle (slot map and
binary search), the partitioner's ``cache_ratio`` (rows equal the originals, ids owned elsewhere, within
budget, ranked by edges into the partition), the lookup plan (cached ids are never requested), and
typed errors for every bad input."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist.cache import rows as C
from pyg_dist.cache.file import CacheEntry
from pyg_dist.cache.fill import budget_rows, cached_attrs
from pyg_dist.cache.ranking import degree_ranking
from pyg_dist.cache.rows import FeatureCache
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import load_original_ids
from pyg_dist.format import meta as M
from pyg_dist.partition import Partitioner
from pyg_dist.sampler.cache_policy import build_cache
from pyg_dist.store import load_stores
from pyg_dist.store.lookup import FeatureQuery, plan_lookup
from pyg_dist.testing import original_attrs
from pyg_dist.train.session import TrainConfig

SPEC = dict(num_nodes=900, avg_degree=6, num_features=10, community_size=50, node_time=True, seed=3)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    data = synthetic_graph(**SPEC)
    Partitioner(data, 3, method="random", cache_ratio=0.25).save(root, overwrite=True, progress=False)
    return data, str(root)


def _cache(ids, dim=2):
    ids = torch.tensor(ids)
    return FeatureCache({"_N": CacheEntry(ids, {"x": ids.view(-1, 1).float().repeat(1, dim)})})


@pytest.mark.parametrize("slot_map", [True, False])
def test_lookup_matches_a_dict(monkeypatch, slot_map):
    if not slot_map:
        monkeypatch.setattr(C, "SLOT_MAP_LIMIT", 0)
    gen = torch.Generator().manual_seed(0)
    cached = torch.randperm(5000, generator=gen)[:700].sort().values
    cache = _cache(cached.tolist())
    where = {int(i): k for k, i in enumerate(cached)}
    ids = torch.randint(0, 5000, (3000,), generator=gen)
    hit_pos, rows, miss = cache.lookup(ids)
    want_hits = [p for p, i in enumerate(ids.tolist()) if i in where]
    assert hit_pos.tolist() == want_hits
    assert rows["x"][:, 0].tolist() == [float(ids[p]) for p in want_hits]
    assert miss.tolist() == [i for i in ids.tolist() if i not in where]
    assert (cache._maps["_N"][1] is None) != slot_map
    assert cache.stats.hits["_N"] == len(want_hits) and cache.stats.misses["_N"] == 3000 - len(want_hits)


def test_bad_entries_and_arguments_are_typed():
    with pytest.raises(InvalidArgumentError, match="ascending"):
        _cache([3, 1])
    with pytest.raises(InvalidArgumentError, match="rows"):
        FeatureCache({"_N": CacheEntry(torch.tensor([1, 2]), {"x": torch.zeros(3, 2)})})
    with pytest.raises(InvalidArgumentError, match="attr_names"):
        _cache([1]).lookup(torch.tensor([1]), attr_names=["y"])
    for kwargs in (dict(cache_ratio=1.5), dict(cache_ratio=0.1, cache_policy="lru"),
                   dict(cache_ratio=0.1, cache_policy="presample")):
        with pytest.raises(InvalidArgumentError):
            TrainConfig("/tmp/x", **kwargs)
    with pytest.raises(InvalidArgumentError, match="cache_ratio"):
        Partitioner(synthetic_graph(50, 4), 2, cache_ratio=0)


def test_partitioner_writes_caches_of_remote_rows_within_budget(folder):
    data, root = folder
    orig = load_original_ids(root)["_N"]
    new_of = torch.empty_like(orig)
    new_of[orig] = torch.arange(orig.numel())
    src, dst = new_of[data.edge_index[0]], new_of[data.edge_index[1]]
    for part in range(3):
        gs, fs = load_stores(root, part)
        cache = fs.cache
        assert cache is not None and cache.path == M.feature_cache_path(root, part)
        e = cache.entries["_N"]
        assert sorted(e.cols) == ["time", "x", "y"] and e.ids.numel() > 0
        assert bool((fs.book.owner("_N", e.ids) != part).all())
        want = original_attrs(data, "_N")
        for name, col in e.cols.items():
            assert torch.equal(col, want[name][orig[e.ids]]), name
        own_bytes = fs.get_global_id().numel() * (e.row_bytes - 8)
        assert cache.nbytes <= 0.25 * own_bytes
        # ranking oracle: every cached node has at least as many edges into the partition as any uncached one
        into = fs.book.owner("_N", dst) == part
        counts = torch.bincount(src[into & (fs.book.owner("_N", src) != part)], minlength=orig.numel())
        mask = torch.zeros(orig.numel(), dtype=torch.bool)
        mask[e.ids] = True
        assert int(counts[mask].min()) >= int(counts[~mask].max())
        # the runtime degree policy picks the same rows (same ranking, same budget)
        n = budget_rows(fs, cached_attrs(fs, None), 0.25, None)["_N"]
        assert torch.equal(degree_ranking(gs, "_N")[:n].sort().values, e.ids)


def test_plan_never_requests_cached_ids(folder):
    data, root = folder
    _, fs = load_stores(root, 0)
    cache = fs.cache
    ids = torch.randint(0, 900, (2000,), generator=torch.Generator().manual_seed(1))
    plan = plan_lookup(fs.book, 0, [FeatureQuery("_N", ("x", "y"), ids)], cache)
    cached = set(cache.entries["_N"].ids.tolist())
    requested = [i for req in plan.requests.values() for q in req.queries for i in q.ids.tolist()]
    owner = fs.book.owner("_N", ids)
    assert not cached & set(requested)
    misses = [i for i, o in zip(ids.tolist(), owner.tolist()) if o != 0 and i not in cached]
    assert sorted(requested) == sorted(set(misses))  # each missed id asked once
    assert plan.cached_rows(0) == sum(1 for i in ids.tolist() if i in cached)
    assert plan.remote_rows(0) == len(misses)
    # a query of an attribute the cache lacks bypasses it
    plan = plan_lookup(fs.book, 0, [FeatureQuery("_N", ("train_mask",), ids)], cache)
    assert plan.cached_rows(0) == 0


def test_set_cache_rejects_owned_ids_and_other_rows(folder):
    _, root = folder
    _, fs = load_stores(root, 0)
    owned = fs.get_global_id()[:3]
    with pytest.raises(InvalidArgumentError, match="other partitions own"):
        fs.set_cache(FeatureCache({"_N": CacheEntry(owned, {"x": torch.zeros(3, 10)})}))
    remote = fs.cache.entries["_N"].ids[:3]
    with pytest.raises(InvalidArgumentError, match="rows like"):
        fs.set_cache(FeatureCache({"_N": CacheEntry(remote, {"x": torch.zeros(3, 4)})}))
    with pytest.raises(InvalidArgumentError, match="FeatureCache"):
        fs.set_cache({"_N": remote})
    with pytest.raises(InvalidArgumentError, match="policy"):
        build_cache(None, fs, "lru", cache_ratio=0.1)
    with pytest.raises(InvalidArgumentError, match="cache_ratio"):
        build_cache(None, fs, "degree", cache_ratio=0.1, cache_bytes=10)
    with pytest.raises(InvalidArgumentError, match="num_neighbors"):
        build_cache(None, fs, "presample", cache_ratio=0.1)


def test_cache_of_another_partitioning_is_a_format_error(folder, tmp_path):
    import shutil
    data, root = folder
    other = tmp_path / "other"
    Partitioner(data, 3, method="random", seed=5, cache_ratio=0.25).save(other, progress=False)
    mixed = tmp_path / "mixed"
    shutil.copytree(root, mixed)
    shutil.copy(M.feature_cache_path(other, 1), M.feature_cache_path(mixed, 1))
    with pytest.raises(PartitionFormatError, match=r"part_1/feature_cache.pt.*sampled digest"):
        load_stores(mixed, 1)                 # META.json's sampled digest tells first, on every rank
    shutil.copy(M.feature_cache_path(root, 1), M.feature_cache_path(mixed, 1))
    M.feature_cache_path(mixed, 2).write_bytes(b"not a cache")
    with pytest.raises(PartitionFormatError, match=r"part_2/feature_cache.pt': holds 11 bytes but META.json"):
        load_stores(mixed, 2)                 # META.json lists every file's size
    meta = json.loads(M.meta_path(mixed).read_text())
    del meta["pyg_dist"]["files"]             # a folder written before sizes were listed: the cache's own checks
    M.meta_path(mixed).write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match="unreadable feature cache"):
        load_stores(mixed, 2)
    shutil.copy(M.feature_cache_path(other, 1), M.feature_cache_path(mixed, 1))
    with pytest.raises(PartitionFormatError, match="another partitioning"):
        load_stores(mixed, 1)
