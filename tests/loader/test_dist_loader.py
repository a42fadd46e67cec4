"""Distributed loaders in spawned worlds: batches equal the originals, every seed once, equal counts."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

FANOUT = [4, 3]


def _graph():
    return pyg_dist.synthetic_graph(600, 6, num_features=8, edge_dim=3, seed=1)


def _partition(tmp_path, parts, method="metis", sub_parts=1, data=None):
    data = data if data is not None else _graph()
    root = tmp_path / f"g-{parts}-{method}-{sub_parts}"
    Partitioner(data, parts, method=method, sub_parts=sub_parts).save(root, overwrite=True, progress=False)
    return data, str(root)


def _check_batch(batch, data, orig):
    """x / y / edge_attr rows equal the originals; every sampled edge exists in the original graph."""
    on, oe = orig["_N"][batch.n_id], orig[("_N", "_E", "_N")][batch.e_id]
    assert torch.equal(batch.x, data.x[on]) and torch.equal(batch.y, data.y[on])
    assert torch.equal(batch.edge_attr, data.edge_attr[oe])
    src, dst = on[batch.edge_index[0]], on[batch.edge_index[1]]
    assert torch.equal(data.edge_index[0, oe], src) and torch.equal(data.edge_index[1, oe], dst)
    assert batch.batch_size == batch.input_id.numel()


def _epoch_rank(rank, world_size, root, workers, input_nodes, drop_last, bs, context=None):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data = _graph()
    orig = load_original_ids(root)
    with dist_session(TrainConfig(root, num_workers=workers, timeout=60)) as env:
        loader = DistNeighborLoader(env, FANOUT, input_nodes=input_nodes, batch_size=bs, shuffle=True,
                                    drop_last=drop_last, num_workers=workers,
                                    **({"multiprocessing_context": context} if context else {}))
        seeds, count = [], 0
        try:
            for batch in loader:
                _check_batch(batch, data, orig)
                if isinstance(input_nodes, str):                # mask input: input_id = global id
                    assert torch.equal(batch.n_id[:batch.batch_size], batch.input_id)
                else:                                           # tensor input: position in it (PyG)
                    assert torch.equal(batch.n_id[:batch.batch_size], input_nodes[batch.input_id])
                seeds += orig["_N"][batch.n_id[:batch.batch_size]].tolist()
                count += 1
        finally:
            loader.shutdown()
        return seeds, count, len(loader)


def _run_epoch(root, world, workers=0, input_nodes="train_mask", drop_last=False, bs=16, context=None):
    res = spawn_world(world, _epoch_rank, root, workers, input_nodes, drop_last, bs, context, timeout=150)
    counts = {c for _, c, _ in res} | {n for _, _, n in res}
    seeds = [s for r, _, _ in res for s in r]
    return seeds, counts, res


def _expected(data, mask="train_mask"):
    return set(data[mask].nonzero().view(-1).tolist())


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,parts,workers,context", [(2, 2, 0, None), (4, 2, 0, None), (2, 2, 2, "fork"),
                                                         (2, 2, 1, "spawn")])
def test_every_seed_once_equal_batches(tmp_path, world, parts, workers, context):
    data, root = _partition(tmp_path, parts, sub_parts=world // parts)
    seeds, counts, _ = _run_epoch(root, world, workers, context=context)
    assert len(counts) == 1                                  # equal batch counts on every rank
    expected = _expected(data)
    assert len(seeds) == len(set(seeds)) and set(seeds) <= expected
    assert len(expected) - len(seeds) < world                # an equal split leaves out < 1 seed per rank


@pytest.mark.timeout(200)
def test_hybrid_folder(tmp_path):
    data, root = _partition(tmp_path, 2, method="hybrid")
    seeds, counts, _ = _run_epoch(root, 2, 0, input_nodes="val_mask")
    expected = _expected(data, "val_mask")
    assert len(counts) == 1 and len(seeds) == len(set(seeds)) and len(expected) - len(seeds) < 2


@pytest.mark.timeout(200)
def test_all_seeds_in_one_partition_drop_last(tmp_path):
    data, root = _partition(tmp_path, 2, method="random")
    orig = load_original_ids(root)["_N"]
    # the global seed set: only nodes owned by partition 1 (global ids >= its start)
    from pyg_dist.format import read_meta
    start = int(read_meta(root).node_bounds["_N"][1])
    seeds_global = torch.arange(start, start + 100)
    seeds, counts, _ = _run_epoch(root, 2, 0, input_nodes=seeds_global, drop_last=True, bs=16)
    assert counts == {3}                                     # 100 seeds / 2 ranks -> 3 full batches each
    assert len(seeds) == len(set(seeds)) == 96
    assert set(seeds) <= set(orig[seeds_global].tolist())


@pytest.mark.timeout(120)
def test_bad_inputs_raise_typed_errors(tmp_path):
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.store import load_stores

    _, root = _partition(tmp_path, 1, method="random")
    gs, fs = load_stores(root, 0)
    with pytest.raises(InvalidArgumentError, match="data"):
        DistNeighborLoader("nope", FANOUT)
    with pytest.raises(InvalidArgumentError, match="seed_split"):
        DistNeighborLoader((fs, gs), FANOUT, seed_split="magic", batch_size=4)
    with pytest.raises(InvalidArgumentError, match="input_nodes"):
        DistNeighborLoader((fs, gs), FANOUT, input_nodes=torch.tensor([0, 10_000]), batch_size=4)
    with pytest.raises(InvalidArgumentError, match="persistent_workers"):
        DistNeighborLoader((fs, gs), FANOUT, batch_size=4, num_workers=1, persistent_workers=False,
                           ctx=pyg_dist.DistContext(rank=0, world_size=1, num_partitions=1, num_workers=1))


def _prefetch_rank(rank, world_size, root):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.loader.prefetch import PrefetchIterator
    from pyg_dist.train.session import TrainConfig, dist_session

    data, orig = _graph(), load_original_ids(root)
    with dist_session(TrainConfig(root, timeout=60)) as env:
        plain = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", batch_size=8)
        ahead = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", batch_size=8, concurrency=3)
        assert not isinstance(plain.host_batches(), PrefetchIterator)
        assert isinstance(ahead.host_batches(), PrefetchIterator)
        it = iter(ahead)
        next(it), next(it)  # leave an epoch early: the batches in flight are cancelled, nothing hangs
        it.close()
        want = [b.n_id[:b.batch_size].tolist() for b in plain]
        got = []
        for batch in ahead:
            _check_batch(batch, data, orig)
            got.append(batch.n_id[:batch.batch_size].tolist())
        return want, got, len(ahead)


@pytest.mark.timeout(200)
def test_concurrency_keeps_batches_in_flight_in_order(tmp_path):
    """concurrency=3 without workers: three batches in flight, yet the same seed batches in the same
    order as one at a time, rows equal to the originals, and an early exit cancels cleanly."""
    _, root = _partition(tmp_path, 2)
    for want, got, n in spawn_world(2, _prefetch_rank, root, timeout=150):
        assert got == want and len(got) == n > 3


def _two_worker_loaders_rank(rank, world_size, root):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data, orig = _graph(), load_original_ids(root)
    with dist_session(TrainConfig(root, num_workers=2, timeout=60)) as env:
        train = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", batch_size=16, shuffle=True,
                                   num_workers=2)
        val = DistNeighborLoader(env, FANOUT, input_nodes="val_mask", batch_size=16, num_workers=1,
                                 seed_split="partition")
        seen = {"train": [], "val": []}
        try:
            for name, loader in (("train", train), ("val", val), ("train", train), ("val", val)):
                for batch in loader:           # both loaders' workers stay alive between epochs
                    _check_batch(batch, data, orig)
                    seen[name].append(orig["_N"][batch.n_id[:batch.batch_size]].tolist())
        finally:
            train.shutdown()
            val.shutdown()
        return seen, len(train), len(val)


@pytest.mark.timeout(240)
def test_several_worker_loaders_at_once(tmp_path):
    """A training and an evaluation loader, each with its own workers (its own RPC world), used in
    turn twice: rows equal the originals and each epoch covers each loader's seeds exactly once."""
    data, root = _partition(tmp_path, 2)
    res = spawn_world(2, _two_worker_loaders_rank, root, timeout=200)
    for name, mask in (("train", "train_mask"), ("val", "val_mask")):
        for epoch in range(2):
            seeds = [s for seen, n_train, n_val in res
                     for b in seen[name][epoch * (n_train if name == "train" else n_val):][
                         :(n_train if name == "train" else n_val)] for s in b]
            assert len(seeds) == len(set(seeds))
            assert len(_expected(data, mask)) - len(seeds) < (2 if name == "train" else 1)
            assert set(seeds) <= _expected(data, mask)


