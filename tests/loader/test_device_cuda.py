"""The GPU path on a real GPU: device stage, GPU feature cache, NCCL / gloo beside RPC (``scripts/gpu_check.sh``).

Marked ``cuda``; skipped, with the reason, on a machine without CUDA.
"""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (torch.cuda.is_available() is False); "
                                        "scripts/gpu_check.sh runs these on one")]


def _same(cpu_batch, gpu_batch):
    assert set(cpu_batch.keys()) == set(gpu_batch.keys())
    for k in cpu_batch.keys():
        a, b = cpu_batch[k], gpu_batch[k]
        if isinstance(a, torch.Tensor):
            assert b.is_cuda, k
            assert a.dtype == b.dtype and torch.equal(a, b.cpu()), k
        else:
            assert a == b, k


def test_one_machine_loaders_on_cuda_equal_cpu_batches():
    data = pyg_dist.synthetic_graph(3000, 8, num_features=16, seed=2)
    kw = dict(input_nodes=data.train_mask, batch_size=128, shuffle=True, seed=7)
    cpu = list(pyg_dist.NeighborLoader(data, [5, 3], **kw))
    it = iter(pyg_dist.NeighborLoader(data, [5, 3], device="cuda", **kw))
    assert it._feeder.stream != torch.cuda.current_stream()       # copies run on a stream of their own
    gpu = list(it)
    assert len(gpu) == len(cpu)
    for a, b in zip(cpu, gpu):
        _same(a, b)
    seeds = torch.cat([b.n_id[:b.batch_size].cpu() for b in gpu])
    assert sorted(seeds.tolist()) == data.train_mask.nonzero().view(-1).tolist()   # every seed once
    lk = dict(batch_size=64, shuffle=True, seed=3)
    for a, b in zip(pyg_dist.LinkNeighborLoader(data, [3], **lk), pyg_dist.LinkNeighborLoader(data, [3], device="cuda",
                                                                                               **lk)):
        _same(a, b)


def test_stage_with_workers_and_early_exit():
    data = pyg_dist.synthetic_graph(2000, 6, num_features=8, seed=4)
    kw = dict(batch_size=100, shuffle=True, seed=1, num_workers=2, persistent_workers=True)
    cpu = list(pyg_dist.NeighborLoader(data, [4, 2], **kw))
    loader = pyg_dist.NeighborLoader(data, [4, 2], device="cuda", **kw)
    for epoch in range(2):
        got = []
        for i, b in enumerate(loader):
            got.append(b)
            if epoch == 0 and i == 2:
                break                                            # left early: the next epoch still starts clean
        if epoch == 1:
            assert len(got) == len(cpu)


def test_pool_pins_while_a_cuda_stage_runs():
    from pyg_dist.store.buffers import buffer_pool, gather_rows
    data = pyg_dist.synthetic_graph(500, 4, num_features=4, seed=0)
    it = iter(pyg_dist.NeighborLoader(data, [2], batch_size=50, device="cuda"))
    assert buffer_pool().pinned
    assert gather_rows(torch.rand(200_000, 64), torch.arange(150_000)).is_pinned()
    it.close()
    assert not buffer_pool().pinned


def _rank(rank, world_size, root, gpu_cache_bytes):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    from pyg_dist.format import load_original_ids
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session, wrap_ddp

    data, orig = pyg_dist.synthetic_graph(3000, 8, num_features=16, seed=2), load_original_ids(root)["_N"]
    with dist_session(TrainConfig(root, timeout=120, gpu_cache_bytes=gpu_cache_bytes)) as env:
        backend = dist.get_backend_config()
        kw = dict(input_nodes="train_mask", batch_size=64, shuffle=True, seed=9, concurrency=2)
        host = DistNeighborLoader(env, [5, 3], device=None, **kw)
        gpu = DistNeighborLoader(env, [5, 3], **kw)                 # default: env.device and env.gpu_cache
        assert gpu.device == env.device and (gpu.gpu_cache is not None) == (gpu_cache_bytes is not None)
        torch.manual_seed(0)
        model = wrap_ddp(GraphSAGE(16, 32, 2, int(data.y.max()) + 1), env)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        steps = 0
        for a, b in zip(host, gpu):
            _same(a, b)
            on = orig[a.n_id]
            assert torch.equal(a.x, data.x[on]) and torch.equal(b.y.cpu(), data.y[on])
            opt.zero_grad()
            F.cross_entropy(model(b.x, b.edge_index)[:b.batch_size], b.y[:b.batch_size]).backward()
            opt.step()
            steps += 1
        one = torch.ones(1, device=env.device)
        dist.all_reduce(one)                                          # a CUDA tensor: NCCL, or gloo when shared
        assert one.item() == world_size
        flat = torch.cat([p.detach().view(-1) for p in model.parameters()]).cpu()
        every = [torch.zeros_like(flat) for _ in range(world_size)]
        dist.all_gather(every, flat)                                  # CPU tensors: over gloo, NCCL or not
        same = all(torch.equal(every[0], e) for e in every)
        host.shutdown()
        gpu.shutdown()
        hits = None if env.gpu_cache is None else env.gpu_cache.index.stats.hits.get("_N", 0)
        return backend, str(env.device), steps, same, hits


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("gpu_cache_bytes", [None, 1 << 20])
def test_dist_loader_ddp_on_cuda(tmp_path, world, gpu_cache_bytes):
    root = tmp_path / "g"
    Partitioner(pyg_dist.synthetic_graph(3000, 8, num_features=16, seed=2), world, method="metis").save(
        root, overwrite=True, progress=False)
    res = spawn_world(world, _rank, str(root), gpu_cache_bytes, timeout=240)
    shared = world > torch.cuda.device_count()
    for backend, device, steps, same, hits in res:
        assert device.startswith("cuda")
        assert ("nccl" in backend) == (not shared), backend      # ranks sharing a GPU reduce over gloo
        assert steps > 0 and same                                     # DDP kept the replicas equal
        assert (hits is None) == (gpu_cache_bytes is None) and (hits is None or hits > 0)
