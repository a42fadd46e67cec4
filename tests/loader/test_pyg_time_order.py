"""PyG's temporal details in the one-machine loaders (issue 45): each destination's in-neighbours ordered by
(destination, source node time) or (destination, edge time) with a stable sort when ``time_attr`` is set
(PyG's ``sort_csc``), edge ids staying the true ones; and PyG's phrases when seed times and ``time_attr``
conflict. Oracles: hand-computed orders on a three-edge graph."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from pyg_dist import LinkNeighborLoader, NeighborLoader
from pyg_dist.errors import InvalidArgumentError

# edges 0: 3->0, 1: 1->0, 2: 2->0 (in-neighbours of 0 given in the order 3, 1, 2)
EDGE_INDEX = torch.tensor([[3, 1, 2], [0, 0, 0]])


def _batch(data, **kw):
    loader = NeighborLoader(data, num_neighbors=[-1], input_nodes=torch.tensor([0]), batch_size=1, **kw)
    return next(iter(loader))


def test_no_time_keeps_the_input_order():
    b = _batch(Data(edge_index=EDGE_INDEX, num_nodes=4))
    assert b.n_id.tolist() == [0, 3, 1, 2] and b.e_id.tolist() == [0, 1, 2]


def test_node_time_orders_in_neighbours_by_source_time():
    data = Data(edge_index=EDGE_INDEX, num_nodes=4, time=torch.tensor([10, 5, 3, 9]))
    b = _batch(data, time_attr="time")
    # sources by time: 2 (3), 1 (5), 3 (9); their TRUE edge ids 2, 1, 0
    assert b.n_id.tolist() == [0, 2, 1, 3] and b.e_id.tolist() == [2, 1, 0]
    assert torch.equal(data.edge_index[:, b.e_id], torch.stack([b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]]))


def test_equal_source_times_keep_the_input_order():
    data = Data(edge_index=EDGE_INDEX, num_nodes=4, time=torch.tensor([10, 4, 4, 4]))
    assert _batch(data, time_attr="time").n_id.tolist() == [0, 3, 1, 2]  # stable


def test_edge_time_orders_in_edges_by_edge_time():
    data = Data(edge_index=EDGE_INDEX, num_nodes=4, edge_time=torch.tensor([4, 1, 7]))
    b = _batch(data, time_attr="edge_time", input_time=torch.tensor([100]))
    assert b.e_id.tolist() == [1, 0, 2] and b.n_id.tolist() == [0, 1, 3, 2]


def test_is_sorted_keeps_the_given_order():
    data = Data(edge_index=EDGE_INDEX, num_nodes=4, time=torch.tensor([10, 5, 3, 9]))
    assert _batch(data, time_attr="time", is_sorted=True).n_id.tolist() == [0, 3, 1, 2]


def test_pyg_phrases_for_conflicting_seed_times():
    data = Data(edge_index=EDGE_INDEX, num_nodes=4, time=torch.tensor([10, 5, 3, 9]))
    with pytest.raises(InvalidArgumentError, match="Received conflicting 'input_time' and 'time_attr' arguments: "
                       "'input_time' is set while 'time_attr' is not set.") as e:
        NeighborLoader(data, num_neighbors=[1], input_time=torch.tensor([1, 2, 3, 4]))
    assert e.value.name == "input_time" and isinstance(e.value, ValueError)
    with pytest.raises(InvalidArgumentError, match="Received conflicting 'edge_label_time' and 'time_attr' "
                       "arguments: 'edge_label_time' is not set while 'time_attr' is set.") as e:
        LinkNeighborLoader(data, num_neighbors=[1], time_attr="time")
    assert e.value.name == "edge_label_time" and e.value.value is None
    with pytest.raises(InvalidArgumentError, match="'edge_label_time' is set while 'time_attr' is not set."):
        LinkNeighborLoader(data, num_neighbors=[1], edge_label_time=torch.tensor([1, 2, 3]))


@pytest.mark.parametrize("given_sorted", [False, True])
def test_store_pair_orders_unsorted_edges_as_pyg_requires(given_sorted):
    from torch_geometric.testing.feature_store import MyFeatureStore
    from torch_geometric.testing.graph_store import MyGraphStore
    fs, gs = MyFeatureStore(), MyGraphStore()
    fs.put_tensor(torch.zeros(4, 1), group_name=None, attr_name="x", index=None)
    fs.put_tensor(torch.tensor([10, 5, 3, 9]), group_name=None, attr_name="time", index=None)
    gs.put_edge_index(EDGE_INDEX, edge_type=None, layout="coo", size=(4, 4), is_sorted=given_sorted)
    b = _batch((fs, gs), time_attr="time")
    # PyG trusts a store that says its edges are sorted; unsorted ones are put in PyG's temporal order
    assert b.n_id.tolist() == ([0, 3, 1, 2] if given_sorted else [0, 2, 1, 3])
