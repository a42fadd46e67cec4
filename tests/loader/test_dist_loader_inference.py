"""Layer-wise full-neighbour inference equals the full-graph forward pass on the original graph."""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world


def _graph():
    return pyg_dist.synthetic_graph(700, 6, num_features=8, seed=7)


def _model():
    from torch_geometric.nn import SAGEConv
    torch.manual_seed(0)
    return torch.nn.ModuleList([SAGEConv(8, 16), SAGEConv(16, 5)])


def _layers(convs):
    return [lambda xs, xd, ei: convs[0]((xs, xd), ei).relu(), lambda xs, xd, ei: convs[1]((xs, xd), ei)]


def _infer_rank(rank, world_size, root):
    from pyg_dist.train.inference import layerwise_inference
    from pyg_dist.train.session import TrainConfig, dist_session

    with dist_session(TrainConfig(root, timeout=60)) as env:
        ids, out = layerwise_inference(_layers(_model()), env, batch_size=100)
        return ids, out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("world,method", [(2, "metis"), (4, "random")])
def test_layerwise_equals_full_graph_forward(tmp_path, world, method):
    data = _graph()
    root = tmp_path / f"i{world}"
    Partitioner(data, world // 2 if world == 4 else world, method=method).save(root, progress=False)
    results = spawn_world(world, _infer_rank, str(root), timeout=120)
    convs = _model()
    with torch.no_grad():
        h = convs[0](data.x, data.edge_index).relu()
        expected = convs[1](h, data.edge_index)
    orig = load_original_ids(root)["_N"]
    seen = torch.zeros(data.num_nodes, dtype=torch.bool)
    for ids, out in results:
        assert torch.allclose(out, expected[orig[ids]], atol=1e-5)
        seen[orig[ids]] = True
    assert bool(seen.all())
