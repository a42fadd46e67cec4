"""Stores in one process: routing plan, exact answers against the original tensors, the PyG interfaces,
lookups across partitions (remote calls simulated in-process with the real callee and RpcFuture),
typed errors, folder validation, and page sharing of memory-mapped partitions.
"""
from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from pyg_dist import rpc
from pyg_dist._types import HOMO_EDGE, HOMO_NODE
from pyg_dist.context import DistContext
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import (
    InvalidArgumentError,
    NotInitializedError,
    PartitionFormatError,
    PyGDistError,
    RemoteCallError,
)
from pyg_dist.format import DensePartitionBook, PartitionBook, load_original_ids
from pyg_dist.partition import Partitioner
from pyg_dist.rpc.callees import CallReply
from pyg_dist.rpc.calls import RpcFuture
from pyg_dist.store import LOOKUP_OP, LocalFeatureStore, LocalGraphStore, load_stores
from pyg_dist.store.lookup import FeatureQuery, LookupRequest, plan_lookup
from pyg_dist.testing import original_attrs, partitioned, write_pyg_homo

pytestmark = pytest.mark.timeout(120)


def _homo():
    return synthetic_graph(900, 6, num_features=6, community_size=60, node_time=True, edge_time=True,
                           edge_dim=3, edge_weight=True, seed=1)


def _hetero():
    return synthetic_graph(900, 6, num_features=5, community_size=60, hetero=True, node_time=True,
                           edge_time=True, edge_dim=2, edge_weight=True, seed=2)


def _public(store, group):
    return group if store.is_hetero else None


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return partitioned(tmp_path_factory.mktemp("stores"), {
        "homo": (_homo(), 3, {"method": "metis"}), "hetero": (_hetero(), 2, {"method": "random"}),
        "hybrid": (_homo(), 2, {"method": "hybrid", "base_method": "random"})})


@pytest.fixture(autouse=True)
def no_world():
    yield
    rpc.shutdown_rpc(graceful=False)
    rpc.unregister_callee(LOOKUP_OP)


# ------------------------------------------------------------------------------------------- the plan
def test_plan_splits_by_owner_and_keeps_positions():
    book = PartitionBook({"a": torch.tensor([0, 4, 6, 10]), "b": torch.tensor([0, 1, 2, 3])})
    ids_a = torch.tensor([9, 4, 0, 5, 9, 3, 7])
    queries = [FeatureQuery("a", ("x",), ids_a), FeatureQuery("b", ("x", "y"), torch.tensor([1, 1]))]
    plan = plan_lookup(book, 1, queries)
    a, b = plan.routes
    assert a.local_pos.tolist() == [1, 3] and a.local_rows.tolist() == [0, 1]
    assert {p: pos.tolist() for p, pos in a.remote.items()} == {0: [2, 5], 2: [0, 4, 6]}
    assert b.local_pos is None and b.local_rows.tolist() == [0, 0]  # all local: fast path
    assert sorted(plan.requests) == [0, 2] and plan.slots == {0: [0], 2: [0]}
    assert plan.requests[2].queries[0].ids.tolist() == [7, 9] and plan.requests[2].partition == 2  # distinct
    exp = plan.expand[2][0]  # the answer's rows fill every position that asked: 7 at 6, 9 at 0 and 4
    assert sorted(exp.pos.tolist()) == [0, 4, 6] and exp.rows == 2
    assert torch.equal(ids_a[exp.pos], torch.tensor([7, 9])[exp.index])
    # Partition 0 answers query b remotely too: one request carries both queries.
    plan0 = plan_lookup(book, 0, queries)
    assert plan0.slots[1] == [0, 1] and [q.group for q in plan0.requests[1].queries] == ["a", "b"]
    assert plan0.requests[1].queries[1].attr_names == ("x", "y")


def test_plan_with_dense_book_and_empty_query():
    book = DensePartitionBook({"_N": torch.tensor([1, 0, 1, 0, 1])}, num_parts=2)
    plan = plan_lookup(book, 1, [FeatureQuery("_N", ("x",), torch.tensor([4, 1, 2]))])
    r = plan.routes[0]
    assert r.local_pos.tolist() == [0, 2] and r.local_rows.tolist() == [2, 1] and r.remote[0].tolist() == [1]
    empty = plan_lookup(book, 0, [FeatureQuery("_N", ("x",), torch.empty(0, dtype=torch.long))])
    assert empty.routes[0].local_pos is None and not empty.requests


