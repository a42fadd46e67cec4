"""Topology cache (``cache_topology=True``): remote seeds whose in-edges the partition caches are expanded
here, and the batches are bit-identical to those of the same partitioning without the cache (numba
kernel: every seed draws from the stream of its global id); fewer seeds go to their owners; a corrupt
topology file is a typed error."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PartitionFormatError
from pyg_dist.format import meta as M
from pyg_dist.partition import Partitioner
from pyg_dist.store import load_stores
from pyg_dist.testing import spawn_world

pytest.importorskip("numba")

HOMO = dict(num_nodes=1500, avg_degree=8, num_features=4, community_size=60, seed=31)
HETERO = dict(num_nodes=1500, avg_degree=8, num_features=4, community_size=60, hetero=True, seed=32)


def _batches(root, ctx, disjoint):
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist import rpc
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.sampler.stats import SamplerStats

    gs, fs = load_stores(root, ctx=ctx)
    serve_partition(gs, fs)
    stats = SamplerStats()
    sampler = DistNeighborSampler(gs, fs, [5, 4, 3], stats=stats, backend="numba", disjoint=disjoint)
    t0 = fs.node_types[0]
    own = fs.get_global_id(t0 if fs.is_hetero else None)
    out = []
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        for i in range(6):
            seeds = own[i * 20:(i + 1) * 20]
            o = sampler.sample_from_nodes(NodeSamplerInput(None, seeds, input_type=t0 if fs.is_hetero else None),
                                          key=1000 + i)
            out.append({k: getattr(o, k) for k in ("node", "row", "col", "edge", "batch")})
    return out, stats


def _world(rank, world_size, pairs, disjoint):
    ctx = DistContext.from_env(num_partitions=world_size)
    report = []
    for cached_root, plain_root in pairs:
        a, sa = _batches(cached_root, ctx, disjoint)
        b, sb = _batches(plain_root, ctx, disjoint)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            for k in x:
                vx, vy = x[k], y[k]
                if isinstance(vx, dict):
                    assert vx.keys() == vy.keys() and all(torch.equal(vx[t], vy[t]) for t in vx), k
                else:
                    assert (vx is None and vy is None) or torch.equal(vx, vy), k
        assert sb.hop_seeds_cached == 0
        report.append((sa.hop_seeds_cached, sa.hop_seeds_remote, sb.hop_seeds_remote))
    return report


@pytest.mark.parametrize("world_size,disjoint", [(2, False), (4, True)])
def test_topology_cache_gives_the_same_batches_with_fewer_remote_seeds(tmp_path, world_size, disjoint):
    pairs = []
    for name, spec in (("homo", HOMO), ("hetero", HETERO)):
        data = synthetic_graph(**spec)
        cached, plain = tmp_path / f"{name}-topo", tmp_path / f"{name}-plain"
        Partitioner(data, world_size, method="random", cache_ratio=0.3, cache_topology=True).save(
            cached, progress=False)
        Partitioner(data, world_size, method="random", cache_ratio=0.3).save(plain, progress=False)
        pairs.append((str(cached), str(plain)))
    reports = spawn_world(world_size, _world, pairs, disjoint, timeout=300)
    for report in reports:
        for cached, remote_with, remote_without in report:
            assert cached > 0 and remote_with + cached == remote_without


def test_topology_cache_files_and_errors(tmp_path):
    data = synthetic_graph(**HOMO)
    Partitioner(data, 2, method="random", cache_ratio=0.3, cache_topology=True).save(tmp_path / "t", progress=False)
    gs, fs = load_stores(tmp_path / "t", 0)
    (csc, mask), = gs.topology_cache().values()
    assert torch.equal(mask.nonzero().view(-1), fs.cache.entries["_N"].ids)
    # every cached destination holds exactly its in-edges of the original graph
    g1, _ = load_stores(tmp_path / "t", 1)
    owner_csc, (lo, _) = g1.local_csc(), g1.dst_range()
    for v in fs.cache.entries["_N"].ids[:50].tolist():
        mine = csc.row[csc.colptr[v]:csc.colptr[v + 1]]
        theirs = owner_csc.row[owner_csc.colptr[v - lo]:owner_csc.colptr[v - lo + 1]]
        assert torch.equal(mine, theirs)
    topo = torch.load(M.topology_cache_path(tmp_path / "t", 0), weights_only=True)
    entry = next(iter(topo["types"].values()))
    entry["ids"][-1] = 10**9  # an id past the type: refused before it indexes the pointer table
    torch.save(topo, M.topology_cache_path(tmp_path / "t", 0))
    with pytest.raises(PartitionFormatError, match=r"part_0/topology_cache.pt.*(bytes|digest)"):
        load_stores(tmp_path / "t", 0)      # META.json's size and sampled digest tell first, on every rank
    meta = json.loads(M.meta_path(tmp_path / "t").read_text())
    del meta["pyg_dist"]["files"]           # a folder written before files were listed: the values tell
    M.meta_path(tmp_path / "t").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"topology_cache.pt.*ids.*1000000000"):
        load_stores(tmp_path / "t", 0)
    M.topology_cache_path(tmp_path / "t", 1).write_bytes(b"junk")
    with pytest.raises(PartitionFormatError, match="topology cache"):
        load_stores(tmp_path / "t", 1)
    with pytest.raises(Exception, match="cache_topology"):
        Partitioner(data, 2, cache_topology=True)
