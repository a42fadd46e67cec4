"""``pyg_dist.distributed`` in spawned worlds: a PyG-shaped script (DistContext, stores, loaders, DDP)
samples exactly what the oracles say, on 2 and 4 ranks, homo and hetero, and equals the native loader."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.testing import spawn_world
from pyg_dist.testing.oracles import typed_k_hop

HOPS = 2


def _homo():
    return pyg_dist.synthetic_graph(400, 5, num_features=8, edge_dim=3, seed=3)


def _hetero():
    return pyg_dist.synthetic_graph(400, 5, num_features=8, hetero=True, seed=3)


def _partition(tmp_path, data, parts):
    from pyg_dist.distributed import Partitioner
    root = tmp_path / f"pyg-{parts}"
    Partitioner(data, parts, str(root)).generate_partition(progress=False)
    return str(root)


def _rank_split(ids: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """PyG's example: the training ids cut into one slice per rank (not by owner)."""
    return ids.tensor_split(world)[rank]


def _script_rank(rank, world, root, hetero, workers, compare_native):
    """A script in the shape of PyG's tutorial, with only the import changed."""
    import os

    import torch.distributed as dist

    from pyg_dist.distributed import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore

    data = _hetero() if hetero else _homo()
    ntype = "paper" if hetero else None
    store = data[ntype] if hetero else data
    graph = LocalGraphStore.from_partition(root, rank)
    feature = LocalFeatureStore.from_partition(root, rank)
    feature.labels = store.y
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world, group_name="t")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    train_idx = _rank_split(store.train_mask.nonzero().view(-1), rank, world)
    seeds_in = (ntype, train_idx) if hetero else train_idx
    port = int(os.environ["MASTER_PORT"]) + 7
    loader = DistNeighborLoader(data=(feature, graph), num_neighbors=[-1] * HOPS, master_addr="127.0.0.1",
                                master_port=port, current_ctx=ctx, input_nodes=seeds_in, batch_size=16,
                                shuffle=True, num_workers=workers, seed=5)
    seen, batches = [], []
    for batch in loader:
        b = batch[ntype] if hetero else batch
        seeds = b.n_id[:b.batch_size]
        assert torch.equal(b.y, store.y[b.n_id])                     # labels[n_id], PyG's y
        for t in (data.node_types if hetero else [None]):          # features of EVERY type equal the originals
            part = batch[t] if hetero else batch
            assert torch.equal(part.x, (data[t] if hetero else data).x[part.n_id]), t
        want = typed_k_hop(data, ntype or "_N", seeds, HOPS)
        got = {t: set(batch[t].n_id.tolist()) for t in data.node_types} if hetero else {"_N": set(b.n_id.tolist())}
        assert {t: v for t, v in got.items() if v} == {t: v for t, v in want.items() if v}
        seen += seeds.tolist()
        batches.append(batch)
    same = None
    if compare_native:
        from pyg_dist.loader.dist_node_loader import DistNeighborLoader as Native
        native = Native((feature, graph), [-1] * HOPS, input_nodes=seeds_in, batch_size=16, shuffle=True,
                        seed=5, seed_split="rank", time_attr=None)
        same = all(torch.equal(a.n_id if not hetero else a[ntype].n_id, b.n_id if not hetero else b[ntype].n_id)
                   for a, b in zip(batches, native)) and len(native) == len(batches)
    loader.shutdown()
    _exit_like_a_script()
    return seen, len(batches), same


def _exit_like_a_script():
    """spawn_world's ranks leave with os._exit; a script's interpreter runs its exit handlers (PyG's
    loaders leave RPC there, and so do ours)."""
    import atexit
    atexit._run_exitfuncs()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world,hetero,workers", [(2, False, 0), (4, False, 0), (2, True, 0), (2, False, 2)])
def test_pyg_script_full_fanout(tmp_path, world, hetero, workers):
    data = _hetero() if hetero else _homo()
    root = _partition(tmp_path, data, world)
    res = spawn_world(world, _script_rank, root, hetero, workers, workers == 0, timeout=200)
    store = data["paper"] if hetero else data
    seen = [s for r in res for s in r[0]]
    assert sorted(seen) == store.train_mask.nonzero().view(-1).tolist()     # every seed exactly once
    assert len({r[1] for r in res}) == 1                                      # equal batch counts (DDP)
    if workers == 0:
        assert all(r[2] for r in res)                                         # same batches as native