# --------------------------------------------------------------------------- local answers, exactly
@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_local_blocks_and_owned_lookups_equal_originals(folders, kind):
    data, root = folders[kind]
    orig = load_original_ids(root)
    for p in range(read_parts(root)):
        gs, fs = load_stores(root, p)
        for group in fs.node_types + fs.edge_types:
            g = _public(fs, group)
            owned = fs.get_global_id(g, is_node=isinstance(group, str))
            expected = original_attrs(data, group)
            assert sorted(fs.attr_names(g, is_node=isinstance(group, str))) == sorted(expected)
            for name, value in expected.items():
                block = fs.get_tensor(g if isinstance(group, str) or fs.is_hetero else (None, None), name)
                assert torch.equal(block, value[orig[group][owned]])
            if isinstance(group, str) and "train_mask" in expected:
                want = owned[expected["train_mask"][orig[group][owned]]]
                assert torch.equal(fs.get_global_id(g, mask="train_mask"), want)
            if isinstance(group, str) and owned.numel():  # owned ids need no RPC world
                ids = owned[torch.randint(0, owned.numel(), (50,))]
                assert torch.equal(fs.lookup_features(ids, True, g), expected["x"][orig[group][ids]])
            assert fs.get_tensor_size(g if isinstance(group, str) or fs.is_hetero else (None, None),
                                      next(iter(expected)))[0] == orig[group].numel()


def read_parts(root):
    return json.loads((root / "META.json").read_text())["num_parts"]


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("kind", ["homo", "hetero", "hybrid"])
def test_graph_stores_reassemble_the_graph(folders, kind, mmap):
    """Mapped, the store reads the file's int64 ids; in memory, a compact CSC (int32 sources, edge ids as
    ``position + edge_offset``): both hand out the original graph's edges, each exactly once."""
    from torch_geometric.data import HeteroData
    data, root = folders[kind]
    orig = load_original_ids(root)
    hetero = isinstance(data, HeteroData)
    for et in (data.edge_types if hetero else [HOMO_EDGE]):
        src, dst = (et[0], et[2]) if hetero else (HOMO_NODE, HOMO_NODE)
        store = data[et] if hetero else data
        seen = []
        for p in range(read_parts(root)):
            gs = LocalGraphStore.from_partition(root, p, mmap=mmap)
            key = et if hetero else None
            part = gs.graph_part(key)
            assert part.row.dtype == part.edge_id.dtype == torch.int64
            assert gs.local_csc(key).row.dtype == (torch.int64 if mmap else torch.int32)
            if not mmap:  # pyg_dist folders number a partition's edges in CSC order: no id array in memory
                assert gs.local_csc(key).edge_id is None and torch.equal(part.edge_id, gs.get_edge_id(key, "coo"))
            row, col = gs.get_edge_index(key, "coo")
            eid = gs.get_edge_id(key, "coo")
            assert torch.equal(torch.stack([orig[src][row], orig[dst][col]]), store.edge_index[:, orig[et][eid]])
            csc, (lo, hi) = gs.local_csc(key), gs.dst_range(key)
            assert torch.equal(torch.repeat_interleave(torch.arange(lo, hi), torch.diff(csc.colptr)), col)
            assert torch.equal(csc.weight, store.edge_weight[orig[et][eid]].double())
            assert torch.equal(csc.edge_time, store.edge_time[orig[et][eid]])
            r2, colptr = gs.get_edge_index(key, "csc")  # PyG layout over all destinations
            assert torch.equal(r2, row) and colptr.numel() == gs.num_nodes(dst if hetero else None) + 1
            assert torch.equal(torch.repeat_interleave(torch.arange(colptr.numel() - 1), torch.diff(colptr)), col)
            assert torch.equal(gs.node_time(src if hetero else None), data[src].time[orig[src]] if hetero
                               else data.time[orig[src]])
            if kind == "hybrid":
                assert (lo, hi) == (0, gs.num_nodes()) and eid.numel() == store.edge_index.size(1)
            seen.append(eid)
        if kind != "hybrid":  # every edge in exactly one partition
            assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(store.edge_index.size(1)))


