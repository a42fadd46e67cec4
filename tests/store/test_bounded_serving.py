"""Bounded serving (issue 30, item 5): an owner serves each distinct id once, caps a reply's bytes, and
bounds the reply bytes it serves at once; the limits are settings; lookups stay exact.

One process (stores of a 2-part folder, the RPC call simulated through the real RpcFuture): lookups
with an id repeated 100,000 times among others equal the original rows, homo and hetero, whole or
split in pieces; the owner de-duplicates a request that repeats ids; a reply over the cap is refused
and arrives as RemoteCallError; the byte budget admits requests in turn (one larger than the budget
alone) and times out typed. Spawned world (2 ranks): the owner's peak RSS growth for 100,000 repeats
of one node, four such calls at once, and four concurrent whole-partition lookups stays under the
serving budget plus a stated slack.
"""
from __future__ import annotations

import gc
import threading
import time

import pytest
import torch

from pyg_dist import rpc
from pyg_dist._types import HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PyGDistError, RemoteCallError, ServingLimitError
from pyg_dist.format import load_original_ids
from pyg_dist.store import LOOKUP_OP, LocalFeatureStore
from pyg_dist.store import lookup as lookup_mod
from pyg_dist.store.limits import REPLY_MAX_ENV, SERVE_BUDGET_ENV, ByteBudget
from pyg_dist.store.lookup import FeatureQuery, LookupReply, LookupRequest
from pyg_dist.testing import original_attrs, partitioned
from tests.memprobe import PeakBudget, Probe, owner_and_asker, run_memory_world
from tests.store.test_store import no_world, simulated_world  # noqa: F401 -- no_world: autouse fixture

pytestmark = pytest.mark.timeout(240)
REPEATS = 100_000


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    common = dict(num_features=6, community_size=60, node_time=True, seed=3)
    homo = synthetic_graph(900, 6, edge_time=True, edge_dim=3, **common)
    hetero = synthetic_graph(900, 6, hetero=True, edge_dim=2, **{**common, "num_features": 5, "seed": 4})
    return partitioned(tmp_path_factory.mktemp("bounded"), {
        "homo": (homo, 2, {"method": "random"}), "hetero": (hetero, 2, {"method": "random"})})


def _simulated_world(monkeypatch, stores):
    """:func:`tests.store.test_store.simulated_world`, returning the requests sent as (partition, request)."""
    sent: list = []
    simulated_world(monkeypatch, stores, sent)
    return sent


def _public(fs, group):
    return group if fs.is_hetero else None


def _repeat_heavy(fs, group, num, gen):
    """``REPEATS`` copies of one id partition 1 owns and 1,000 of another, among 500 random ids, shuffled."""
    ids = fs.book.owned_ids(group, 1)
    if ids.numel() < 2:
        return None
    hot, warm = ids[0], ids[-1]
    mix = torch.cat([hot.repeat(REPEATS), warm.repeat(1000), torch.randint(0, num, (500,), generator=gen)])
    return mix[torch.randperm(mix.numel(), generator=gen)]


# ------------------------------------------------------------------ exactness with repeats (requester dedup)
@pytest.mark.parametrize("kind", ["homo", "hetero"])
@pytest.mark.parametrize("reply_max", [None, "0.001"])  # default, or ~1 KiB: many pieces per partition
def test_repeat_heavy_lookups_are_exact_and_send_each_id_once(folders, kind, reply_max, monkeypatch):
    if reply_max:
        monkeypatch.setenv(REPLY_MAX_ENV, reply_max)
    data, root = folders[kind]
    orig = load_original_ids(root)
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    sent = _simulated_world(monkeypatch, stores)
    fs, gen = stores[0], torch.Generator().manual_seed(5)
    for group in fs.node_types + fs.edge_types:
        expected = original_attrs(data, group)
        ids = _repeat_heavy(fs, group, orig[group].numel(), gen)
        if ids is None:
            continue
        sent.clear()
        fut = fs.lookup_features_async(ids, isinstance(group, str), _public(fs, group), attr_names=sorted(expected))
        got = fut.wait()
        for name, value in expected.items():
            assert torch.equal(got[name], value[orig[group][ids]]), (kind, group, name)
        asked = torch.cat([q.ids for _, req in sent for q in req.queries])
        remote = ids[fs.book.owner(group, ids) == 1]
        assert torch.equal(torch.sort(asked).values, torch.unique(remote))  # each remote id once, nothing else
        assert fut.plan.asked_rows(0) == asked.numel() and fut.plan.remote_rows(0) == remote.numel()
        for _, req in sent:
            for q in req.queries:
                assert bool((q.ids[1:] > q.ids[:-1]).all())  # increasing: the owner's one-pass check holds
        assert len(sent) > 1 if reply_max else len(sent) == 1
    # several groups in one round, the async path: still one logical request per partition, exact
    many = {g: _repeat_heavy(fs, g, orig[g].numel(), gen) for g in fs.node_types}
    out = fs.lookup_many_async(many, {g: ["x"] for g in many}).wait()
    for g, values in out.items():
        assert torch.equal(values["x"], original_attrs(data, g)["x"][orig[g][many[g]]])


