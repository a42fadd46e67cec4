"""DistEmbedding + sparse optimizers in spawned worlds, against a single-process ``nn.Embedding(sparse=True)``
with ``torch.optim.SparseAdam`` / ``Adagrad`` on the same batches."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

DIM, LR = 4, 0.1


def _graph(hetero):
    return pyg_dist.synthetic_graph(240, 4, num_features=2, hetero=hetero, seed=2)


def _batch(rank, step, n):
    """Ids with repeats (summed once) and a weight per row: the loss is ``(rows * w).sum()``."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    ids = torch.randint(0, n, (10,), generator=g)
    ids = torch.cat([ids, ids[:3]])
    return ids, torch.randn(ids.numel(), DIM, generator=g)


def _oracle_rank(rank, world, root, opt_name, steps, types):
    from pyg_dist.embedding import DistEmbedding, SparseAdagrad, SparseAdam
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(root, timeout=60)) as env:
        emb = DistEmbedding(env, DIM, name="table")
        opt = (SparseAdam if opt_name == "adam" else SparseAdagrad)([emb], lr=LR, sync=True)
        owned = {t: env.feature_store.book.owned_ids(t, env.ctx.partition) for t in emb.tables}
        before = {t: r.clone() for t, r in emb.tables.items()}
        if len(types) > 1:                                                   # a batch's n_id_dict at once
            probe = {t: torch.arange(0, env.meta.num_nodes[t], 3) for t in types}
            with torch.no_grad():
                both = emb(probe)
                assert all(torch.equal(both[t], emb(probe[t], t)) for t in types)
            emb.take_grads()
        for step in range(steps):
            loss = 0
            for t in types:
                ids, w = _batch(rank, step * 7 + len(t), env.meta.num_nodes[t])
                loss = loss + (emb(ids, None if t == "_N" else t) * w).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return owned, before, {t: r.clone() for t, r in emb.tables.items()}


def _single_process(res, world, opt_name, steps, types, sizes):
    full0 = {t: torch.zeros(sizes[t], DIM) for t in types}
    for owned, before, _ in res:
        for t in types:
            full0[t][owned[t]] = before[t]
    tables = {t: torch.nn.Embedding(sizes[t], DIM, sparse=True, _weight=full0[t].clone()) for t in types}
    params = [tables[t].weight for t in types]
    opt = torch.optim.SparseAdam(params, lr=LR) if opt_name == "adam" else torch.optim.Adagrad(params, lr=LR)
    for step in range(steps):
        loss = 0
        for r in range(world):
            for t in types:
                ids, w = _batch(r, step * 7 + len(t), sizes[t])
                loss = loss + (tables[t](ids) * w).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return full0, {t: tables[t].weight.detach() for t in types}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,hetero,opt_name,steps", [(2, False, "adam", 1), (2, False, "adagrad", 3),
                                                          (4, True, "adagrad", 2), (4, True, "adam", 1)])
def test_sync_steps_equal_the_single_process_optimizer(tmp_path, world, hetero, opt_name, steps):
    data = _graph(hetero)
    Partitioner(data, world, method="random").save(tmp_path / "p", progress=False)
    types = ["paper", "author"] if hetero else ["_N"]
    sizes = {t: (data[t].num_nodes if hetero else data.num_nodes) for t in types}
    res = spawn_world(world, _oracle_rank, str(tmp_path / "p"), opt_name, steps, types, timeout=180)
    full0, want = _single_process(res, world, opt_name, steps, types, sizes)
    touched = {t: torch.zeros(sizes[t], dtype=torch.bool) for t in types}
    for step in range(steps):
        for r in range(world):
            for t in types:
                touched[t][_batch(r, step * 7 + len(t), sizes[t])[0]] = True
    for owned, before, after in res:
        for t in types:
            assert after[t].shape[0] == owned[t].numel()                       # only its own rows
            assert torch.allclose(after[t], want[t][owned[t]], atol=1e-6), t     # = single-process step
            untouched = ~touched[t][owned[t]]
            assert untouched.any() and torch.equal(after[t][untouched], before[t][untouched])