def _loaders_in_other_orders(rank, world_size, root):
    from pyg_dist.loader import workers
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(str(root), num_workers=1, timeout=60)) as env:
        if rank == 1:
            next(workers._WORKER_WORLDS)  # rank 1 "built" a loader with workers that rank 0 did not
        DistNeighborLoader(env, [2], input_nodes="train_mask", batch_size=8, num_workers=1)


@pytest.mark.timeout(180)
def test_loaders_built_in_other_orders_fail_with_both_indices(tmp_path):
    """The k-th loader with workers rendezvouses on a port the ranks agree on; ranks that built their
    loaders in different orders get a typed error naming both indices, never a hang."""
    from pyg_dist.testing import RankFailedError
    data = pyg_dist.synthetic_graph(300, 4, num_features=4, seed=1)
    Partitioner(data, 2, method="random").save(tmp_path / "p2", progress=False)
    with pytest.raises(RankFailedError, match=r"loader order.*#0.*#1|loader order.*#1.*#0"):
        spawn_world(2, _loaders_in_other_orders, tmp_path / "p2", timeout=150)


@pytest.mark.timeout(120)
def test_stop_workers_ends_persistent_workers_of_this_torch():
    """The one use of torch's private DataLoader API: if torch changes it, this fails loudly."""
    from torch.utils.data import DataLoader

    from pyg_dist.loader.workers import stop_workers
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=2, persistent_workers=True)
    assert sum(len(b) for b in loader) == 8
    procs = list(loader._iterator._workers)
    assert len(procs) == 2 and all(p.is_alive() for p in procs)
    stop_workers(loader)
    assert loader._iterator is None and not any(p.is_alive() for p in procs)
    assert sum(len(b) for b in loader) == 8  # a new epoch starts fresh workers
    stop_workers(loader)