# ------------------------------------------------------------------ across partitions, in one process
def simulated_world(monkeypatch, stores, sent=None):
    """Routes call_async(p, LOOKUP_OP, req) to stores[p]'s callee, through the real RpcFuture; returns the
    partitions called, in order (and appends ``(partition, request)`` to ``sent`` when given)."""
    calls = []

    def fake_call_async(partition, op, payload=None, *, timeout=None):
        assert op == LOOKUP_OP
        calls.append(partition)
        if sent is not None:
            sent.append((partition, payload))
        fut = torch.futures.Future()
        try:
            fut.set_result(CallReply(value=stores[partition]._serve_request(payload)))
        except Exception as e:  # noqa: BLE001 -- what rpc.callees.serve does
            fut.set_result(CallReply(error=f"{type(e).__name__}: {e}"))
        return RpcFuture(fut, op, partition, partition, f"sim_{partition}", 5.0)

    monkeypatch.setattr(rpc, "call_async", fake_call_async)
    return calls


@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_lookups_across_partitions_equal_originals(folders, kind, monkeypatch):
    data, root = folders[kind]
    orig = load_original_ids(root)
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(read_parts(root))]
    calls = simulated_world(monkeypatch, stores)
    fs, gen = stores[0], torch.Generator().manual_seed(0)
    for group in fs.node_types + fs.edge_types:
        is_node, expected = isinstance(group, str), original_attrs(data, group)
        ids = torch.randint(0, orig[group].numel(), (200,), generator=gen)
        assert bool((fs.book.owner(group, ids) != 0).any()) and bool((fs.book.owner(group, ids) == 0).any())
        got = fs.lookup_features(ids, is_node, _public(fs, group), attr_names=sorted(expected))
        for name, value in expected.items():
            assert torch.equal(got[name], value[orig[group][ids]]), (group, name)
    assert set(calls) == set(range(1, len(stores)))
    for group in fs.node_types:  # every id on one other partition: its reply becomes the output
        ids = stores[1].get_global_id(_public(fs, group))
        ids = ids[torch.randperm(ids.numel(), generator=gen)]
        got = fs.lookup_features(ids, True, _public(fs, group))
        assert torch.equal(got, original_attrs(data, group)["x"][orig[group][ids]])
    # Several groups in one round: one request per remote partition; the async path on a loop.
    ids = {g: torch.randint(0, orig[g].numel(), (64,), generator=gen) for g in fs.node_types + fs.edge_types}
    names = {g: ["x"] if isinstance(g, str) else ["edge_attr"] for g in ids}
    calls.clear()
    out = asyncio.run(_await(fs.lookup_many_async(ids, names)))
    assert sorted(calls) == list(range(1, len(stores)))
    for g, value in out.items():
        assert torch.equal(value[names[g][0]], original_attrs(data, g)[names[g][0]][orig[g][ids[g]]])
    empty = fs.lookup_features(torch.empty(0, dtype=torch.long), True, _public(fs, fs.node_types[0]))
    assert empty.shape == (0, data.x.size(1) if kind == "homo" else data[fs.node_types[0]].x.size(1))


async def _await(fut):
    return await fut


def test_remote_failures_arrive_typed(folders, monkeypatch):
    _, root = folders["homo"]
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(3)]
    stores[2] = stores[1]  # partition 2's "process" serves the wrong partition
    simulated_world(monkeypatch, stores)
    ids = torch.arange(stores[0].num_items())
    with pytest.raises(RemoteCallError) as info:
        stores[0].lookup_features(ids)
    assert info.value.partition == 2 and "reached the store of partition 1" in str(info.value)
    wrong = LookupRequest(1, [FeatureQuery(HOMO_NODE, ("x",), torch.tensor([0]))])  # id 0 is not part 1's
    if int(stores[1].book.owner(HOMO_NODE, torch.tensor([0]))) != 1:
        with pytest.raises(PyGDistError, match="does not own"):
            stores[1]._serve_request(wrong)


def test_remote_ids_without_rpc_world(folders):
    _, root = folders["homo"]
    fs = LocalFeatureStore.from_partition(root, 0)
    with pytest.raises(NotInitializedError):
        fs.lookup_features(torch.arange(fs.num_items()))


def test_serve_registers_one_store_per_process(folders):
    _, root = folders["homo"]
    a, b = (LocalFeatureStore.from_partition(root, p) for p in (0, 1))
    a.serve()
    a.serve()  # same store again: no-op
    with pytest.raises(InvalidArgumentError, match="partition 0"):
        b.serve()
    b.serve(replace=True)
    a.stop_serving()  # not a's any more: no-op
    assert LOOKUP_OP in rpc.registered_callees()
    b.stop_serving()
    assert LOOKUP_OP not in rpc.registered_callees()
    b.serve()  # one-partition-world style: answered locally by the registered callee
    rpc.init_rpc(DistContext(rank=0, world_size=1, num_partitions=1))
    req = LookupRequest(1, [FeatureQuery(HOMO_NODE, ("y",), b.get_global_id()[:3])])
    assert torch.equal(rpc.call(0, LOOKUP_OP, req).values[0]["y"][0], b.get_tensor(None, "y")[:3])