def _failure_rank(rank, world, root):
    from pyg_dist import rpc
    from pyg_dist.embedding import DistEmbedding, SparseAdagrad
    from pyg_dist.embedding.optim import PUSH_OP
    from pyg_dist.errors import RemoteCallError
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(root, timeout=60)) as env:
        emb = DistEmbedding(env, DIM, name="table")
        opt = SparseAdagrad([emb], lr=LR)
        if rank == 1:
            rpc.unregister_callee(f"{PUSH_OP}.table")                        # this owner can no longer apply
        import torch.distributed as dist
        dist.barrier()
        outcome = None
        if rank == 0:
            remote = env.feature_store.book.owned_ids("_N", 1)[:5]
            emb(remote).sum().backward()
            opt.step()
            try:
                opt.flush()
            except RemoteCallError as exc:
                outcome = (type(exc).__name__, exc.partition)
        dist.barrier()
        return outcome


@pytest.mark.timeout(120)
def test_an_owner_failure_reaches_the_trainer_typed(tmp_path):
    Partitioner(_graph(False), 2, method="random").save(tmp_path / "p", progress=False)
    res = spawn_world(2, _failure_rank, str(tmp_path / "p"), timeout=100)
    assert res[0] == ("RemoteCallError", 1)


def _hogwild_rank(rank, world, root, ckpt):
    """Disjoint batches (each row pushed by one trainer only): Hogwild equals the exact step. Then a
    checkpoint round trip of the rows and the optimizer state."""
    from pyg_dist.embedding import DistEmbedding, SparseAdagrad
    from pyg_dist.errors import InvalidArgumentError
    from pyg_dist.train.session import TrainConfig, dist_session
    with dist_session(TrainConfig(root, timeout=60)) as env:
        emb = DistEmbedding(env, DIM, name="table")
        opt = SparseAdagrad([emb], lr=LR)                                     # sync=False: Hogwild
        owned = env.feature_store.book.owned_ids("_N", env.ctx.partition)
        before = emb.full_rows().clone()
        n = env.meta.num_nodes["_N"]
        ids = torch.arange(rank, n, world)[:20]                              # disjoint across ranks
        w = torch.randn(ids.numel(), DIM, generator=torch.Generator().manual_seed(rank))
        (emb(ids) * w).sum().backward()
        opt.step()
        opt.flush()
        import torch.distributed as dist
        dist.barrier()                                                       # every push applied
        after = emb.full_rows().clone()
        emb.save(ckpt)
        opt.save(ckpt)
        state = opt.state["table"]["_N"]["sum"].clone()
        emb.full_rows().add_(1.0)
        opt.state["table"]["_N"]["sum"].zero_()
        emb.load(ckpt)
        opt.load(ckpt)
        restored = torch.equal(emb.full_rows(), after) and torch.equal(opt.state["table"]["_N"]["sum"], state)
        errors = []
        for bad in (dict(dim=0), dict(dim=4, node_types=["nope"])):
            try:
                DistEmbedding(env, **bad)
            except InvalidArgumentError as exc:
                errors.append(exc.name)
        return owned, before, after, restored, errors


@pytest.mark.timeout(120)
def test_hogwild_disjoint_updates_and_checkpoints(tmp_path):
    data = _graph(False)
    Partitioner(data, 2, method="random").save(tmp_path / "p", progress=False)
    res = spawn_world(2, _hogwild_rank, str(tmp_path / "p"), str(tmp_path / "ckpt"), timeout=100)
    n = data.num_nodes
    full0 = torch.zeros(n, DIM)
    for owned, before, *_ in res:
        full0[owned] = before
    table = torch.nn.Embedding(n, DIM, sparse=True, _weight=full0.clone())
    opt = torch.optim.Adagrad([table.weight], lr=LR)
    loss = 0
    for r in range(2):
        ids = torch.arange(r, n, 2)[:20]
        loss = loss + (table(ids) * torch.randn(ids.numel(), DIM, generator=torch.Generator().manual_seed(r))).sum()
    loss.backward()
    opt.step()
    for owned, _, after, restored, errors in res:
        assert torch.allclose(after, table.weight.detach()[owned], atol=1e-6)
        assert restored and errors == ["dim", "node_types"]