def _global_train(data, orig):
    inv = torch.empty_like(orig)
    inv[orig] = torch.arange(orig.numel())
    return inv[data.train_mask.nonzero().view(-1)].sort().values


def _repeats_rank(rank, world_size, root):
    from torch_geometric.nn import GraphSAGE

    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.testing import check_repeats, first_occurrence
    from pyg_dist.train.session import TrainConfig, dist_session
    data, orig = _graph(), load_original_ids(root)["_N"]
    train = _global_train(data, orig)
    seeds = torch.cat([train, train[:30], train[3:9]])          # the same tensor on every rank
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, 2, 4).eval()
    positions, repeats = [], 0
    with dist_session(TrainConfig(root, timeout=60)) as env:
        loader = DistNeighborLoader(env, FANOUT, input_nodes=seeds, batch_size=16, shuffle=True)
        for batch in loader:
            bs = batch.batch_size
            repeats += check_repeats(batch.n_id, batch.edge_index, bs, seeds[batch.input_id])[0]
            assert torch.equal(batch.y, data.y[orig[batch.n_id]]) and torch.equal(batch.x, data.x[orig[batch.n_id]])
            with torch.no_grad():
                out = model(batch.x, batch.edge_index)[:bs]
            assert torch.equal(out, out[first_occurrence(batch.n_id[:bs])])
            positions += batch.input_id.tolist()
    return positions, repeats