# ---------------------------------------------------------------------------------------- bad input
def test_bad_arguments_name_argument_and_value(folders):
    _, root = folders["hetero"]
    gs, fs = load_stores(root, 0)
    paper = torch.tensor([0, 1])
    cases = [
        (lambda: fs.lookup_features(paper, True, None), "input_type"),
        (lambda: fs.lookup_features(paper, True, "venue"), "input_type"),
        (lambda: fs.lookup_features(paper, False, "paper"), "input_type"),
        (lambda: fs.lookup_features(paper, True, "paper", attr_names="z"), "attr_name"),
        (lambda: fs.lookup_features(paper, True, "paper", attr_names=[]), "attr_names"),
        (lambda: fs.lookup_features(paper, True, "paper", attr_names=["x", "x"]), "attr_names"),
        (lambda: fs.lookup_features(paper.float(), True, "paper"), "ids"),
        (lambda: fs.lookup_features(paper.view(1, 2), True, "paper"), "ids"),
        (lambda: fs.lookup_features(torch.tensor([10**6]), True, "paper"), "ids"),
        (lambda: fs.lookup_features(torch.tensor([-1]), True, "paper"), "ids"),
        (lambda: fs.lookup_features(paper, "yes", "paper"), "is_node_feat"),
        (lambda: fs.lookup_features(paper, True, "paper", timeout=0), "timeout"),
        (lambda: fs.lookup_many_async({"paper": paper}, {}), "attr_names"),
        (lambda: fs.get_tensor("paper", "x", slice(0, 2)), "index"),
        (lambda: fs.get_global_id("paper", mask="x"), "mask"),
        (lambda: gs.local_csc(("paper", "to", "venue")), "edge_type"),
        (lambda: gs.node_time(None), "node_type"),
        (lambda: gs.get_edge_index(("paper", "to", "paper"), "csr"), "layout"),
        (lambda: load_stores(root), "part"),
        (lambda: load_stores(root, 2), "part"),
        (lambda: load_stores(root, 0, mmap="yes"), "mmap"),
        (lambda: load_stores(root, ctx="ctx"), "ctx"),
    ]
    for fn, name in cases:
        with pytest.raises(InvalidArgumentError) as info:
            fn()
        assert info.value.name == name, (name, info.value)
    with pytest.raises(PyGDistError, match="read-only"):
        fs.put_tensor(torch.zeros(2), "paper", "x", None)
    with pytest.raises(PyGDistError, match="read-only"):
        gs.put_edge_index((paper, paper), ("paper", "to", "paper"), "coo")