def test_expansion_with_chunks_and_pieces_is_exact(folders, monkeypatch):
    """Tiny chunks and pieces cut through runs of repeated ids: every position still gets its row."""
    from pyg_dist.store import serving
    monkeypatch.setattr(serving, "CHUNK_BYTES", 3 * 24)  # 3 rows of 6 float32 per chunk
    monkeypatch.setenv(REPLY_MAX_ENV, str(7 * 24 / 2 ** 20))  # 7 rows per piece
    data, root = folders["homo"]
    orig = load_original_ids(root)
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    sent = _simulated_world(monkeypatch, stores)
    p1 = stores[1].get_global_id()[:40]
    ids = p1.repeat_interleave(torch.arange(1, 41))[torch.randperm(820, generator=torch.Generator().manual_seed(0))]
    got = stores[0].lookup_features(ids)
    assert torch.equal(got, data.x[orig[HOMO_NODE][ids]])
    assert len(sent) == 6 and all(q.ids.numel() <= 7 for _, r in sent for q in r.queries)


# ------------------------------------------------------------------ the owner does not trust the requester
def test_owner_dedupes_a_request_that_repeats_ids(folders):
    data, root = folders["homo"]
    orig = load_original_ids(root)
    owner = LocalFeatureStore.from_partition(root, 1)
    own = owner.get_global_id()
    ids = torch.cat([own[3].repeat(REPEATS), own[:5], own[3:4]])  # repeats, out of order
    reply = owner._serve_request(LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x", "y"), ids),)))
    chunks = reply.values[0]["x"]
    assert sum(c.size(0) for c in chunks) == 5  # the distinct ids only
    assert reply.index is not None and reply.index[0].numel() == ids.numel()
    for name in ("x", "y"):
        rows = torch.cat(reply.values[0][name])[reply.index[0]]
        assert torch.equal(rows, getattr(data, name)[orig[HOMO_NODE][ids]])
    clean = owner._serve_request(LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), own[:5]),)))
    assert clean.index is None
    with pytest.raises(PyGDistError, match="1-D int64"):
        owner._serve_request(LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), own[:5].float()),)))


def test_requester_rejects_an_answer_with_an_index(folders, monkeypatch):
    _, root = folders["homo"]
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    real = stores[1]._serve_request

    def lying(req):
        reply = real(req)
        return LookupReply(reply.partition, reply.values, [torch.zeros(q.ids.numel(), dtype=torch.long)
                                                           for q in req.queries])
    stores[1]._serve_request = lying
    _simulated_world(monkeypatch, stores)
    with pytest.raises(PyGDistError, match="as if they repeated"):
        stores[0].lookup_features(stores[1].get_global_id()[:10])


# ------------------------------------------------------------------ the reply cap
def test_reply_over_the_cap_is_refused_and_arrives_typed(folders, monkeypatch):
    _, root = folders["homo"]
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    _simulated_world(monkeypatch, stores)
    monkeypatch.setenv(REPLY_MAX_ENV, "0.001")  # the owner's cap: ~43 rows of x
    monkeypatch.setattr(lookup_mod, "reply_max_bytes", lambda: 1 << 40)  # a requester that does not split
    ids = stores[1].get_global_id()[:200]
    with pytest.raises(RemoteCallError) as info:
        stores[0].lookup_features(ids)
    text = str(info.value)
    assert info.value.partition == 1 and "ServingLimitError" in text and "PYG_DIST_REPLY_MAX_MB" in text
    assert "200 rows" in text and "MiB" in text
    one_row = LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), ids[:1]),))
    monkeypatch.setenv(REPLY_MAX_ENV, str(1 / 2 ** 20))  # 1 byte: a single row is still served
    assert stores[1]._serve_request(one_row).values[0]["x"][0].shape == (1, 6)


def test_split_request_pieces_cover_the_request():
    req = LookupRequest(3, (FeatureQuery("a", ("x",), torch.arange(10)), FeatureQuery("b", ("x",), torch.arange(3))))
    pieces = lookup_mod.split_request(req, [100, 1000], 450, timeout=2.0)
    shape = [([q.ids.tolist() for q in p.queries], where, spans) for p, where, spans in pieces]
    assert shape == [([[0, 1, 2, 3]], [0], [(0, 4)]), ([[4, 5, 6, 7]], [0], [(4, 8)]),
                     ([[8, 9]], [0], [(8, 10)]), ([[0]], [1], [(0, 1)]), ([[1]], [1], [(1, 2)]),
                     ([[2]], [1], [(2, 3)])]  # a 1000-byte row over the 450-byte cap goes alone
    assert all(p.timeout == 2.0 and p.partition == 3 for p, _, _ in pieces)
    whole = lookup_mod.split_request(req, [1, 1], 1 << 20)
    assert len(whole) == 1 and whole[0][0].queries == req.queries


