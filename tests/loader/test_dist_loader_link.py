"""DistLinkNeighborLoader and hetero DistNeighborLoader in spawned worlds, checked against originals."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world

ET = ("_N", "_E", "_N")


def _graph():
    return pyg_dist.synthetic_graph(500, 6, num_features=8, edge_dim=2, edge_time=True, seed=8)


def _link_rank(rank, world_size, root, temporal):
    from torch_geometric.sampler import NegativeSampling

    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data, orig = _graph(), load_original_ids(root)
    on, oe = orig["_N"], orig[ET]
    keys = set((data.edge_index[0] * data.num_nodes + data.edge_index[1]).tolist())
    seen, count = [], 0
    with dist_session(TrainConfig(root, timeout=60)) as env:
        loader = DistLinkNeighborLoader(env, [3, 2], batch_size=32, shuffle=True,
                                        neg_sampling=NegativeSampling("binary", 1),
                                        time_attr="edge_time" if temporal else None,
                                        concurrency=2 if temporal else 1)  # temporal: 2 batches in flight
        for batch in loader:
            count += 1
            n, e = on[batch.n_id], oe[batch.e_id]
            assert torch.equal(batch.x, data.x[n]) and torch.equal(batch.edge_attr, data.edge_attr[e])
            assert torch.equal(data.edge_index[:, e], n[batch.edge_index])        # sampled edges exist
            src, dst = n[batch.edge_label_index[0]], n[batch.edge_label_index[1]]
            pos = batch.edge_label == 1
            num_pos = int(pos.sum())
            assert num_pos == batch.input_id.numel() and int((batch.edge_label == 0).sum()) == num_pos
            assert all(k in keys for k in (src[pos] * data.num_nodes + dst[pos]).tolist())   # positives are edges
            assert torch.equal(data.edge_index[:, oe[batch.input_id]], torch.stack([src[pos], dst[pos]]))
            if temporal:   # no sampled edge is newer than the seed edge of its example
                example = batch.batch[batch.edge_index[1]]
                assert bool((data.edge_time[e] <= batch.edge_label_time[example]).all())
            seen += oe[batch.input_id].tolist()
    return seen, count, len(loader)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("temporal", [False, True])
def test_link_batches_match_originals_and_cover_every_edge(tmp_path, temporal):
    data = _graph()
    root = tmp_path / "l2"
    Partitioner(data, 2, method="metis").save(root, progress=False)
    res = spawn_world(2, _link_rank, str(root), temporal, timeout=150)
    assert len({c for _, c, _ in res} | {n for _, _, n in res}) == 1          # equal batch counts
    seen = [s for r, _, _ in res for s in r]
    assert len(seen) == len(set(seen)) and data.num_edges - len(seen) < 2    # every edge once


def _hetero_rank(rank, world_size, root):
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import TrainConfig, dist_session

    data = pyg_dist.synthetic_graph(600, 6, num_features=8, hetero=True, seed=9)
    orig = load_original_ids(root)
    seeds = []
    with dist_session(TrainConfig(root, timeout=60)) as env:
        loader = DistNeighborLoader(env, [3, 2], input_nodes=("paper", "train_mask"), batch_size=16)
        for batch in loader:
            for t in batch.node_types:
                assert torch.equal(batch[t].x, data[t].x[orig[t][batch[t].n_id]])
            for et in batch.edge_types:
                src, dst = orig[et[0]][batch[et[0]].n_id], orig[et[-1]][batch[et[-1]].n_id]
                e = orig[et][batch[et].e_id]
                assert torch.equal(data[et].edge_index[0, e], src[batch[et].edge_index[0]])
                assert torch.equal(data[et].edge_index[1, e], dst[batch[et].edge_index[1]])
            bs = batch["paper"].batch_size
            assert torch.equal(batch["paper"].y[:bs], data["paper"].y[orig["paper"][batch["paper"].input_id]])
            seeds += orig["paper"][batch["paper"].input_id].tolist()
    return seeds, len(loader)


@pytest.mark.timeout(200)
def test_hetero_node_batches_match_originals(tmp_path):
    data = pyg_dist.synthetic_graph(600, 6, num_features=8, hetero=True, seed=9)
    root = tmp_path / "h2"
    Partitioner(data, 2, method="metis").save(root, progress=False)
    res = spawn_world(2, _hetero_rank, str(root), timeout=150)
    assert res[0][1] == res[1][1]
    seeds = [s for r, _ in res for s in r]
    expected = set(data["paper"].train_mask.nonzero().view(-1).tolist())
    assert len(seeds) == len(set(seeds)) and set(seeds) <= expected and len(expected) - len(seeds) < 2
