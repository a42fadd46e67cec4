"""Bounded one-hop serving (issue item 6), in one process: a requester splits a hop request whose reply could
exceed ``$PYG_DIST_REPLY_MAX_MB`` into pieces (by seeds; with replacement by draws) whose merged answer
equals the unsplit one exactly, in every sampling mode, and whose edges are the graph's own; an owner bounds a
reply before sampling, refuses one over the cap (typed, naming the size and the setting) unless it is one
seed without replacement or one draw, and holds the bound under its serving budget until the reply is freed.
The owner's memory on a real 2-rank world: ``test_bounded_hops_world.py``."""
from __future__ import annotations

import asyncio
import dataclasses
import gc

import pytest
import torch

from pyg_dist import rpc
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import PyGDistError, RemoteCallError, ServingLimitError
from pyg_dist.format import load_original_ids
from pyg_dist.ops import available_backends
from pyg_dist.partition import Partitioner
from pyg_dist.rpc.callees import CallReply
from pyg_dist.rpc.calls import RpcFuture
from pyg_dist.sampler.graph import SamplingGraph
from pyg_dist.sampler.hops import HopOptions, gather_hop, merge_replies, serve_one_hop
from pyg_dist.sampler.messages import ONE_HOP_OP, SAMPLE_BYTES, SEED_BYTES, HopTask, OneHopRequest
from pyg_dist.sampler.plan import split_request
from pyg_dist.store import load_stores
from pyg_dist.store.limits import REPLY_MAX_ENV, SERVE_BUDGET_ENV, ByteBudget

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif("numba" not in available_backends(), reason="exact pieces need the numba kernels")]
ET = ("_N", "_E", "_N")
#: (replace, weighted, time_level, temporal_strategy, disjoint)
MODES = {"replace": (True, False, None, "uniform", False), "no_replace": (False, False, None, "uniform", False),
         "weighted": (True, True, None, "uniform", False), "node_time": (True, False, "node", "uniform", False),
         "edge_time_last": (True, False, "edge", "last", False), "disjoint": (True, False, None, "uniform", True),
         "weighted_no_replace": (False, True, "node", "uniform", False)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    data = synthetic_graph(600, 8, num_features=4, community_size=50, edge_weight=True, node_time=True,
                           edge_time=True, seed=11)
    root = tmp_path_factory.mktemp("hops") / "g"
    Partitioner(data, 2, method="random").save(root, progress=False)
    graphs = [SamplingGraph.from_store(load_stores(root, p)[0]) for p in range(2)]
    return data, load_original_ids(root), graphs


@pytest.fixture(autouse=True)
def _forget_the_callee():
    yield
    rpc.unregister_callee(ONE_HOP_OP)


def _request(graph, mode, k, gen, seeds=None):
    """Partition 1's request for ``k`` samples of 40 of its destinations (repeats when disjoint)."""
    replace, weighted, level, strategy, disjoint = MODES[mode]
    lo, hi = graph.dst_range[ET]
    seeds = torch.randint(lo, hi, (40,), generator=gen) if seeds is None else seeds
    n = seeds.numel()
    times = torch.randint(0, 10 ** 6, (n,), generator=gen) if level else None
    batch = torch.arange(n) % 7 if disjoint else None
    task = HopTask(ET, seeds, k, key=12345, seed_time=times, batch=batch)
    return OneHopRequest(graph.partition, (task, task.span(3, 9)), replace, strategy, level, weighted)


def _served(graph, req, limit):
    pieces = split_request(req, limit)
    replies = [serve_one_hop(graph, piece.request) for piece in pieces]
    return pieces, merge_replies(graph.partition, req, pieces, replies, graph.num_nodes)


def _check_edges(data, orig, req, reply):
    """The oracle: every sampled edge is an in-edge of its seed in the original graph (PyG's edge_index)."""
    for task, res in zip(req.tasks, reply.results):
        dst = task.seeds.repeat_interleave(res.count)
        got = data.edge_index[:, orig[ET][res.edge]]
        assert torch.equal(got[0], orig["_N"][res.nbr]) and torch.equal(got[1], orig["_N"][dst])
        if not req.replace:
            for lo, hi in zip(res.count.cumsum(0) - res.count, res.count.cumsum(0)):
                assert res.edge[lo:hi].unique().numel() == int(hi - lo)  # no edge twice without replacement


@pytest.mark.parametrize("mode", sorted(MODES))
def test_split_requests_merge_to_the_unsplit_reply(folder, mode):
    data, orig, graphs = folder
    owner, gen = graphs[1], torch.Generator().manual_seed(3)
    k = 50
    req = _request(owner, mode, k, gen)
    whole = serve_one_hop(owner, req)
    assert split_request(req, 1 << 30)[0].request is req  # within the cap: sent as it is
    pieces, merged = _served(owner, req, 3 * SAMPLE_BYTES + SEED_BYTES)  # 3 draws per piece
    draws = MODES[mode][0] and not MODES[mode][3] == "last"
    assert len(pieces) >= (46 * 17 if draws else 46)  # by draws (46 seeds x ceil(50 / 3)), else seed by seed
    for w, m in zip(whole.results, merged.results):
        assert torch.equal(w.count, m.count) and torch.equal(w.nbr, m.nbr) and torch.equal(w.edge, m.edge)
    assert sum(int(r.count.sum()) for r in whole.results) > 0
    _check_edges(data, orig, req, merged)
    pieces, merged = _served(owner, req, 7 * (k * SAMPLE_BYTES + SEED_BYTES))  # 7 seeds per piece
    assert len(pieces) == 6 + 1
    assert all(torch.equal(w.nbr, m.nbr) and torch.equal(w.count, m.count) for w, m in zip(whole.results,
                                                                                          merged.results))


def _simulated(monkeypatch, graphs, budget=None):
    """call_async(p, ONE_HOP_OP, req) answered by serve_one_hop of ``graphs[p]`` through the real RpcFuture."""
    sent = []

    def fake_call_async(partition, op, payload=None, *, timeout=None):
        assert op == ONE_HOP_OP
        sent.append(payload)
        fut = torch.futures.Future()
        try:
            fut.set_result(CallReply(value=serve_one_hop(graphs[partition], payload, budget)))
        except Exception as e:  # noqa: BLE001 -- what rpc.callees.serve does
            fut.set_result(CallReply(error=f"{type(e).__name__}: {e}"))
        return RpcFuture(fut, op, partition, partition, f"sim_{partition}", 5.0)

    monkeypatch.setattr(rpc, "call_async", fake_call_async)
    return sent


def test_requester_splits_by_its_setting_and_gathers_exactly(folder, monkeypatch):
    """Through the hop loop's gather (the requester's real path), with a reply cap of 1 KiB and 4e4 draws of
    one remote seed: about 640 pieces, each within the cap, merged equal to the unsplit gather."""
    data, orig, graphs = folder
    here = graphs[0]
    seed = graphs[1].dst_range[ET][0] + 5
    sent = _simulated(monkeypatch, graphs, ByteBudget())
    opts = HopOptions({ET: [40_000]}, 1, replace=True, backend="numba")
    tasks = [HopTask(ET, torch.tensor([here.dst_range[ET][0] + 1, seed, seed]), 40_000, key=99)]
    whole = asyncio.run(gather_hop(here, opts, tasks, opts.request_template()))
    assert len(sent) == 1
    sent.clear()
    monkeypatch.setenv(REPLY_MAX_ENV, str(1024 / 2 ** 20))
    split = asyncio.run(gather_hop(here, opts, tasks, opts.request_template()))
    assert len(sent) == 2 * -(-40_000 // 63) and all(t.num_neighbors <= 63 for r in sent for t in r.tasks)
    for (wp, w), (sp, s) in zip(whole[0], split[0]):
        assert torch.equal(wp, sp) and torch.equal(w.nbr, s.nbr) and torch.equal(w.edge, s.edge)
        assert torch.equal(w.count, s.count)
    (_, remote), = [(p, h) for p, h in split[0] if p.numel() == 2]
    assert remote.count.tolist() == [40_000, 40_000]
    dst = torch.full((80_000,), seed)
    got = data.edge_index[:, orig[ET][remote.edge]]
    assert torch.equal(got[0], orig["_N"][remote.nbr]) and torch.equal(got[1], orig["_N"][dst])


def test_all_neighbours_over_the_cap_are_asked_again_in_halves(folder, monkeypatch):
    """Fanout -1: the requester cannot bound the reply (the degrees are the owner's); refused as over the cap,
    the request goes again as halves of its seeds until each fits (one seed always does): the same sample."""
    data, orig, graphs = folder
    here, lo = graphs[0], graphs[1].dst_range[ET][0]
    sent = _simulated(monkeypatch, graphs, ByteBudget())
    opts = HopOptions({ET: [-1]}, 1, backend="numba")
    tasks = [HopTask(ET, torch.cat([torch.arange(lo, lo + 40), torch.tensor([here.dst_range[ET][0]])]), -1, key=3)]
    whole = asyncio.run(gather_hop(here, opts, tasks, opts.request_template()))
    assert len(sent) == 1
    sent.clear()
    monkeypatch.setenv(REPLY_MAX_ENV, str(300 / 2 ** 20))  # 300 bytes: ~18 edges per reply
    split = asyncio.run(gather_hop(here, opts, tasks, opts.request_template()))
    assert len(sent) > 40 and sent[0].tasks[0].seeds.numel() == 40  # the whole, refused, then halves
    for (wp, w), (sp, s) in zip(whole[0], split[0]):
        assert torch.equal(wp, sp) and torch.equal(w.nbr, s.nbr) and torch.equal(w.edge, s.edge)
        assert torch.equal(w.count, s.count)
    (_, remote), = [(p, h) for p, h in split[0] if p.numel() == 40]
    colptr = graphs[1].csc[ET].colptr
    assert torch.equal(remote.count, colptr[1:41] - colptr[:40])  # every in-edge of every seed
    got = data.edge_index[:, orig[ET][remote.edge]]
    assert torch.equal(got[1], orig["_N"][torch.arange(lo, lo + 40).repeat_interleave(remote.count)])


def test_owner_refuses_an_unsplit_reply_over_the_cap(folder, monkeypatch):
    _, _, graphs = folder
    owner = graphs[1]
    seed = torch.tensor([owner.dst_range[ET][0]])
    monkeypatch.setenv(REPLY_MAX_ENV, "1")  # 1 MiB
    big = OneHopRequest(1, (HopTask(ET, seed, 10 ** 6, key=1),), replace=True)  # up to 15.26 MiB
    with pytest.raises(ServingLimitError) as info:
        serve_one_hop(owner, big)
    text = str(info.value)
    assert info.value.setting == REPLY_MAX_ENV and "partition 1" in text and "15.26 MiB" in text
    assert "$PYG_DIST_REPLY_MAX_MB = 1.00 MiB" in text
    _simulated(monkeypatch, graphs)
    with pytest.raises(RemoteCallError) as remote:  # what a requester that does not split gets
        rpc.call_async(1, ONE_HOP_OP, big).wait()
    assert remote.value.partition == 1 and "ServingLimitError" in str(remote.value)
    monkeypatch.setenv(REPLY_MAX_ENV, str(1 / 2 ** 20))  # 1 byte: what cannot be split is still served
    one_seed = serve_one_hop(owner, OneHopRequest(1, (HopTask(ET, seed, -1),)))  # all its in-edges
    one_draw = serve_one_hop(owner, OneHopRequest(1, (HopTask(ET, seed, 1, skip=7),), replace=True))
    assert int(one_seed.results[0].count[0]) > 1 and one_draw.results[0].count.tolist() == [1]
    with pytest.raises(ServingLimitError):
        serve_one_hop(owner, OneHopRequest(1, (HopTask(ET, seed, 2),), replace=True))
    with pytest.raises(ServingLimitError):  # two seeds: the requester could have split them
        serve_one_hop(owner, OneHopRequest(1, (HopTask(ET, seed.repeat(2), -1),)))


@pytest.mark.parametrize("task", [HopTask(ET, torch.tensor([0]), 2, skip=3), HopTask(ET, torch.tensor([0]), -2),
                                  HopTask(ET, torch.tensor([0.0]), 2), HopTask(ET, torch.tensor([0]), 2, skip=-1)])
def test_owner_refuses_malformed_tasks_typed(folder, task):
    _, _, graphs = folder
    owner = graphs[1]
    task = HopTask(ET, task.seeds + owner.dst_range[ET][0], task.num_neighbors, skip=task.skip)
    with pytest.raises(PyGDistError, match="partition 1 got a one-hop request with"):
        serve_one_hop(owner, OneHopRequest(1, (task,), replace=task.skip == -1))


def test_reply_waits_under_the_budget_until_freed(folder, monkeypatch):
    _, _, graphs = folder
    owner = graphs[1]
    seeds = torch.arange(owner.dst_range[ET][0], owner.dst_range[ET][0] + 20)
    req = OneHopRequest(1, (HopTask(ET, seeds, 1000, key=4),), replace=True, timeout=30.0)
    bound = 20 * (1000 * SAMPLE_BYTES + SEED_BYTES)  # every seed here has in-edges
    monkeypatch.setenv(SERVE_BUDGET_ENV, str(bound / 2 ** 20))
    budget = ByteBudget()
    reply = serve_one_hop(owner, req, budget)
    assert budget.in_use == bound
    assert all(type(getattr(res, name)).__name__ == "Int32" for res in reply.results for name in ("nbr", "edge"))
    with pytest.raises(ServingLimitError) as info:  # no room within the request's timeout
        serve_one_hop(owner, dataclasses.replace(req, timeout=0.3), budget)
    assert info.value.setting == SERVE_BUDGET_ENV and "one-hop reply" in str(info.value)
    del reply
    gc.collect()
    assert budget.in_use == 0  # the reply's tensors freed: its bytes given back
    assert torch.equal(rpc.wire.unpack(serve_one_hop(owner, req, budget), "t")[0].results[0].nbr,
                       serve_one_hop(owner, req).results[0].nbr)