# ---------------------------------------------------------------------------------- folder vs world
def test_folder_that_does_not_match_the_world(folders, tmp_path):
    import shutil
    _, src = folders["homo"]
    ctx2 = DistContext(rank=1, world_size=2, num_partitions=2)
    with pytest.raises(PartitionFormatError, match="META.json") as info:
        load_stores(src, ctx=ctx2)  # 3 partitions on disk, 2 in the world
    assert "3 partitions" in str(info.value) and "expects 2" in str(info.value)
    ctx3 = DistContext(rank=0, world_size=3, num_partitions=3)
    gs, fs = load_stores(src, ctx=ctx3)
    assert gs.partition == fs.partition == 0
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    (broken / "part_2" / "graph.pt").unlink()  # another rank's file: every rank must fail
    with pytest.raises(PartitionFormatError, match=r"part_2/graph\.pt"):
        LocalFeatureStore.from_partition(broken, ctx=ctx3)
    shutil.copy(src / "part_2" / "graph.pt", broken / "part_2" / "graph.pt")
    nf = torch.load(broken / "part_0" / "node_feats.pt", weights_only=True)
    nf["feats"]["y"] = nf["feats"]["y"][:-1]  # one label short
    torch.save(nf, broken / "part_0" / "node_feats.pt")
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats\.pt.*holds \d+ bytes but META.json lists"):
        LocalGraphStore.from_partition(broken, 0)  # the listed size tells first, on every rank
    meta = json.loads((broken / "META.json").read_text())
    del meta["pyg_dist"]["files"]  # a folder written before sizes were listed: the row counts tell
    (broken / "META.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"part_0/node_feats\.pt.*'y'"):
        LocalGraphStore.from_partition(broken, 0)
    (broken / "part_1" / "edge_feats.pt").write_bytes(b"garbage")
    with pytest.raises(PartitionFormatError, match=r"part_1/edge_feats\.pt"):
        load_stores(broken, 1)
    (broken / "META.json").write_text("{ not json")
    with pytest.raises(PartitionFormatError, match="META.json"):
        load_stores(broken, ctx=ctx3)


# ------------------------------------------------------------------------------ PyG-written folders
def test_pyg_written_folder(tmp_path, monkeypatch):
    data = synthetic_graph(300, 5, num_features=4, edge_dim=2, seed=5)
    owner = torch.randint(0, 2, (300,), generator=torch.Generator().manual_seed(1))
    write_pyg_homo(data, owner, tmp_path / "pyg", 2)
    stores = [LocalFeatureStore.from_partition(tmp_path / "pyg", p) for p in range(2)]
    assert isinstance(stores[0].book, DensePartitionBook)
    simulated_world(monkeypatch, stores)
    ids = torch.randint(0, 300, (100,))
    got = stores[1].lookup_features(ids, attr_names=["x", "y"])
    assert torch.equal(got["x"], data.x[ids]) and torch.equal(got["y"], data.y[ids])
    eids = torch.randint(0, data.num_edges, (100,))
    assert torch.equal(stores[0].lookup_features(eids, False), data.edge_attr[eids])
    gs = LocalGraphStore.from_partition(tmp_path / "pyg", 1)
    row, col = gs.get_edge_index(None, "coo")
    assert torch.equal(torch.stack([row, col]), data.edge_index[:, gs.get_edge_id(None, "coo")])


# ------------------------------------------------------------------------- pickling and page sharing
def test_pickled_stores_reopen_the_folder(folders):
    _, root = folders["hetero"]
    gs, fs = load_stores(root, 1)
    fs2, gs2 = pickle.loads(pickle.dumps(fs)), pickle.loads(pickle.dumps(gs))
    assert fs2.partition == 1 and torch.equal(fs2.get_tensor("paper", "x"), fs.get_tensor("paper", "x"))
    assert torch.equal(gs2.local_csc(gs.edge_types[0]).row, gs.local_csc(gs.edge_types[0]).row)


# A fresh process opens the partition (mmap, then a private load) and reports the private memory of the pages that
# hold x: /proc/self/smaps, the mappings that overlap x's bytes (not the process's total, which heap the process
# freed earlier, e.g. from compiling modules without .pyc files, can serve without growing).
_CHILD = textwrap.dedent("""
    import sys, torch
    from pyg_dist.store import LocalFeatureStore
    def private_kb(t):
        lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        total, inside = 0, False
        for line in open("/proc/self/smaps"):
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                start, end = (int(v, 16) for v in head[0].split("-"))
                inside = start < hi and lo < end
            elif inside and head[0] in ("Private_Clean:", "Private_Dirty:"):
                total += int(head[1])
        return total
    for mmap in (True, False):
        fs = LocalFeatureStore.from_partition(sys.argv[1], 0, mmap=mmap)
        x = fs.get_tensor(None, "x")
        total = float(x.sum())  # touch every row
        print(private_kb(x), x.numel() * x.element_size() // 1024)
        del fs, x
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc/<pid>/smaps")
def test_mmap_partition_is_shared_between_processes(tmp_path):
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(3)
    data = Data(x=torch.randn(12000, 128, generator=gen), edge_index=torch.randint(0, 12000, (2, 500), generator=gen))
    Partitioner(data, 1, method="random").save(tmp_path / "p", progress=False)
    trainer = LocalFeatureStore.from_partition(tmp_path / "p", 0, mmap=True)
    orig = load_original_ids(tmp_path / "p")[HOMO_NODE]
    assert torch.equal(trainer.get_tensor(None, "x"), data.x[orig])  # every row, read through the mapping
    # A fresh process (like a spawned sampler worker) opens the same partition: mmap, then private.
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "p")], capture_output=True, text=True,
                         timeout=100, check=True)
    (shared, x_kb), (private, _) = [tuple(int(v) for v in line.split()) for line in out.stdout.split("\n")[:2]]
    assert x_kb >= 6000
    assert shared < 0.2 * x_kb, (shared, x_kb)   # the worker reuses the trainer's pages
    assert private > 0.9 * x_kb, (private, x_kb)  # a private load costs a full copy
