"""Stores filled in memory, in spawned 2-rank worlds, driven the way PyG's own scripts drive them.

Each rank builds its ``LocalFeatureStore`` / ``LocalGraphStore`` with ``from_data`` / ``from_hetero_data``
(the edges of the destinations it owns, the rows of the nodes and edges it owns; owners drawn at random,
not ranges), sets PyG's partition attributes by assignment, builds a ``DistNeighborSampler`` by hand, starts
RPC with PyG's arguments (``pyg_dist.distributed.rpc.init_rpc``), registers the sampler and samples. At full
fanout every batch has the node set and the edge set (global id pairs) that the one-machine sampler gives over
the whole graph, and the fetched rows equal the originals: homogeneous, heterogeneous, node-time temporal, and
links with binary negatives (same key: same negatives).
"""
from __future__ import annotations

import pytest
import torch

import pyg_dist
from pyg_dist.testing import free_port, spawn_world

WORLD = 2
KEY = 11


def _homo(time: bool = False):
    return pyg_dist.synthetic_graph(160, 5, num_features=4, edge_dim=2, node_time=time, seed=4)


def _hetero():
    return pyg_dist.synthetic_graph(150, 4, num_features=4, hetero=True, seed=4)


def _owner(num: int, salt: int) -> torch.Tensor:
    """An arbitrary owner per id (not ranges): what PyG's node_pb holds."""
    return torch.randint(0, WORLD, (num,), generator=torch.Generator().manual_seed(100 + salt))


def homo_stores(rank: int, data, time: bool = False, halo: bool = False):
    """Rank ``rank``'s stores, built PyG's way; ``halo``: also the rows of some nodes it does not own and some
    edges of destinations it does not own (PyG's own tests hold such rows; they are ignored)."""
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    from pyg_dist.distributed.local_graph_store import LocalGraphStore

    owner = _owner(data.num_nodes, 0)
    edge_owner = owner[data.edge_index[1]]
    mine = (edge_owner == rank).nonzero().view(-1)
    nodes = (owner == rank).nonzero().view(-1)
    if halo:
        mine = torch.cat([mine, (edge_owner != rank).nonzero().view(-1)[:5]])
        nodes = torch.cat([nodes, (owner != rank).nonzero().view(-1)[:7]])
    nodes = nodes[torch.randperm(nodes.numel(), generator=torch.Generator().manual_seed(rank))]  # any row order
    graph = LocalGraphStore.from_data(edge_id=mine, edge_index=data.edge_index[:, mine], num_nodes=data.num_nodes)
    graph.node_pb, graph.edge_pb = owner, edge_owner
    graph.meta.update({"num_parts": WORLD})
    graph.partition_idx, graph.num_partitions = rank, WORLD
    owned_edges = (edge_owner == rank).nonzero().view(-1)
    feature = LocalFeatureStore.from_data(nodes, x=data.x[nodes], y=data.y[nodes], edge_id=owned_edges,
                                          edge_attr=data.edge_attr[owned_edges])
    feature.node_feat_pb, feature.edge_feat_pb = owner, edge_owner
    feature.partition_idx, feature.num_partitions = rank, WORLD
    if time:  # PyG's convention: the time of EVERY node, indexed by global id
        feature.put_tensor(data.time, group_name=None, attr_name="time")
    return feature, graph


def hetero_stores(rank: int, data):
    from pyg_dist.distributed.local_feature_store import LocalFeatureStore
    from pyg_dist.distributed.local_graph_store import LocalGraphStore

    owners = {t: _owner(data[t].num_nodes, i) for i, t in enumerate(data.node_types)}
    edge_ids, edge_index, edge_pb = {}, {}, {}
    for et in data.edge_types:
        ei = data[et].edge_index
        edge_pb[et] = owners[et[2]][ei[1]]
        edge_ids[et] = (edge_pb[et] == rank).nonzero().view(-1)
        edge_index[et] = ei[:, edge_ids[et]]
    graph = LocalGraphStore.from_hetero_data(edge_ids, edge_index, {t: data[t].num_nodes for t in data.node_types})
    graph.node_pb, graph.edge_pb, graph.partition_idx, graph.num_partitions = owners, edge_pb, rank, WORLD
    node_ids = {t: (o == rank).nonzero().view(-1) for t, o in owners.items()}
    feature = LocalFeatureStore.from_hetero_data(node_ids, {t: data[t].x[i] for t, i in node_ids.items()},
                                                 {"paper": data["paper"].y[node_ids["paper"]]})
    feature.partition_idx, feature.num_partitions = rank, WORLD  # the books come from the graph store
    return feature, graph