def _link_and_time_rank(rank, world, root_links, root_time):
    """Link seeds with binary negatives, then temporal node sampling through a given DistNeighborSampler."""
    import os

    import torch.distributed as dist
    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.distributed import (
        DistContext,
        DistLinkNeighborLoader,
        DistNeighborLoader,
        DistNeighborSampler,
        LocalFeatureStore,
        LocalGraphStore,
    )

    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world, group_name="t")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    port = int(os.environ["MASTER_PORT"]) + 9
    data = _homo()
    stores = (LocalFeatureStore.from_partition(root_links, rank), LocalGraphStore.from_partition(root_links, rank))
    mine = _rank_split(torch.arange(0, data.num_edges, 7), rank, world)
    links = DistLinkNeighborLoader(stores, [3, 2], "127.0.0.1", port, ctx, edge_label_index=data.edge_index[:, mine],
                                   neg_sampling=NegativeSampling("binary"), batch_size=8, seed=1)
    assert isinstance(links.dist_sampler, DistNeighborSampler) and links.dist_sampler.current_ctx is ctx
    assert links.channel.empty() and links.dist_sampler is links.link_sampler  # PyG's attributes, one sampler
    positives = []
    for b in links:
        assert torch.equal(b.x, data.x[b.n_id]) and torch.equal(b.edge_attr, data.edge_attr[b.e_id])
        pos = b.n_id[b.edge_label_index[:, b.edge_label == 1]]
        positives += (pos[0] * data.num_nodes + pos[1]).tolist()
        assert int((b.edge_label == 0).sum()) == int((b.edge_label == 1).sum())
    links.shutdown()
    tdata = pyg_dist.synthetic_graph(300, 5, num_features=4, node_time=True, seed=6)
    fs, gs = LocalFeatureStore.from_partition(root_time, rank), LocalGraphStore.from_partition(root_time, rank)
    sampler = DistNeighborSampler(ctx, (fs, gs), [-1, -1], time_attr="time", concurrency=2)
    seeds = _rank_split(torch.arange(tdata.num_nodes), rank, world)
    temporal = DistNeighborLoader((fs, gs), [-1, -1], "127.0.0.1", port, ctx, input_nodes=seeds,
                                  input_time=tdata.time[seeds], time_attr="time", dist_sampler=sampler, batch_size=32)
    assert temporal.dist_sampler is sampler
    count = 0
    for b in temporal:
        assert torch.equal(b.time, tdata.time[b.n_id])
        assert bool((b.time <= b.seed_time[b.batch]).all())               # nothing newer than its seed
        count += b.batch_size
    temporal.shutdown()
    _exit_like_a_script()
    return positives, count


@pytest.mark.timeout(240)
def test_pyg_script_links_and_temporal(tmp_path):
    data = _homo()
    root_links = _partition(tmp_path, data, 2)
    from pyg_dist.distributed import Partitioner
    root_time = str(tmp_path / "time")
    Partitioner(pyg_dist.synthetic_graph(300, 5, num_features=4, node_time=True, seed=6), 2,
                root_time).generate_partition(progress=False)
    res = spawn_world(2, _link_and_time_rank, root_links, root_time, timeout=200)
    given = data.edge_index[:, torch.arange(0, data.num_edges, 7)]
    assert sorted(p for r in res for p in r[0]) == sorted((given[0] * data.num_nodes + given[1]).tolist())
    assert sum(r[1] for r in res) == 300                                  # every temporal seed once


def test_pyg_arguments_fail_loudly(tmp_path, monkeypatch):
    from pyg_dist.distributed import DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore
    from pyg_dist.errors import InvalidArgumentError
    root = _partition(tmp_path, _homo(), 2)
    stores = (LocalFeatureStore.from_partition(root, 0), LocalGraphStore.from_partition(root, 0))
    ctx = DistContext(rank=0, global_rank=0, world_size=2, global_world_size=2, group_name="t")
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(InvalidArgumentError, match="master_addr"):
        DistNeighborLoader(stores, [2], None, 1234, ctx)
    with pytest.raises(InvalidArgumentError, match="master_port"):
        DistNeighborLoader(stores, [2], "127.0.0.1", None, ctx)
    with pytest.raises(InvalidArgumentError, match="current_ctx"):
        DistNeighborLoader(stores, [2], "127.0.0.1", 1234, current_ctx="rank0")
    with pytest.raises(InvalidArgumentError, match="data"):
        DistNeighborLoader(stores[0], [2], "127.0.0.1", 1234, ctx)
    with pytest.raises(InvalidArgumentError, match="rank"):
        DistContext(rank=2, global_rank=0, world_size=2, global_world_size=2, group_name="t")
    with pytest.raises(InvalidArgumentError, match="data"):                     # stores of two partitions
        DistNeighborLoader((stores[0], LocalGraphStore.from_partition(root, 1)), [2], "127.0.0.1", 1234, ctx)
