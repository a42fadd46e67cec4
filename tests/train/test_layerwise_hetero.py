"""Heterogeneous layer-wise inference equals the one-process full-graph forward pass of the same model
(a to_hetero GraphSAGE and a HeteroConv model), and what it refuses."""
from __future__ import annotations

import types

import pytest
import torch

import pyg_dist
from pyg_dist.errors import InvalidArgumentError, PyGDistError
from pyg_dist.format import load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.testing import spawn_world


def _graph():
    return pyg_dist.synthetic_graph(900, 6, num_features=8, hetero=True, seed=3)


class _Sage(torch.nn.Module):
    def __init__(self, dim_in, dim_out, act):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.conv, self.act = SAGEConv((dim_in, dim_in), dim_out), act

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index)
        return h.relu() if self.act else h


def _model(kind, metadata):
    from torch_geometric.nn import GraphConv, HeteroConv, SAGEConv, to_hetero
    torch.manual_seed(0)
    if kind == "to_hetero":
        return torch.nn.ModuleList([to_hetero(_Sage(8, 16, True), metadata, aggr="sum"),
                                    to_hetero(_Sage(16, 5, False), metadata, aggr="mean")])
    first = HeteroConv({et: SAGEConv((8, 8), 16) for et in metadata[1]}, aggr="sum")
    second = HeteroConv({et: GraphConv((16, 16), 5) for et in metadata[1]}, aggr="max")

    class _Relu(torch.nn.Module):
        def forward(self, x_dict, edge_index_dict):
            return {t: v.relu() for t, v in first(x_dict, edge_index_dict).items()}

    return torch.nn.ModuleList([_Relu(), second])


def _full(model, data):
    x, ei = data.x_dict, data.edge_index_dict
    with torch.no_grad():
        for layer in model:
            x = layer(x, ei)
    return x


def _rank(rank, world_size, root, kind, metadata):
    from pyg_dist.train.inference import layerwise_inference
    from pyg_dist.train.session import TrainConfig, dist_session

    with dist_session(TrainConfig(root, timeout=60)) as env:
        return layerwise_inference(_model(kind, metadata), env, batch_size=64)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kind", ["to_hetero", "heteroconv"])
def test_hetero_layerwise_equals_the_full_graph_forward(tmp_path, kind):
    data = _graph()
    root = tmp_path / kind
    Partitioner(data, 2, method="metis").save(root, progress=False)
    results = spawn_world(2, _rank, str(root), kind, data.metadata(), timeout=150)
    expected = _full(_model(kind, data.metadata()), data)
    orig = load_original_ids(root)
    for t in data.node_types:
        seen = torch.zeros(data[t].num_nodes, dtype=torch.long)
        for ids, out in results:
            assert out[t].shape == (ids[t].numel(), 5)
            assert torch.allclose(out[t], expected[t][orig[t][ids[t]]], atol=1e-5), t
            seen[orig[t][ids[t]]] += 1
        assert bool((seen == 1).all()), t                     # every node computed by exactly one rank


def test_sampler_workers_are_refused_typed():
    from pyg_dist.train.inference import layerwise_inference
    env = types.SimpleNamespace(config=types.SimpleNamespace(num_workers=2))
    with pytest.raises(InvalidArgumentError, match="num_workers=2"):
        layerwise_inference([lambda *a: a[0]], env)
    with pytest.raises(InvalidArgumentError, match="layers"):
        layerwise_inference([], env)


def test_a_layer_without_rows_for_a_type_is_a_typed_error():
    from pyg_dist.train.inference import _Batch, _run_hetero
    from pyg_dist.train.layer_table import LayerTable
    table = LayerTable(None, 0)
    table.publish(0, {"a": torch.zeros(3, 4), "b": torch.zeros(2, 4)})
    batch = _Batch("b", torch.tensor([0, 1]), {}, {})
    with pytest.raises(InvalidArgumentError, match="node type 'b'"):
        _run_hetero(lambda x, ei: {"a": x["a"]}, batch, {}, torch.zeros(2, 4), table, [("a", "to", "a")], "cpu")


def test_a_request_for_rows_this_partition_does_not_own_is_refused(tmp_path):
    from pyg_dist.store import LocalGraphStore
    from pyg_dist.train.layer_table import LayerTable, RowsRequest
    data = _graph()
    Partitioner(data, 2, method="metis").save(tmp_path, progress=False)
    gs = LocalGraphStore.from_partition(tmp_path, 0)
    table = LayerTable(gs.book, 0)
    mine = gs.book.owned_ids("paper", 0)
    table.publish(0, {t: torch.arange(float(gs.book.owned_ids(t, 0).numel())).view(-1, 1) for t in data.node_types})
    reply = table.serve(RowsRequest(0, {"paper": mine[:3]}))
    assert reply.rows["paper"].view(-1).tolist() == [0.0, 1.0, 2.0]
    theirs = gs.book.owned_ids("paper", 1)[:2]
    for bad in ({"paper": theirs}, {"venue": mine[:1]}, {"paper": mine[:2].int()}):
        with pytest.raises(PyGDistError):
            table.serve(RowsRequest(0, bad))