def summary(out, hetero: bool):
    """Per type the node set ((subgraph, node) pairs when disjoint) and the edge set as global id pairs."""
    node = out.node if hetero else {"_N": out.node}
    row, col = (out.row, out.col) if hetero else ({"e": out.row}, {"e": out.col})
    batch = (out.batch if hetero else {"_N": out.batch}) if out.batch is not None else None
    nodes = {t: set(zip(batch[t].tolist(), v.tolist())) if batch is not None else set(v.tolist())
             for t, v in node.items()}
    edges = {}
    for key, r in row.items():
        src, dst = (key[0], key[-1]) if hetero else ("_N", "_N")
        edges[key] = set(zip(node[src][r].tolist(), node[dst][col[key]].tolist()))
    return nodes, edges


def _check_rows(out, data, hetero: bool) -> None:
    fb = out.metadata.features
    for t, ids in (out.node.items() if hetero else [("_N", out.node)]):
        store = data[t] if hetero else data
        assert torch.equal(fb.node[t]["x"], store.x[ids]), t
        if "y" in store:
            assert torch.equal(fb.node[t]["y"], store.y[ids]), t
    if not hetero:
        assert torch.equal(fb.edge[("_N", "_E", "_N")]["edge_attr"], data.edge_attr[out.edge])


def _sampler_rank(rank, world, kind, port):
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput

    from pyg_dist.distributed.dist_context import DistContext
    from pyg_dist.distributed.dist_neighbor_sampler import DistNeighborSampler
    from pyg_dist.distributed.rpc import init_rpc, shutdown_rpc
    from pyg_dist.sampler.neighbor import NeighborSampler

    hetero, temporal = kind == "hetero", kind == "temporal"
    data = _hetero() if hetero else _homo(time=temporal)
    stores = hetero_stores(rank, data) if hetero else homo_stores(rank, data, temporal, halo=kind == "halo")
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world, group_name="mem")
    time_attr = "time" if temporal else None
    sampler = DistNeighborSampler(current_ctx=ctx, data=stores, num_neighbors=[-1, -1], shuffle=False,
                                  time_attr=time_attr)
    init_rpc(current_ctx=ctx, master_addr="127.0.0.1", master_port=port, rpc_timeout=60)
    sampler.register_sampler_rpc()
    oracle = NeighborSampler(data, [-1, -1], time_attr=time_attr)
    ntype = "paper" if hetero else None
    num = data["paper"].num_nodes if hetero else data.num_nodes
    batches = 0
    for start in range(rank, 12, world):  # seeds owned here and elsewhere
        seeds = torch.arange(start, num, 11)
        seed_time = data.time[seeds] + start % 3 if temporal else None
        inputs = NodeSamplerInput(None, seeds, time=seed_time, input_type=ntype)
        got, want = sampler.sample_from_nodes(inputs), oracle.sample_from_nodes(inputs)
        assert summary(got, hetero) == summary(want, hetero)
        _check_rows(got, data, hetero)
        batches += 1
    links = 0
    if kind == "homo":
        pick = torch.arange(rank, data.num_edges, 9)
        inputs = EdgeSamplerInput(None, data.edge_index[0, pick], data.edge_index[1, pick])
        neg = NegativeSampling("binary")
        got, want = sampler.sample_from_edges(inputs, neg, key=KEY), oracle.sample_from_edges(inputs, neg, key=KEY)
        assert summary(got, False) == summary(want, False)
        for out in (got, want):
            positive = out.metadata.edge_label_index[:, out.metadata.edge_label == 1]
            assert torch.equal(out.node[positive], data.edge_index[:, pick])
        assert torch.equal(got.node[got.metadata.edge_label_index], want.node[want.metadata.edge_label_index])
        _check_rows(got, data, False)
        links = pick.numel()
    shutdown_rpc()
    return batches, links


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["homo", "halo", "hetero", "temporal"])
def test_hand_built_sampler_equals_one_machine(kind):
    res = spawn_world(WORLD, _sampler_rank, kind, free_port(), timeout=200)
    assert [r[0] for r in res] == [6, 6]
    if kind == "homo":
        assert all(r[1] > 0 for r in res)


