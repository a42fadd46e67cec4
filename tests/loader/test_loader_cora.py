"""Accuracy parity on real data: GraphSAGE trained with pyg_dist.NeighborLoader on Cora beats 70 %."""
import pytest
import torch
import torch.nn.functional as F

import pyg_dist
from pyg_dist.datasets import shared_data_root


def _cora():
    try:
        return pyg_dist.load_planetoid("cora")
    except pyg_dist.InvalidArgumentError as exc:
        pytest.skip(f"Cora raw files not found under {shared_data_root()} (set PYG_DIST_DATA): {exc}")


def test_graphsage_on_cora_beats_70_percent():
    from torch_geometric.nn import SAGEConv

    data = _cora()
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([SAGEConv(data.num_features, 64), SAGEConv(64, 7)])
    opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)

    def forward(batch, train):
        x = F.dropout(batch.x, 0.5, train)
        x = F.dropout(F.relu(convs[0](x, batch.edge_index)), 0.5, train)
        return convs[1](x, batch.edge_index)[:batch.batch_size]

    train = pyg_dist.NeighborLoader(data, [10, 10], input_nodes=data.train_mask, batch_size=35, shuffle=True)
    for _ in range(8):
        for batch in train:
            opt.zero_grad()
            F.cross_entropy(forward(batch, True), batch.y[:batch.batch_size]).backward()
            opt.step()
    test = pyg_dist.NeighborLoader(data, [-1, -1], input_nodes=data.test_mask, batch_size=500)
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            correct += int((forward(batch, False).argmax(-1) == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    assert total == int(data.test_mask.sum()) == 1000
    assert correct / total > 0.70, correct / total