# ------------------------------------------------------------------ the byte budget
def test_budget_admits_in_turn_alone_when_larger_and_times_out_typed():
    budget = ByteBudget()
    a = budget.acquire(60, limit=100, timeout=5)
    order = []

    def take(n, name):
        h = budget.acquire(n, limit=100, timeout=5)
        order.append((name, budget.in_use))
        time.sleep(0.05)
        h.release()
    big = threading.Thread(target=take, args=(500, "big"))  # larger than the limit: admitted alone
    big.start()
    time.sleep(0.1)
    small = threading.Thread(target=take, args=(30, "small"))  # fits beside a, but waits its turn (FIFO)
    small.start()
    time.sleep(0.1)
    assert order == [] and budget.in_use == 60
    a.release()
    big.join(5)
    small.join(5)
    assert order == [("big", 500), ("small", 30)] and budget.in_use == 0
    held = budget.acquire(100, limit=100, timeout=5)
    with pytest.raises(ServingLimitError) as info:
        budget.acquire(1, limit=100, timeout=0.2)
    assert info.value.setting == SERVE_BUDGET_ENV and "PYG_DIST_SERVE_BUDGET_MB" in str(info.value)
    held.release()
    held.release()  # idempotent
    expiring = budget.acquire(100, limit=100, timeout=0.2)  # never released: it expires with its timeout
    assert budget.in_use == 100
    time.sleep(0.3)
    assert budget.in_use == 0 and expiring.nbytes == 100


def test_budget_is_released_when_the_reply_tensors_are_freed():
    budget = ByteBudget()
    hold = budget.acquire(10, limit=100, timeout=30)
    chunks = [torch.zeros(3), torch.zeros(4)]
    hold.release_when_freed(chunks)
    del chunks[0]
    gc.collect()
    assert budget.in_use == 10
    chunks.clear()
    gc.collect()
    assert budget.in_use == 0


def test_concurrent_requests_wait_for_a_tiny_budget_and_are_all_exact(folders, monkeypatch):
    data, root = folders["homo"]
    orig = load_original_ids(root)
    owner = LocalFeatureStore.from_partition(root, 1)
    monkeypatch.setenv(SERVE_BUDGET_ENV, str(1400 / 2 ** 20))  # 1400 bytes: two 20-row replies (x and y) at once
    seen = []

    class Recording(ByteBudget):
        def acquire(self, nbytes, limit, timeout, what="a lookup reply"):
            hold = super().acquire(nbytes, limit, timeout, what)
            seen.append((self.in_use, nbytes, limit))
            return hold
    owner._budget = Recording()
    own = owner.get_global_id()
    gen = torch.Generator().manual_seed(1)
    sizes = [20] * 8 + [300] * 2  # 300 rows: over the whole budget, served alone
    asks = [own[torch.randperm(own.numel(), generator=gen)[:n]].sort().values for n in sizes]
    errors = []

    def serve(ids):
        try:
            reply = owner._serve_request(LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x", "y"), ids),)))
            time.sleep(0.02)  # hold the reply a moment, like a send in progress
            for name in ("x", "y"):
                assert torch.equal(torch.cat(reply.values[0][name]), getattr(data, name)[orig[HOMO_NODE][ids]])
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=serve, args=(ids,)) for ids in asks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(seen) == len(sizes)
    for in_use, nbytes, limit in seen:
        assert in_use <= limit or in_use == nbytes, (in_use, nbytes, limit)  # within budget, or alone
    gc.collect()
    assert owner._budget.in_use == 0  # every reply freed: every byte given back


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize("value", ["lots", "-1", "0", "nan", "inf"])
def test_nonsense_settings_raise_naming_the_variable(folders, monkeypatch, value):
    _, root = folders["homo"]
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    _simulated_world(monkeypatch, stores)
    req = LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), stores[1].get_global_id()[:3]),))
    monkeypatch.setenv(SERVE_BUDGET_ENV, value)
    with pytest.raises(InvalidArgumentError) as info:
        stores[1]._serve_request(req)
    assert "$PYG_DIST_SERVE_BUDGET_MB" in str(info.value) and repr(value) in str(info.value)
    monkeypatch.delenv(SERVE_BUDGET_ENV)
    monkeypatch.setenv(REPLY_MAX_ENV, value)
    with pytest.raises(InvalidArgumentError, match=r"\$PYG_DIST_REPLY_MAX_MB"):
        stores[0].lookup_features(stores[1].get_global_id()[:3])
    monkeypatch.setenv(REPLY_MAX_ENV, "")  # empty: the default
    assert stores[0].lookup_features(stores[1].get_global_id()[:3]).shape == (3, 6)