def _pyg_test_stores(rank: int, temporal: bool):
    """The stores of PyG's own ``test_dist_neighbor_sampler.py``: edge ids left out, halo rows, an edge whose
    destination the other rank owns, the book set on the graph store only, node time of every node."""
    from torch_geometric.data import Data

    from pyg_dist.distributed import LocalFeatureStore, LocalGraphStore

    if rank == 0:
        node_id, edge_index = torch.tensor([0, 1, 2, 3, 4, 5, 9]), torch.tensor([[1, 2, 3, 4, 5, 0, 0],
                                                                                   [0, 1, 2, 3, 4, 4, 9]])
    else:
        node_id, edge_index = torch.tensor([0, 4, 5, 6, 7, 8, 9]), torch.tensor([[5, 6, 7, 8, 9, 5, 0],
                                                                                   [4, 5, 6, 7, 8, 9, 9]])
    feature = LocalFeatureStore.from_data(node_id)
    graph = LocalGraphStore.from_data(edge_id=None, edge_index=edge_index, num_nodes=10, is_sorted=True)
    graph.node_pb = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    graph.meta.update({"num_parts": 2})
    graph.partition_idx, graph.num_partitions = rank, WORLD
    data = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5, 0, 5, 6, 7, 8, 9, 0], [0, 1, 2, 3, 4, 4, 9, 5, 6, 7, 8, 9]]),
                num_nodes=10)
    if temporal:
        data.time = torch.tensor([5, 0, 1, 3, 3, 4, 4, 4, 4, 4])
        feature.put_tensor(data.time, group_name=None, attr_name="time")
    return (feature, graph), data


def _pyg_test_rank(rank, world, port, disjoint, temporal):
    """PyG's test script with the import prefix changed (and ``sample_from_nodes`` instead of PyG's private
    ``event_loop.run_task(node_sample(...))``): exact node, row and col lists, as PyG's test asserts."""
    import atexit

    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist.distributed.dist_context import DistContext
    from pyg_dist.distributed.dist_neighbor_sampler import DistNeighborSampler
    from pyg_dist.distributed.rpc import init_rpc, shutdown_rpc
    from pyg_dist.sampler.neighbor import NeighborSampler

    dist_data, data = _pyg_test_stores(rank, temporal)
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world,
                      group_name="dist-sampler-test")
    time_attr = "time" if temporal else None
    sampler = DistNeighborSampler(data=dist_data, current_ctx=ctx, num_neighbors=[-1, -1], shuffle=False,
                                  disjoint=disjoint, time_attr=time_attr)
    atexit.register(shutdown_rpc)
    init_rpc(current_ctx=ctx, master_addr="localhost", master_port=port)
    sampler.register_sampler_rpc()
    sampler.init_event_loop()
    seeds = torch.tensor([1, 6]) if rank == 0 else torch.tensor([4, 9])
    inputs = NodeSamplerInput(input_id=None, node=seeds, time=torch.tensor([3, 6]) if temporal else None)
    got = sampler.sample_from_nodes(inputs)
    want = NeighborSampler(data, [-1, -1], disjoint=disjoint, time_attr=time_attr).sample_from_nodes(inputs)
    for name in ("node", "row", "col") + (("batch",) if disjoint or temporal else ()):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.num_sampled_nodes == want.num_sampled_nodes and got.num_sampled_edges == want.num_sampled_edges
    shutdown_rpc()
    return got.node.numel()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("disjoint,temporal", [(False, False), (True, False), (True, True)])
def test_pyg_own_sampler_test_script(disjoint, temporal):
    assert all(n > 2 for n in spawn_world(WORLD, _pyg_test_rank, free_port(), disjoint, temporal, timeout=200))


def _loader_rank(rank, world, workers, port):
    """PyG's loader over stores filled in memory: every seed once, rows equal to the originals."""
    import os

    from pyg_dist.distributed import DistContext, DistNeighborLoader

    data = _homo()
    feature, graph = homo_stores(rank, data)
    feature.labels = data.y
    ctx = DistContext(rank=rank, global_rank=rank, world_size=world, global_world_size=world, group_name="mem")
    seeds = torch.arange(rank, data.num_nodes, world * 3)          # this rank's own seeds, any owner
    loader = DistNeighborLoader((feature, graph), [-1, -1], "127.0.0.1", port, ctx, input_nodes=seeds,
                                batch_size=8, num_workers=workers, seed=3)
    seen = []
    for batch in loader:
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        seen += batch.n_id[:batch.batch_size].tolist()
    loader.shutdown()
    assert os.environ["MASTER_PORT"] != str(port)
    import atexit
    atexit._run_exitfuncs()  # as a script's interpreter does: the loader leaves RPC there
    return sorted(seen) == seeds.tolist()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 2])
def test_pyg_loader_over_memory_stores(workers):
    assert all(spawn_world(WORLD, _loader_rank, workers, free_port(), timeout=200))