@pytest.mark.timeout(200)
def test_repeated_seeds_distributed(tmp_path):
    """DistNeighborLoader with repeats in input_nodes: PyG's layout, original rows, equal GNN outputs,
    every input position at most once (an equal split leaves out < 1 per rank)."""
    data, root = _partition(tmp_path, 2)
    res = spawn_world(2, _repeats_rank, root, timeout=150)
    positions = [p for r, _ in res for p in r]
    total = int(data.train_mask.sum()) + 36
    assert len(positions) == len(set(positions)) and total - len(positions) < 2
    assert sum(r for _, r in res) > 0


def _fingerprints(rank, world_size, root, workers, concurrency):
    import hashlib

    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    def digest(batch, names):
        h = hashlib.sha256()
        for name in names:
            h.update(batch[name].contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    torch.manual_seed(rank * 7 + workers + concurrency)  # the global RNG must not matter
    out = []
    with dist_session(TrainConfig(root, num_workers=workers, timeout=60)) as env:
        kw = dict(batch_size=16, shuffle=True, num_workers=workers, concurrency=concurrency, seed=5)
        nodes = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", **kw)
        links = DistLinkNeighborLoader(env, FANOUT, neg_sampling=NegativeSampling("binary", 1), **kw)
        try:
            for _ in range(2):
                out += [digest(b, ("n_id", "e_id", "edge_index", "x")) for b in nodes]
                out += [digest(b, ("n_id", "edge_index", "edge_label_index", "edge_label")) for b in links]
        finally:
            nodes.shutdown()
            links.shutdown()
    return out


@pytest.mark.timeout(400)
def test_batches_are_reproducible_whatever_workers_or_concurrency(tmp_path):
    """Batch i of epoch e on rank r depends on (seed, e, i, r) and the folder only: two runs, concurrency
    1 / 3 and num_workers 0 / 2 give bit-identical node and link batches (negatives included)."""
    _, root = _partition(tmp_path, 2)
    runs = {cfg: spawn_world(2, _fingerprints, root, *cfg, timeout=180) for cfg in ((0, 1), (0, 3), (2, 1))}
    again = spawn_world(2, _fingerprints, root, 0, 1, timeout=180)
    assert again == runs[(0, 1)]
    assert runs[(0, 3)] == runs[(0, 1)] and runs[(2, 1)] == runs[(0, 1)]
    assert len(set(runs[(0, 1)][0])) == len(runs[(0, 1)][0])  # batches (and epochs) differ from each other


def _worker_protects_frames(worker_id):
    from pyg_dist.rpc.state import live_state
    mode = live_state().transport.mode
    if mode != "encrypt":
        raise AssertionError(f"sampler worker {worker_id} runs wire protection {mode!r}")


def _choices_rank(rank, world_size, root):
    import os

    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    before = dict(os.environ)
    with dist_session(TrainConfig(root, num_workers=1, transport="sockets", wire_protection="encrypt",
                                  timeout=60)) as env:
        assert {k: v for k, v in os.environ.items() if k.startswith("PYG_DIST_")} == \
            {k: v for k, v in before.items() if k.startswith("PYG_DIST_")}        # no setting went through os.environ
        loader = DistNeighborLoader(env, FANOUT, input_nodes="train_mask", batch_size=64, num_workers=1,
                                    worker_init_fn=_worker_protects_frames)
        setup = loader.worker_init_fn
        try:
            count = sum(1 for _ in loader)
        finally:
            loader.shutdown()
        return setup.choices, count, setup.timeout


@pytest.mark.timeout(200)
def test_workers_get_the_runs_transport_choices_from_the_config_not_the_environment(tmp_path):
    _, root = _partition(tmp_path, 2)
    env = {"PYG_DIST_WIRE_PROTECTION": "off", "PYG_DIST_TRANSPORT": "tensorpipe"}   # the config's choices win
    res = spawn_world(2, _choices_rank, root, timeout=150, env=env)
    for choices, count, timeout in res:
        assert choices == {"transport": "sockets", "wire_protection": "encrypt"} and count > 0
        assert timeout == 60.0  # the config's start-up bound, not the workers' default
