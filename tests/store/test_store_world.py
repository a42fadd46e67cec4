"""Stores in spawned RPC worlds on 127.0.0.1 (2 and 4 ranks): every rank fetches features, labels,
masks, node time and edge features for random global ids (most of them remote) and compares them bit
for bit with the original tensors, homo and hetero; remote failures arrive as RemoteCallError; a
folder that does not match the world fails before RPC starts.

Each world runs both folders in two RPC sessions (one lookup callee per process), to keep start-ups few.
"""
from __future__ import annotations

import pytest
import torch

from pyg_dist import rpc
from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PartitionFormatError, RemoteCallError
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.store import LOOKUP_OP, load_stores
from pyg_dist.store.lookup import FeatureQuery, LookupRequest
from pyg_dist.testing import original_attrs

HOMO = dict(num_nodes=1200, avg_degree=6, num_features=12, community_size=60, node_time=True, edge_time=True,
            edge_dim=4, edge_weight=True, seed=11)
HETERO = dict(num_nodes=1200, avg_degree=6, num_features=6, community_size=60, hetero=True, node_time=True,
              edge_time=True, edge_dim=3, edge_weight=True, seed=12)


def _check_folder(ctx: DistContext, root: str, spec: dict) -> dict:
    """Runs inside one rank: lookups of random global ids against the original tensors."""
    data, orig = synthetic_graph(**spec), load_original_ids(root)
    gs, fs = load_stores(root, ctx=ctx)
    fs.serve(replace=True)
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    stats = {"remote_rows": 0, "groups": 0}
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        for group in fs.node_types + fs.edge_types:
            public = group if fs.is_hetero else None
            ids = torch.randint(0, orig[group].numel(), (400,), generator=gen)
            remote = int((fs.book.owner(group, ids) != ctx.partition).sum())
            assert remote > 0, group
            expected = original_attrs(data, group)
            got = fs.lookup_features(ids, isinstance(group, str), public, attr_names=sorted(expected))
            for name, value in expected.items():
                assert torch.equal(got[name], value[orig[group][ids]]), (group, name)
            stats["remote_rows"] += remote
            stats["groups"] += 1
        # PyG interface with global ids, and the async many-groups path on pyg_dist's event loop.
        t0 = fs.node_types[0]
        ids = torch.randint(0, orig[t0].numel(), (300,), generator=gen)
        want_y = (data[t0].y if fs.is_hetero else data.y)[orig[t0][ids]]
        assert torch.equal(fs.get_tensor(t0 if fs.is_hetero else None, "y", ids), want_y)
        many = {g: torch.randint(0, orig[g].numel(), (200,), generator=gen) for g in fs.node_types + fs.edge_types}
        names = {g: ["x"] if isinstance(g, str) else ["edge_attr", "edge_time"] for g in many}

        async def fetch_all():
            return await fs.lookup_many_async(many, names)
        out = rpc.run_coroutine(fetch_all(), timeout=60)
        for g, values in out.items():
            for name in names[g]:
                assert torch.equal(values[name], original_attrs(data, g)[name][orig[g][many[g]]]), (g, name)
        # A request routed to the wrong partition fails on the callee and arrives typed.
        peer = (ctx.partition + 1) % ctx.num_partitions
        bad = LookupRequest(ctx.partition, [FeatureQuery(t0, ("x",), fs.get_global_id(
            t0 if fs.is_hetero else None)[:2])])
        try:
            rpc.call(peer, LOOKUP_OP, bad)
            raise AssertionError("misrouted lookup did not fail")
        except RemoteCallError as exc:
            assert exc.partition == peer and "reached the store of partition" in exc.remote_traceback
            stats["error"] = (exc.op, exc.partition)
    del gs
    return stats


def _world_main(rank, world_size, folders, wrong_folder):
    ctx = DistContext.from_env(num_partitions=world_size)
    try:  # a folder with another partition count fails at once, before any RPC
        load_stores(wrong_folder, ctx=ctx)
        raise AssertionError("mismatched folder was accepted")
    except PartitionFormatError as exc:
        assert "META.json" in str(exc) and f"expects {world_size}" in str(exc)
    out = [_check_folder(ctx, root, spec) for root, spec in folders]
    if world_size == 4:  # two trainer ranks per partition (e.g. 2 GPUs per machine)
        out.append(_check_folder(DistContext.from_env(num_partitions=2), wrong_folder, HOMO))
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("store_world")
    homo, hetero = synthetic_graph(**HOMO), synthetic_graph(**HETERO)
    out = {}
    for parts in (2, 4):
        Partitioner(homo, parts, method="metis").save(root / f"homo{parts}", progress=False)
        Partitioner(hetero, parts, method="random").save(root / f"hetero{parts}", progress=False)
        out[parts] = [(str(root / f"homo{parts}"), HOMO), (str(root / f"hetero{parts}"), HETERO)]
    return out


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.timeout(300)
def test_lookups_in_a_world_equal_originals(folders, world_size):
    from pyg_dist.testing import spawn_world
    wrong = folders[6 - world_size][0][0]  # the other world's homo folder
    results = spawn_world(world_size, _world_main, folders[world_size], wrong, timeout=280)
    for rank, per_folder in enumerate(results):
        peer = (rank + 1) % world_size
        for stats in per_folder[:2]:
            assert stats["remote_rows"] > 0 and stats["error"] == (LOOKUP_OP, peer)
        assert [s["groups"] for s in per_folder] == [2, 12] + [2] * (world_size == 4)  # hetero: 3 + 9
        if world_size == 4:  # 2 ranks per partition: rank r serves partition r // 2
            assert per_folder[2]["error"] == (LOOKUP_OP, (rank // 2 + 1) % 2)
