"""The migration stores return what PyG's ``from_partition`` stores return (issue 45): ``get_edge_index`` a
``[2, E]`` LongTensor of global ids sorted by destination with ``get_edge_id`` aligned, PyG's ``_edge_index`` /
``_edge_attr`` / ``_edge_id`` dicts, ``get_all_tensor_attrs`` in PyG's put order, node time of EVERY node in
each partition, and ``pid`` on the native stores. Oracles: the input graph (input ids are kept) and PyG's
documented put order (node ``x`` then ``time``, edge ``edge_attr`` then ``edge_time``)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data.graph_store import EdgeLayout

import pyg_dist
from pyg_dist.errors import InvalidArgumentError


def _partitioned(tmp_path, parts=2, **kw):
    from pyg_dist.distributed import Partitioner
    data = pyg_dist.synthetic_graph(300, 5, num_features=6, seed=3, **kw)
    Partitioner(data, parts, str(tmp_path / "p")).generate_partition(progress=False)
    return data, str(tmp_path / "p")


def _edge_groups(data):
    from torch_geometric.data import HeteroData
    if isinstance(data, HeteroData):
        return [(et, data[et]) for et in data.edge_types]
    return [(None, data)]


@pytest.mark.parametrize("hetero", [False, True])
def test_graph_store_coo_is_a_stacked_tensor_sorted_by_destination(tmp_path, hetero):
    from pyg_dist.distributed import LocalGraphStore
    data, root = _partitioned(tmp_path, hetero=hetero, edge_dim=2)
    for et, s in _edge_groups(data):
        seen = torch.zeros(s.num_edges, dtype=torch.long)
        for p in range(2):
            gs = LocalGraphStore.from_partition(root, pid=p)
            assert "_coo_cache" not in gs.__dict__  # nothing [2, E] until asked
            ei, eid = gs.get_edge_index(edge_type=et, layout="coo"), gs.get_edge_id(edge_type=et, layout="coo")
            assert isinstance(ei, torch.Tensor) and ei.dtype == torch.long and ei.dim() == 2 and ei.size(0) == 2
            assert eid.shape == (ei.size(1),)
            assert torch.equal(s.edge_index[:, eid], ei)  # global ids, aligned with the edge ids
            assert bool((ei[1, 1:] >= ei[1, :-1]).all())  # by destination
            seen[eid] += 1
            key = (et, "coo")
            assert list(gs._edge_index) == list(gs._edge_attr) == list(gs._edge_id)
            assert key in gs._edge_index and torch.equal(gs._edge_index[key], ei)
            assert torch.equal(gs._edge_id[key], eid)
            attr = gs._edge_attr[key]
            assert attr.layout == EdgeLayout.COO and attr.is_sorted and attr.edge_type == et
            src, dst = (None, None) if et is None else (et[0], et[2])
            n_src = data.num_nodes if et is None else data[src].num_nodes
            n_dst = data.num_nodes if et is None else data[dst].num_nodes
            assert attr.size == (n_src, n_dst)
            assert attr in gs.get_all_edge_attrs() and len(gs.get_all_edge_attrs()) == len(_edge_groups(data))
            row, colptr = gs.get_edge_index(edge_type=et, layout="csc")  # CSC stays pyg_dist's (row, colptr)
            assert torch.equal(row, ei[0]) and int(colptr[-1]) == ei.size(1)
        assert bool((seen == 1).all())  # every edge in exactly one partition


def test_in_memory_dicts_hold_what_was_put():
    from pyg_dist.distributed import LocalGraphStore
    ei, eid = torch.tensor([[0, 2, 1], [1, 1, 2]]), torch.tensor([7, 5, 9])
    gs = LocalGraphStore.from_data(eid, ei, num_nodes=3, is_sorted=True)
    assert torch.equal(gs._edge_index[(None, "coo")], ei) and torch.equal(gs._edge_id[(None, "coo")], eid)
    assert gs._edge_attr[(None, "coo")].size == (3, 3) and gs._edge_attr[(None, "coo")].is_sorted
    gs.remove_edge_index(edge_type=None, layout="coo")
    assert (None, "coo") not in gs._edge_index and (None, "coo") not in gs._edge_attr


@pytest.mark.parametrize("kind", ["node_time", "edge_time"])
def test_tensor_attrs_in_pyg_put_order(tmp_path, kind):
    from pyg_dist.distributed import LocalFeatureStore
    data, root = _partitioned(tmp_path, edge_dim=2, **{kind: True})
    for p in range(2):
        attrs = [(a.group_name, a.attr_name) for a in LocalFeatureStore.from_partition(root, pid=p)
                 .get_all_tensor_attrs()]
        pyg = ([(None, "x"), (None, "time")] if kind == "node_time" else
               [(None, "x"), ((None, None), "edge_attr"), ((None, None), "edge_time")])
        if kind == "node_time":
            pyg.append(((None, None), "edge_attr"))
        assert attrs[:len(pyg)] == pyg  # PyG's order first (test_partition.py reads attrs[1] / attrs[2])
        node_rest = {k for k in data.keys() if data.is_node_attr(k)} - {"x", "time"}
        edge_rest = {k for k in data.keys() if data.is_edge_attr(k)} - {"edge_index", "edge_attr", "edge_time"}
        assert sorted(attrs[len(pyg):], key=str) == sorted([(None, k) for k in node_rest]
                                                           + [((None, None), k) for k in edge_rest], key=str)


@pytest.mark.parametrize("hetero", [False, True])
def test_node_time_of_every_node_in_every_partition(tmp_path, hetero):
    from pyg_dist.distributed import LocalFeatureStore
    data, root = _partitioned(tmp_path, hetero=hetero, node_time=True)
    types = data.node_types if hetero else [None]
    for p in range(2):
        fs = LocalFeatureStore.from_partition(root, pid=p)
        times = {a.group_name: fs.get_tensor(a) for a in fs.get_all_tensor_attrs() if a.attr_name == "time"}
        assert set(times) == set(types)
        for t in types:
            want = data.time if t is None else data[t].time
            assert torch.equal(times[t], want)
            ids = torch.tensor([want.numel() - 1, 0, 3])
            assert torch.equal(fs.get_tensor(group_name=t, attr_name="time", index=ids), want[ids])
            assert fs.get_tensor_size(group_name=t, attr_name="time")[0] == want.numel()
        with pytest.raises(InvalidArgumentError):
            fs.get_tensor(group_name=types[0], attr_name="time", index=torch.tensor([10 ** 6]))


def test_native_stores_take_pyg_pid(tmp_path):
    from pyg_dist.store import LocalFeatureStore, LocalGraphStore
    data, root = _partitioned(tmp_path)
    for cls in (LocalFeatureStore, LocalGraphStore):
        a, b = cls.from_partition(root, pid=1), cls.from_partition(root, part=1)
        assert a.partition == b.partition == 1 and cls.from_partition(root, 0).partition == 0
        with pytest.raises(InvalidArgumentError, match="'part'"):
            cls.from_partition(root, part=1, pid=1)
        with pytest.raises(InvalidArgumentError, match="pid="):
            cls.from_partition(root)
    fs = LocalFeatureStore.from_partition(root, pid=1)
    ids = fs.get_global_id(None)
    assert torch.equal(fs.get_tensor(None, "x"), data.x[ids])


def test_homogeneous_seed_edges_in_pyg_pair_form(tmp_path):
    from pyg_dist._types import HOMO_EDGE
    from pyg_dist.loader.dist_link_loader import _edge_type
    from pyg_dist.store import load_stores
    _, root = _partitioned(tmp_path)
    meta = load_stores(root, 0)[0].partition_meta
    ei = torch.tensor([[0, 1], [2, 3]])
    for given in ((None, ei), ei):  # PyG's DistLinkNeighborLoader tests pass (None, edge_index)
        et, index = _edge_type(meta, given)
        assert et == HOMO_EDGE and index is ei