# ------------------------------------------------------------------ the owner's memory, in a real world
#: 80k nodes of 512-byte rows per partition: a whole partition is 40 MiB, four at once 160 MiB.
WORLD = dict(num_nodes=160_000, avg_degree=2, num_features=128, community_size=200, seed=7)
#: The owner's budget and reply cap for the test. The slack covers what is not reply rows: the received
#: ids of the raw request with its de-duplication (~6 MiB) and what the allocator keeps around (measured
#: growth over all steps: 10-12 MiB on either transport since the reply buffers live in maps of their own;
#: 16-46 MiB on sockets while they were heap blocks that other threads' small allocations split; before
#: bounded serving: ~49 MiB for one call of 100,000 repeats, ~200 MiB for four at once, 160 MiB for four
#: whole partitions).
BUDGET_MB, REPLY_MB, SLACK_MB = 4, 2, 20
_PROBE_OP = "test.bounded.probe"


def _memory_world(rank, world_size, root):
    from pyg_dist._alloc import tune_allocator
    from pyg_dist.context import DistContext
    from pyg_dist.store import load_stores
    tune_allocator()  # as dist_session does: one arena, freed blocks kept for reuse
    ctx = DistContext.from_env(num_partitions=world_size)
    _, fs = load_stores(root, ctx=ctx)
    fs.serve(replace=True)
    fs._budget = PeakBudget()
    float(fs.get_tensor(None, "x").sum())  # page the owned features in before any measurement
    return owner_and_asker(ctx, rank, _PROBE_OP, lambda: _ask_owner(fs, root), call_timeout=120, wait=250)


def _ask_owner(fs, root) -> dict:
    """Rank 0: every step's rows checked against the originals; the owner's peak RSS growth after each
    (cumulative from one reset after a small warm-up that compiles and pages in what serving needs)."""
    x, orig = synthetic_graph(**WORLD).x, load_original_ids(root)[HOMO_NODE]
    own1 = fs.book.owned_ids(HOMO_NODE, 1)
    hot = own1[:1].repeat(REPEATS)  # one node's features 100,000 times
    want_hot = x[orig[own1[0]]].expand(REPEATS, -1)

    def together(ids, want, calls=4):
        for got in [f.wait() for f in [fs.lookup_features_async(ids) for _ in range(calls)]]:
            assert torch.equal(got, want)

    def raw_repeats():  # a requester that does not dedupe: the owner does, and says how to expand
        reply = rpc.call(1, LOOKUP_OP, LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), hot),)))
        assert torch.equal(torch.cat(reply.values[0]["x"])[reply.index[0]], want_hot)
    together(own1[:2000], x[orig[own1[:2000]]], 2)  # warm-up: 1 MiB each
    start = rpc.call(1, _PROBE_OP, Probe("reset")).value
    if start < 0:
        return {"growth": None}
    growth = {}
    for name, step in [("one", lambda: together(hot, want_hot, 1)), ("four", lambda: together(hot, want_hot)),
                       ("raw_repeats", raw_repeats), ("whole_partition_four", lambda: together(own1, x[orig[own1]]))]:
        step()
        growth[name] = rpc.call(1, _PROBE_OP, Probe("peak")).value - start
    try:  # a request over the owner's reply cap: refused, typed, naming the peer, the size and the setting
        rpc.call(1, LOOKUP_OP, LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x",), own1),)))
        refused = None
    except RemoteCallError as exc:
        refused = (exc.partition, "PYG_DIST_REPLY_MAX_MB" in exc.remote_traceback,
                   f"{own1.numel()} rows" in exc.remote_traceback)
    peak = rpc.call(1, _PROBE_OP, Probe("peak")).budget_peak
    return {"growth": growth, "refused": refused, "partition_bytes": own1.numel() * 512, "budget_peak": peak}


@pytest.mark.timeout(300)
def test_owner_memory_stays_within_the_budget(tmp_path):
    asker = run_memory_world(tmp_path, WORLD, _memory_world, BUDGET_MB, REPLY_MB, failure_s=120, timeout=280)
    assert asker["refused"] == (1, True, True)
    assert 0 < asker["budget_peak"] <= BUDGET_MB << 20  # every reply piece (<= 2 MiB) waited for room
    assert 4 * asker["partition_bytes"] > 2 * (BUDGET_MB + SLACK_MB) << 20  # what was asked at once: 160 MiB
    for name, grown in asker["growth"].items():  # cumulative: the last is the peak over every step
        assert grown < (BUDGET_MB + SLACK_MB) << 20, (name, grown / 2 ** 20, asker["growth"])
