"""``pyg_dist.distributed`` in one process: PyG's submodule paths, and stores built empty and filled in memory
(``put_*``, ``from_data``, ``from_hetero_data``) with PyG's reads, checks and partition attributes."""
from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest
import torch

import pyg_dist
from pyg_dist.errors import InvalidArgumentError

#: Every public name a user imports from a submodule of ``torch_geometric.distributed``.
PYG_PATHS = {
    "dist_context": ["DistContext", "DistRole"],
    "local_feature_store": ["LocalFeatureStore"],
    "local_graph_store": ["LocalGraphStore"],
    "partition": ["Partitioner"],
    "dist_neighbor_sampler": ["DistNeighborSampler"],
    "dist_loader": ["DistLoader"],
    "dist_neighbor_loader": ["DistNeighborLoader"],
    "dist_link_neighbor_loader": ["DistLinkNeighborLoader"],
    "rpc": ["init_rpc", "shutdown_rpc", "rpc_is_initialized", "global_barrier"],
}


def test_every_pyg_submodule_path_exists_and_the_package_stays_cheap():
    import pyg_dist.distributed as top
    for path, names in PYG_PATHS.items():
        module = importlib.import_module(f"pyg_dist.distributed.{path}")
        for name in names:
            assert callable(getattr(module, name)), (path, name)
            if hasattr(top, name) and name in top.__all__:
                assert getattr(top, name) is getattr(module, name), name
    code = ("import sys, pyg_dist.distributed; "
            "print(any(m.split('.')[0] in ('torch', 'torch_geometric') for m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


# ----------------------------------------------------------------------------------- PyG's own store tests
def test_feature_store_put_and_get_by_global_id():
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    store = LocalFeatureStore()
    feat = torch.arange(27.0).view(9, 3)
    paper = torch.tensor([1, 2, 3, 5, 8, 4])
    store.put_global_id(paper, group_name="paper")
    store.put_tensor(feat[paper], group_name="paper", attr_name="feat")
    for read in (store.get_tensor_from_global_id, store.get_tensor):
        assert torch.equal(read(group_name="paper", attr_name="feat", index=torch.tensor([3, 8, 4])), feat[[3, 8, 4]])
    attr = store.get_all_tensor_attrs()[0]
    assert (attr.group_name, attr.attr_name, attr.index) == ("paper", "feat", None)
    assert store.get_tensor_size(attr) == (6, 3)                          # PyG: the size of what was put
    assert torch.equal(store.get_tensor("paper", "feat"), feat[paper])   # no index: the tensor as put
    assert torch.equal(store.get_global_id("paper"), paper) and store.get_global_id("author") is None
    assert store.remove_tensor(group_name="paper", attr_name="feat") and not store.get_all_tensor_attrs()


@pytest.mark.parametrize("hetero", [False, True])
def test_feature_store_from_data_round_trips(hetero):
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    node_id, x, y = torch.randperm(6), torch.randn(6, 5), torch.randint(0, 2, (6,))
    edge_id, edge_attr = torch.randperm(12), torch.randn(12, 4)
    if hetero:
        nt, et = "paper", ("paper", "to", "paper")
        store = LocalFeatureStore.from_hetero_data({nt: node_id}, {nt: x}, {nt: y}, {et: edge_id}, {et: edge_attr})
    else:
        nt, et = None, (None, None)
        store = LocalFeatureStore.from_data(node_id, x, y, edge_id, edge_attr)
    attrs = [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()]
    assert attrs == [(nt, "x"), (nt, "y"), (et, "edge_attr")] and store.has_edge_attr()
    assert store.meta == ({"is_hetero": True} if hetero else None)
    assert torch.equal(store.get_global_id(group_name=nt), node_id)
    assert torch.equal(store.get_tensor(group_name=nt, attr_name="x"), x)
    assert torch.equal(store.get_global_id(group_name=et), edge_id)
    assert torch.equal(store.get_tensor(group_name=et, attr_name="edge_attr"), edge_attr)
    wanted = node_id[[4, 0]]  # global ids: the rows put for them
    assert torch.equal(store.get_tensor(group_name=nt, attr_name="y", index=wanted), y[[4, 0]])


@pytest.mark.parametrize("hetero", [False, True])
def test_graph_store_puts_and_from_data(hetero):
    from torch_geometric.testing import get_random_edge_index

    from pyg_dist.distributed.local_graph_store import LocalGraphStore
    et = ("paper", "to", "paper") if hetero else None
    store = LocalGraphStore()
    edge_index = get_random_edge_index(100, 100, 300)
    store.put_edge_index(edge_index, edge_type=et, layout="coo", size=(100, 100))
    store.put_edge_id(torch.arange(300), edge_type=et, layout="coo", size=(100, 100))
    attr = store.get_all_edge_attrs()[0]
    assert torch.equal(store.get_edge_index(attr), edge_index) and torch.equal(store.get_edge_id(attr),
                                                                               torch.arange(300))
    store.remove_edge_index(attr)
    store.remove_edge_id(attr)
    assert not store.get_all_edge_attrs()
    edge_id = torch.randperm(300)
    if hetero:
        store = LocalGraphStore.from_hetero_data({et: edge_id}, {et: edge_index}, {"paper": 100})
    else:
        store = LocalGraphStore.from_data(edge_id, edge_index, num_nodes=100)
    attr = store.get_all_edge_attrs()[0]
    assert (attr.edge_type, attr.layout.value, attr.size) == (et, "coo", (100, 100))
    got, ids = store.get_edge_index(et, "coo"), store.get_edge_id(et, "coo")
    key = edge_index[1] * 100 + edge_index[0]                 # PyG sorts by destination, then source
    assert torch.equal(got, edge_index[:, torch.sort(key, stable=True).indices])
    assert sorted(zip(got[0].tolist(), got[1].tolist(), ids.tolist())) == \
        sorted(zip(edge_index[0].tolist(), edge_index[1].tolist(), edge_id.tolist()))
    assert store.meta == {"is_hetero": hetero}


def test_csc_and_csr_puts_become_the_same_graph():
    from pyg_dist.distributed.local_graph_store import LocalGraphStore
    row, col = torch.tensor([2, 0, 1, 2]), torch.tensor([0, 1, 1, 2])
    stores = []
    for layout, value in (("coo", (row, col)), ("csc", (row, torch.tensor([0, 1, 3, 4])))):
        gs = LocalGraphStore()
        gs.put_edge_index(value, edge_type=None, layout=layout, size=(3, 3))
        gs.put_edge_id(torch.tensor([7, 8, 9, 6]), edge_type=None, layout=layout)
        stores.append(gs.local_csc())
    assert all(torch.equal(getattr(stores[0], f), getattr(stores[1], f)) for f in ("colptr", "row", "edge_id"))


# ----------------------------------------------------------------------------------- partitions in memory
def _memory_pair(data, owner, part, parts):
    from pyg_dist.distributed import LocalFeatureStore, LocalGraphStore
    edge_owner = owner[data.edge_index[1]]
    mine = (edge_owner == part).nonzero().view(-1)
    nodes = (owner == part).nonzero().view(-1)
    gs = LocalGraphStore.from_data(mine, data.edge_index[:, mine], data.num_nodes)
    gs.node_pb, gs.edge_pb, gs.partition_idx, gs.num_partitions = owner, edge_owner, part, parts
    fs = LocalFeatureStore.from_data(nodes.flip(0), data.x[nodes.flip(0)], data.y[nodes.flip(0)], mine,
                                     data.edge_attr[mine])
    fs.partition_idx, fs.num_partitions = part, parts
    return fs, gs


def test_memory_partition_views_agree_with_the_graph():
    from pyg_dist.distributed.stores import check_stores
    data = pyg_dist.synthetic_graph(80, 4, num_features=3, edge_dim=2, node_time=True, seed=2)
    owner = torch.randint(0, 3, (80,), generator=torch.Generator().manual_seed(0))
    fs, gs = _memory_pair(data, owner, 1, 3)
    fs.put_tensor(data.time, group_name=None, attr_name="time")
    check_stores("test", (fs, gs))
    assert gs.partition_meta is fs.partition_meta and gs.partition == 1 and gs.num_partitions == 3
    assert torch.equal(gs.node_time(None), data.time)
    owned = (owner == 1).nonzero().view(-1)
    assert torch.equal(fs.book.owned_ids("_N", 1), owned)
    assert torch.equal(fs.lookup_features(owned[[3, 0]]).wait(), data.x[owned[[3, 0]]])
    assert torch.equal(fs.lookup_features(owned[:2], attr_names=["time"]).wait()["time"], data.time[owned[:2]])
    csc = gs.local_csc()
    dst = torch.repeat_interleave(torch.arange(80), torch.diff(csc.colptr))
    assert set(zip(csc.row.tolist(), dst.tolist(), csc.edge_id.tolist())) == {
        (s, d, e) for e, (s, d) in enumerate(data.edge_index.t().tolist()) if owner[d] == 1}
    assert torch.equal(gs.get_partition_ids_from_nids(torch.arange(5)), owner[:5])
    fs2, gs2 = pickle.loads(pickle.dumps((fs, gs)))                    # workers get the stores pickled
    assert fs2.partition_meta is gs2.partition_meta and torch.equal(gs2.local_csc().row, csc.row)
    gs.meta = {"num_parts": 3}
    check_stores("test", (fs, gs))
    gs.meta.update({"num_parts": 5})                  # changed in place, as PyG's scripts do: seen at the next pair
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        check_stores("test", (fs, gs))
    gs.meta = None
    gs.partition_idx = 2                              # a change drops the built partition: the stores disagree
    with pytest.raises(InvalidArgumentError, match="partition_idx"):
        check_stores("test", (fs, gs))


def test_one_partition_sampler_over_memory_stores_equals_one_machine():
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist.distributed import DistContext, DistNeighborSampler
    from pyg_dist.sampler.neighbor import NeighborSampler
    data = pyg_dist.synthetic_graph(90, 4, num_features=3, edge_dim=2, seed=5)
    fs, gs = _memory_pair(data, torch.zeros(90, dtype=torch.long), 0, 1)
    ctx = DistContext(rank=0, global_rank=0, world_size=1, global_world_size=1, group_name="one")
    sampler = DistNeighborSampler(ctx, (fs, gs), [-1, -1])
    inputs = NodeSamplerInput(None, torch.tensor([3, 40, 7]))
    got, want = sampler.sample_from_nodes(inputs), NeighborSampler(data, [-1, -1]).sample_from_nodes(inputs)
    assert all(torch.equal(getattr(got, f), getattr(want, f)) for f in ("node", "row", "col", "edge"))
    assert torch.equal(got.metadata.features.node["_N"]["x"], data.x[got.node])
    sampler = pickle.loads(pickle.dumps(sampler))                       # a worker's copy samples the same
    assert torch.equal(sampler.sample_from_nodes(inputs).node, want.node)


def test_node_time_aligned_with_the_ids_put():
    from pyg_dist.distributed import LocalFeatureStore
    fs = LocalFeatureStore.from_data(torch.tensor([2, 0, 1]))
    fs.put_tensor(torch.tensor([20, 0, 10]), group_name=None, attr_name="time")   # one per id put: aligned
    fs.node_feat_pb = torch.tensor([0, 0, 0])
    assert fs.partition_meta.node_time_types == ["_N"]
    assert torch.equal(fs.lookup_features(torch.tensor([0, 1, 2]), attr_names="time").wait(),
                       torch.tensor([0, 10, 20]))


# ----------------------------------------------------------------------------------- typed errors
def test_bad_inputs_fail_naming_the_argument():
    from pyg_dist.distributed import LocalFeatureStore, LocalGraphStore
    from pyg_dist.distributed.stores import check_stores
    fs = LocalFeatureStore()
    cases = [
        (lambda: fs.put_global_id(torch.tensor([1.0]), group_name=None), "global_id"),
        (lambda: fs.put_global_id(torch.tensor([1, 1]), group_name=None), "global_id"),
        (lambda: fs.put_global_id(torch.tensor([1]), group_name=3), "group_name"),
        (lambda: fs.put_tensor(torch.ones(2), group_name=None, attr_name="x", index=torch.tensor([0])), "index"),
        (lambda: setattr(fs, "node_feat_pb", torch.tensor([0.5])), "node_feat_pb"),
        (lambda: setattr(fs, "partition_idx", -1), "partition_idx"),
        (lambda: setattr(fs, "meta", "x"), "meta"),
        (lambda: LocalFeatureStore.from_data(torch.tensor([0, 1]), x=torch.ones(3, 2)), "'x'"),
        (lambda: LocalFeatureStore.from_data(torch.tensor([0]), edge_attr=torch.ones(1, 2)), "edge_id"),
        (lambda: LocalFeatureStore.from_hetero_data({"a": torch.tensor([0])}, x_dict={"b": torch.ones(1, 1)}),
         "node_id_dict"),
        (lambda: LocalGraphStore.from_data(None, torch.tensor([0, 1]), 2), "edge_index"),
        (lambda: LocalGraphStore.from_data(torch.tensor([0]), torch.tensor([[0], [1]]), -1), "num_nodes"),
        (lambda: LocalGraphStore.from_hetero_data({}, {("a", "r", "b"): torch.tensor([[0], [0]])}, {"a": 1}),
         "num_nodes_dict"),
        (lambda: LocalGraphStore().put_edge_index((torch.tensor([0]), torch.tensor([1, 2])), edge_type=None,
                                                  layout="coo"), "edge_index"),
        (lambda: LocalGraphStore.from_data(torch.tensor([0, 1]), torch.tensor([[0], [1]]), 2), "edge_id"),
    ]
    for fn, arg in cases:
        with pytest.raises(InvalidArgumentError, match=arg):
            fn()
    gs = LocalGraphStore.from_data(torch.tensor([0]), torch.tensor([[0], [1]]), 2)
    gs.num_partitions = 2
    with pytest.raises(InvalidArgumentError, match="node_pb"):                  # two partitions, no owners
        gs.local_csc()
    gs.node_pb = torch.tensor([0, 3])
    with pytest.raises(InvalidArgumentError, match="node_pb"):                  # an owner outside [0, 2)
        gs.local_csc()
    gs.node_pb = torch.tensor([0, 1])
    fs = LocalFeatureStore.from_data(torch.tensor([0]), x=torch.ones(1, 2), edge_id=torch.tensor([0]),
                                     edge_attr=torch.ones(1, 3))
    fs.node_feat_pb, fs.num_partitions = torch.tensor([1, 1]), 2
    with pytest.raises(InvalidArgumentError, match="node_pb"):                  # the two stores disagree
        check_stores("pair", (fs, gs))
    fs.node_feat_pb = None
    with pytest.raises(InvalidArgumentError, match="edge_pb"):                  # edge rows need their owners
        check_stores("pair", (fs, gs))
    gs.edge_pb = torch.tensor([0])
    check_stores("pair", (fs, gs))
    gs.node_pb = torch.tensor([0, 0])                           # partition 0 owns node 1 too: no row for it
    with pytest.raises(InvalidArgumentError, match="global_id"):
        check_stores("pair", (fs, gs))


def test_from_partition_takes_pid_or_part_and_folder_stores_stay_read_only(tmp_path):
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    from pyg_dist.distributed.local_graph_store import LocalGraphStore
    from pyg_dist.distributed.partition import Partitioner
    data = pyg_dist.synthetic_graph(60, 4, num_features=3, seed=1)
    root = str(tmp_path / "parts")
    Partitioner(data, 2, root).generate_partition(progress=False)
    for cls in (LocalGraphStore, LocalFeatureStore):
        stores = [cls.from_partition(root, 1), cls.from_partition(root, pid=1), cls.from_partition(root, part=1)]
        assert {s.partition_idx for s in stores} == {1} and stores[0].meta["num_parts"] == 2
        with pytest.raises(InvalidArgumentError, match="part"):
            cls.from_partition(root, pid=1, part=1)
    gs, fs = LocalGraphStore.from_partition(root, pid=0), LocalFeatureStore.from_partition(root, pid=0)
    assert gs.node_pb.numel() == 60 and gs.is_sorted is True and fs.node_feat_pb.numel() == 60
    for store, arg in ((gs, "node_pb"), (gs, "partition_idx"), (fs, "edge_feat_pb"), (fs, "meta")):
        with pytest.raises(InvalidArgumentError, match="read-only"):
            setattr(store, arg, None)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        fs.put_global_id(torch.tensor([0]), group_name=None)
    with pytest.raises(InvalidArgumentError, match="data"):                     # a folder store with a memory one
        from pyg_dist.distributed.stores import check_stores
        check_stores("pair", (fs, LocalGraphStore.from_data(torch.tensor([0]), torch.tensor([[0], [1]]), 2)))
    ids = fs.get_global_id()                                                    # folder: the owned ids
    assert torch.equal(fs.get_tensor(None, "x", index=ids[:3]), data.x[ids[:3]])
