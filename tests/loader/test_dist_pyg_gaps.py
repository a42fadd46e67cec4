"""PyG loader semantics in the distributed loaders (one sampler code path): partial node time and graphs
without edges, in spawned 2-rank worlds, against hand-computed batches."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

LABELS = torch.stack([torch.arange(40) * 7 % 100, torch.arange(40) * 3 % 100])


def _partial_time() -> HeteroData:
    data = HeteroData()
    data["a"].num_nodes, data["a"].x = 3, torch.arange(3.0).view(3, 1)
    data["b"].num_nodes, data["b"].time, data["b"].x = 5, torch.tensor([0, 1, 2, 3, 4]), torch.arange(5.0).view(5, 1)
    data["c"].num_nodes, data["c"].time, data["c"].x = 3, torch.tensor([10, 11, 12]), torch.arange(3.0).view(3, 1)
    data["b", "to", "a"].edge_index = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 1]])
    data["c", "to", "a"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 2]])
    data["a", "to", "b"].edge_index = torch.tensor([[0, 1, 2], [4, 4, 4]])
    return data


def _partial_rank(rank, world_size, root):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session
    orig = load_original_ids(root)
    with dist_session(TrainConfig(root, num_workers=0, timeout=60)) as env:
        new_a = torch.argsort(orig["a"])  # the folder's id of every original 'a' node
        loader = DistNeighborLoader(env, [-1, -1], input_nodes=("a", new_a), time_attr="time",
                                    input_time=torch.tensor([2, 3, 20]), batch_size=3, seed_split="rank")
        try:
            out = []
            for batch in loader:
                seeds = orig["a"][batch["a"].n_id[:batch["a"].batch_size]].tolist()
                per_seed = {}
                for t in ("b", "c"):
                    for i, b in zip(orig[t][batch[t].n_id].tolist(), batch[t].batch.tolist()):
                        per_seed.setdefault(seeds[b], []).append((t, i))
                out.append(per_seed)
            return out
        finally:
            loader.shutdown()


@pytest.mark.timeout(150)
def test_partial_node_time_in_the_distributed_loader(tmp_path):
    Partitioner(_partial_time(), 2, method="random").save(tmp_path / "g", progress=False)
    res = spawn_world(2, _partial_rank, str(tmp_path / "g"), timeout=120)
    per_seed = {}
    for batches in res:
        for b in batches:
            per_seed.update(b)
    # the one-machine oracle (tests/loader/test_pyg_gaps.py): b <= seed time, c excluded unless later seed
    assert sorted(per_seed[0]) == [("b", 0), ("b", 1), ("b", 2)]
    assert per_seed[1] == [("b", 3)]
    assert per_seed[2] == [("c", 2)]


def _edgeless_rank(rank, world_size, root):
    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session
    orig = load_original_ids(root)["_N"]
    new = torch.argsort(orig)
    with dist_session(TrainConfig(root, num_workers=0, timeout=60)) as env:
        loader = DistLinkNeighborLoader(env, [2], edge_label_index=new[LABELS], batch_size=8,
                                        neg_sampling="binary")
        try:
            pairs, xs_ok = [], True
            for batch in loader:
                eli = orig[batch.n_id[batch.edge_label_index[:, batch.edge_label == 1]]]
                pairs.append(eli)
                xs_ok &= bool(torch.equal(batch.x.view(-1), orig[batch.n_id].double()))
                xs_ok &= batch.edge_index.size(1) == 0
            return torch.cat(pairs, 1) if pairs else torch.empty(2, 0, dtype=torch.long), xs_ok
        finally:
            loader.shutdown()


@pytest.mark.timeout(150)
def test_link_loading_without_edges_in_the_distributed_loader(tmp_path):
    data = Data(num_nodes=100, x=torch.arange(100.0, dtype=torch.float64).view(100, 1))
    Partitioner(data, 2, method="random").save(tmp_path / "g", progress=False)
    res = spawn_world(2, _edgeless_rank, str(tmp_path / "g"), timeout=120)
    assert all(ok for _, ok in res)
    got = torch.cat([p for p, _ in res], 1)
    # every label edge arrives exactly once
    assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, LABELS.t().tolist()))


HETERO = dict(num_nodes=450, avg_degree=6, num_features=4, hetero=True, node_types=("paper", "author"), seed=4)


def _disjoint_link_world(rank, world_size, root):
    """Disjoint heterogeneous link batches (binary and triplet) of the 2-partition sampler equal the
    one-machine sampler's on the relabelled graph, with the same key."""
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling

    from pyg_dist import rpc
    from pyg_dist._types import as_typed
    from pyg_dist.context import DistContext
    from pyg_dist.datasets import synthetic_graph
    from pyg_dist.sampler import NeighborSampler
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.store import load_stores
    from pyg_dist.testing import relabelled
    ctx = DistContext.from_env(num_partitions=world_size)
    data, orig = synthetic_graph(**HETERO), load_original_ids(root)
    gs, fs = load_stores(root, ctx=ctx)
    serve_partition(gs, fs)
    rel = relabelled(data, orig)
    dist = DistNeighborSampler(gs, fs, [2, 2], disjoint=True, backend="numba")
    local = NeighborSampler(rel, [2, 2], disjoint=True, backend="numba")
    et = ("paper", "to", "author")
    ei = rel[et].edge_index[:, torch.arange(rank, 40, 5)]
    inp = EdgeSamplerInput(None, ei[0], ei[1], input_type=et)
    checked = 0
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        for mode in ("binary", "triplet"):
            out = dist.sample_from_edges(inp, NegativeSampling(mode, 2), key=3 + rank)
            want = local.sample_from_edges(inp, NegativeSampling(mode, 2), key=3 + rank)
            for name in ("node", "row", "col", "edge", "batch"):
                x, y = as_typed(getattr(out, name), 0, True), as_typed(getattr(want, name), 0, True)
                assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in y), name
                checked += sum(v.numel() for v in y.values())
    return checked


@pytest.mark.timeout(200)
def test_disjoint_hetero_links_in_the_distributed_sampler(tmp_path):
    pytest.importorskip("numba")
    from pyg_dist.datasets import synthetic_graph
    Partitioner(synthetic_graph(**HETERO), 2, method="random").save(tmp_path / "h", progress=False)
    assert all(n > 0 for n in spawn_world(2, _disjoint_link_world, str(tmp_path / "h"), timeout=180))
