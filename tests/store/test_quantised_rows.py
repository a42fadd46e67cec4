"""Quantised remote rows (issue 32, item 2): the opt-in int8 wire format of feature lookups.

Codec (both backends): round trips within the documented bound on random and adversarial rows (constant,
huge ranges, negative, subnormal, outliers, every dtype); NaN / inf / over-2**126 rows are reported, and the
owner refuses them typed. Wire: which attributes are quantised, the request's format, replies checked on
arrival (malformed codes, scales, offsets, row counts -> typed errors naming the partition). Lookups in one
process (the RPC call simulated through the real RpcFuture): remote rows within the bound, local and cached
rows, labels, masks and times bit-exact, bytes as they travelled, pieces by wire bytes. Settings: sampler,
loaders (``"auto"`` from ``TrainConfig``) and ``TrainConfig``. A spawned 2-rank world on 127.0.0.1: sampled
batches with int8 rows equal the exact ones but for remote ``x`` rows within the bound, and the feature bytes
received for ``x`` drop 3.7x (100-dim float32: 400 -> 108 bytes per row).
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from pyg_dist import rpc
from pyg_dist._types import HOMO_NODE
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PyGDistError, QuantisationError, RemoteCallError
from pyg_dist.format import load_original_ids
from pyg_dist.ops.quant import MAX_MAGNITUDE, dequantise_rows, error_bound, quantise_rows
from pyg_dist.partition import Partitioner
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store.limits import REPLY_MAX_ENV
from pyg_dist.store.lookup import FeatureQuery, LookupReply, LookupRequest
from pyg_dist.store.quant import QuantRows, RowCodes, check_chunks, encode_rows, quantised, wire_row_bytes
from pyg_dist.testing import original_attrs, partitioned
from tests.store.test_store import no_world, simulated_world  # noqa: F401 -- no_world: autouse fixture

pytestmark = pytest.mark.timeout(240)
BACKENDS = ["numba", "torch"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    if request.param == "torch":
        monkeypatch.setenv("PYG_DIST_BACKEND", "torch")
    else:
        pytest.importorskip("numba")
    return request.param


def _round_trip(rows: torch.Tensor):
    """``rows`` encoded and decoded into a fresh output (positions reversed, to exercise the scatter)."""
    q, scale, offset, bad = quantise_rows(rows)
    assert bad == -1 and q.dtype == torch.int8 and q.shape == rows.shape
    out = torch.full_like(rows, float("nan"))
    n = rows.size(0)
    dequantise_rows(out, torch.arange(n - 1, -1, -1), q, scale, offset)
    return out.flip(0), (q, scale, offset)


def _within_bound(rows: torch.Tensor, got: torch.Tensor) -> bool:
    err = (got.double() - rows.double()).reshape(rows.size(0), -1).abs()
    return bool((err <= error_bound(rows)[:, None]).all())


# ------------------------------------------------------------------------------------------------ the codec
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_random_rows_round_trip_within_the_bound(backend, dtype):
    gen = torch.Generator().manual_seed(0)
    rows = (torch.randn(300, 37, generator=gen) * torch.logspace(-3, 3, 300)[:, None]
            + torch.randn(300, 1, generator=gen) * 10).to(dtype)
    got, (q, scale, offset) = _round_trip(rows)
    assert _within_bound(rows, got)
    x = rows.double()
    assert torch.allclose(scale.double(), ((x.amax(1) - x.amin(1)) / 255).float().double())
    assert int(q.min()) == -128 and int(q.max()) == 127  # min and max of a row use the end codes
    # the bound is not loose: the observed worst error reaches most of scale / 2 on random rows
    wide = scale > 0
    worst = ((got.double() - x).abs().amax(1)[wide] / (scale.double()[wide] / 2)).max()
    assert float(worst) > 0.5


def test_adversarial_rows_round_trip_within_the_bound(backend):
    rows = torch.tensor([
        [3.25] * 8,                                          # constant: exact
        [-7.0] * 8,                                          # constant, negative
        [0.0] * 8,
        [-1e30, -5e29, -1e29, -3.0, -2.0, -1.0, -1e-3, -2e30],   # negative, wide
        [-1e37, 1e37, 0.0, 1.0, -1.0, 5e36, -5e36, 3.0],     # huge range, both signs
        [MAX_MAGNITUDE, -MAX_MAGNITUDE, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0],   # the largest magnitude accepted
        [1e-40, 2e-40, -1e-41, 0.0, 1e-45, 3e-40, -3e-40, 1e-39],   # float32 subnormals
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1e6],            # one outlier
        [1.0, 1.0000001, 1.0, 1.0000001, 1.0, 1.0, 1.0, 1.0],    # range of one ulp
    ], dtype=torch.float32)
    got, (q, scale, offset) = _round_trip(rows)
    assert _within_bound(rows, got)
    assert torch.equal(got[:3], rows[:3]) and bool((scale[:3] == 0).all())  # constant rows decode exactly
    assert bool(torch.isfinite(got).all()) and bool(torch.isfinite(scale).all() & torch.isfinite(offset).all())


def test_both_backends_give_the_same_codes(monkeypatch):
    pytest.importorskip("numba")
    gen = torch.Generator().manual_seed(1)
    src = torch.randn(500, 24, generator=gen) * 3
    rows = torch.randint(0, 500, (400,), generator=gen)
    numba = quantise_rows(src, rows)
    monkeypatch.setenv("PYG_DIST_BACKEND", "torch")
    twin = quantise_rows(src, rows)
    for a, b in zip(numba[:3], twin[:3]):
        assert torch.equal(a, b)
    outs = []
    for env in ("torch", "auto"):
        monkeypatch.setenv("PYG_DIST_BACKEND", env)
        out = torch.zeros(450, 24)
        dequantise_rows(out, torch.arange(50, 450), *numba[:3])
        outs.append(out)
    assert torch.equal(outs[0], outs[1]) and bool((outs[0][:50] == 0).all())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 2.0 ** 127])
def test_rows_the_codec_cannot_carry_are_reported_and_refused(backend, bad):
    src = torch.randn(6, 5)
    src[4, 2] = bad
    assert quantise_rows(src)[3] == 4
    assert quantise_rows(src, torch.tensor([0, 1, 4, 5]))[3] == 2
    assert quantise_rows(src, torch.tensor([0, 1, 5]))[3] == -1
    with pytest.raises(QuantisationError, match="global id 104 holds NaN / inf"):
        encode_rows(src, torch.tensor([1, 4]), "partition 1 cannot send 'x'", name_row=lambda r: f"global id {100 + r}")


def test_kernels_check_their_indices(backend):
    src = torch.randn(4, 6)
    with pytest.raises(IndexError):
        quantise_rows(src, torch.tensor([0, 4]))
    q, scale, offset, _ = quantise_rows(src)
    with pytest.raises(IndexError):
        dequantise_rows(torch.zeros(4, 6), torch.tensor([0, 4]), q[:2], scale[:2], offset[:2])
    with pytest.raises(IndexError):
        dequantise_rows(torch.zeros(4, 6), torch.tensor([0, 1]), q, scale, offset, torch.tensor([0, 9]))
    with pytest.raises(InvalidArgumentError):
        dequantise_rows(torch.zeros(4, 5), torch.tensor([0]), q[:1], scale[:1], offset[:1])
    with pytest.raises(InvalidArgumentError):
        quantise_rows(torch.arange(12).view(4, 3))


# --------------------------------------------------------------------------------------------- the wire rules
def test_which_attributes_travel_quantised():
    f32 = torch.float32
    assert quantised("x", f32, (100,)) and quantised("edge_attr", f32, (3,)) and quantised("x", torch.float64, (2,))
    assert not quantised("x", f32, (2,))                    # 2 + 8 bytes is not fewer than 8
    assert not quantised("x", torch.bfloat16, (8,)) and quantised("x", torch.bfloat16, (9,))
    for name in ("y", "time", "edge_time", "edge_weight"):
        assert not quantised(name, f32, (16,))
    assert not quantised("x", torch.int64, (16,)) and not quantised("train_mask", torch.bool, ())
    col = torch.zeros(3, 100)
    assert wire_row_bytes(col, "x", "int8") == 108 and wire_row_bytes(col, "x", "exact") == 400
    assert wire_row_bytes(col, "y", "int8") == 400


def _good(n=4, d=6):
    return QuantRows(torch.zeros(n, d, dtype=torch.int8), torch.ones(n), torch.zeros(n))


def _same_rows(a: QuantRows, b: QuantRows) -> bool:
    return all(torch.equal(x, y) for x, y in ((a.q, b.q), (a.scale, b.scale), (a.offset, b.offset)))


def test_row_codes_encode_a_column_once_and_give_the_per_request_codes(backend, monkeypatch):
    from pyg_dist.store import quant
    encoded = []
    real = quant._encode_column
    monkeypatch.setattr(quant, "_encode_column", lambda col: encoded.append(col.size(0)) or real(col))
    col = torch.randn(50, 12, generator=torch.Generator().manual_seed(4)) * 3
    codes = RowCodes()
    for rows in (torch.tensor([7, 0, 49, 7]), torch.arange(50).flip(0), torch.tensor([], dtype=torch.int64)):
        got = codes.encode(("_N", "x"), col, rows, "x")
        assert _same_rows(got, encode_rows(col, rows, "x"))   # bit-identical to encoding the rows asked
    assert encoded == [50] and codes.nbytes == 50 * (12 + 8)


def test_row_codes_follow_a_changed_column(backend):
    col = torch.randn(20, 6, generator=torch.Generator().manual_seed(5))
    codes, rows = RowCodes(), torch.tensor([3, 11, 3])
    codes.encode("x", col, rows, "x")
    col[11] += 5.0                                 # in place (a learnable embedding's optimizer step)
    assert _same_rows(codes.encode("x", col, rows, "x"), encode_rows(col, rows, "x"))
    other = torch.randn(20, 6)                      # the column replaced by another tensor
    assert _same_rows(codes.encode("x", other, rows, "x"), encode_rows(other, rows, "x"))
    assert codes.nbytes == 0                        # dropped: per request from then on


def test_row_codes_of_a_column_with_a_row_the_codec_refuses(backend):
    col = torch.randn(10, 4)
    col[6, 1] = float("inf")
    codes = RowCodes()
    assert _same_rows(codes.encode("x", col, torch.tensor([0, 9]), "x"), encode_rows(col, torch.tensor([0, 9]), "x"))
    with pytest.raises(QuantisationError, match="x of 'p': row 6 holds NaN / inf"):
        codes.encode("x", col, torch.tensor([2, 6]), "x of 'p'")


def test_an_owner_encodes_each_column_once(folders, monkeypatch):
    from pyg_dist.store import quant
    data, root = folders["homo"]
    (fs, owner), _ = _stores(monkeypatch, root)
    encoded = []
    real = quant._encode_column
    monkeypatch.setattr(quant, "_encode_column", lambda col: encoded.append(tuple(col.shape)) or real(col))
    orig = load_original_ids(root)
    ids = fs.book.owned_ids(HOMO_NODE, 1)
    for k in range(3):
        got, _ = _lookup(fs, HOMO_NODE, ids[k::3], ["x", "y"], "int8")
        assert _within_bound(data.x[orig[HOMO_NODE][ids[k::3]]], got["x"])
        assert torch.equal(got["y"], data.y[orig[HOMO_NODE][ids[k::3]]])
    assert encoded == [(ids.numel(), 16)]                  # x once, whole; y travels exact
    assert owner._row_codes.nbytes == ids.numel() * (16 + 8)


@pytest.mark.parametrize("tamper, error", [
    (lambda c: dataclasses.replace(c, scale=c.scale.clone().fill_(float("nan"))), QuantisationError),
    (lambda c: dataclasses.replace(c, offset=c.offset.clone().fill_(float("inf"))), QuantisationError),
    (lambda c: dataclasses.replace(c, scale=-c.scale), QuantisationError),
    (lambda c: dataclasses.replace(c, scale=c.scale.double()), QuantisationError),
    (lambda c: dataclasses.replace(c, scale=c.scale[:-1]), QuantisationError),
    (lambda c: dataclasses.replace(c, q=c.q.to(torch.uint8)), QuantisationError),
    (lambda c: dataclasses.replace(c, q=c.q[:, :-1]), QuantisationError),
    (lambda c: dataclasses.replace(c, q=c.q.reshape(-1)), QuantisationError),
    (lambda c: QuantRows(c.q[:-1], c.scale[:-1], c.offset[:-1]), PyGDistError),   # a row short
    (lambda c: "rows", PyGDistError),
])
def test_malformed_int8_chunks_are_refused_typed(tamper, error):
    dst = torch.zeros(10, 6)
    assert check_chunks(3, "x", [_good()], dst, 4, "int8")
    with pytest.raises(error, match="partition 3 answered attribute 'x'"):
        check_chunks(3, "x", [tamper(_good())], dst, 4, "int8")


def test_int8_chunks_only_where_asked_and_quantised():
    with pytest.raises(PyGDistError, match="partition 1 answered attribute 'x'"):
        check_chunks(1, "x", [_good()], torch.zeros(4, 6), 4, "exact")   # not asked for
    with pytest.raises(PyGDistError, match="partition 1 answered attribute 'y'"):
        check_chunks(1, "y", [_good()], torch.zeros(4, 6), 4, "int8")    # labels travel exact
    exact = [torch.zeros(4, 6)]   # an owner may always answer exact (e.g. an older one)
    assert check_chunks(1, "x", exact, torch.zeros(4, 6), 4, "int8") is exact


# --------------------------------------------------------------------------------- lookups in one process
def _homo():
    return synthetic_graph(900, 6, num_features=16, community_size=60, node_time=True, edge_time=True,
                           edge_dim=4, edge_weight=True, seed=5)


def _hetero():
    return synthetic_graph(900, 6, num_features=12, community_size=60, hetero=True, node_time=True,
                           edge_dim=4, seed=6)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return partitioned(tmp_path_factory.mktemp("quant"), {
        "homo": (_homo(), 2, {"method": "random"}), "hetero": (_hetero(), 2, {"method": "random"}),
        "cached": (_homo(), 2, {"method": "metis", "cache_ratio": 0.3})})


def _stores(monkeypatch, root):
    stores = [LocalFeatureStore.from_partition(root, p) for p in range(2)]
    sent: list = []
    simulated_world(monkeypatch, stores, sent)
    return stores, sent


def _lookup(fs, group, ids, names, mode):
    fut = fs.lookup_many_async({group: ids}, {group: names}, remote_rows=mode)
    return fut.wait()[group], fut


@pytest.mark.parametrize("kind", ["homo", "hetero"])
def test_remote_rows_within_bound_and_the_rest_exact(folders, kind, monkeypatch, backend):
    data, root = folders[kind]
    orig = load_original_ids(root)
    (fs, _), sent = _stores(monkeypatch, root)
    gen = torch.Generator().manual_seed(2)
    for group in fs.node_types + fs.edge_types:
        expected = original_attrs(data, group)
        ids = torch.randint(0, orig[group].numel(), (400,), generator=gen)
        remote = fs.book.owner(group, ids) != 0
        sent.clear()
        got, fut = _lookup(fs, group, ids, sorted(expected), "int8")
        assert sent and all(req.remote_rows == "int8" for _, req in sent)
        exact, fut_exact = _lookup(fs, group, ids, sorted(expected), "exact")
        for name, value in expected.items():
            want = value[orig[group][ids]]
            assert torch.equal(exact[name], want), (group, name)
            if not quantised(name, value.dtype, value.shape[1:]):
                assert torch.equal(got[name], want), (group, name)   # y, masks, time, weights: exact
                continue
            assert torch.equal(got[name][~remote], want[~remote]), (group, name)   # local rows bit-exact
            assert _within_bound(want[remote], got[name][remote]), (group, name)
            assert not torch.equal(got[name][remote], want[remote]), (group, name)  # they did travel as int8
        assert 0 < fut.received_bytes < fut_exact.received_bytes


def test_cached_rows_stay_exact_and_bytes_count_the_wire(folders, monkeypatch):
    data, root = folders["cached"]
    orig = load_original_ids(root)
    (fs, _), _ = _stores(monkeypatch, root)
    assert fs.cache is not None
    ids = torch.arange(orig[HOMO_NODE].numel())
    got, fut = _lookup(fs, HOMO_NODE, ids, ["x", "y"], "int8")
    _, fut_exact = _lookup(fs, HOMO_NODE, ids, ["x", "y"], "exact")
    want = data.x[orig[HOMO_NODE][ids]]
    hit_pos = fut.plan.cached[0][0]
    fetched = torch.ones(ids.numel(), dtype=torch.bool)
    fetched[fut.plan.routes[0].local_pos] = False
    fetched[hit_pos] = False
    assert hit_pos.numel() > 0 and int(fetched.sum()) > 0
    assert torch.equal(got["x"][~fetched], want[~fetched])           # local and cached rows: bit-exact
    assert _within_bound(want[fetched], got["x"][fetched]) and not torch.equal(got["x"][fetched], want[fetched])
    assert torch.equal(got["y"], data.y[orig[HOMO_NODE][ids]])
    asked = fut.plan.asked_rows(0)
    assert fut.received_bytes == asked * (16 + 8 + 8)          # x: 16 codes + scale + offset; y: int64
    assert fut_exact.received_bytes == asked * (16 * 4 + 8)


def test_pieces_and_chunks_follow_the_wire_bytes(folders, monkeypatch):
    from pyg_dist.store import serving
    data, root = folders["homo"]
    orig = load_original_ids(root)
    (fs, _), sent = _stores(monkeypatch, root)
    monkeypatch.setattr(serving, "CHUNK_BYTES", 5 * 24)             # 5 int8 rows of 16 values per chunk
    monkeypatch.setenv(REPLY_MAX_ENV, str(40 * 24 / 2 ** 20))        # 40 int8 rows (15 exact) per piece
    ids = fs.book.owned_ids(HOMO_NODE, 1)[:200]
    counts = {}
    for mode in ("exact", "int8"):
        sent.clear()
        got, _ = _lookup(fs, HOMO_NODE, ids.flip(0), ["x"], mode)
        counts[mode] = len(sent)
        assert _within_bound(data.x[orig[HOMO_NODE][ids.flip(0)]], got["x"])
    assert counts == {"exact": 14, "int8": 5}


def test_an_owner_deduplicates_and_refuses_what_int8_cannot_carry(folders, tmp_path, monkeypatch):
    data, root = folders["homo"]
    (_, owner), _ = _stores(monkeypatch, root)
    own = owner.get_global_id()
    req = LookupRequest(1, (FeatureQuery(HOMO_NODE, ("x", "y"), own[[3, 1, 3, 3]]),), remote_rows="int8")
    reply = owner._serve_request(req)
    chunk = reply.values[0]["x"][0]
    assert isinstance(chunk, QuantRows) and chunk.rows == 2 and reply.index[0].tolist() == [1, 0, 1, 1]
    assert isinstance(reply.values[0]["y"][0], torch.Tensor)
    with pytest.raises(PyGDistError, match="wire format 'fp4'"):
        owner._serve_request(dataclasses.replace(req, remote_rows="fp4"))
    # a folder partitioned with allow_nonfinite: int8 refuses the NaN row (naming it), exact serves it
    nan = _homo()
    nan.x[7, 3] = float("nan")
    Partitioner(nan, 2, method="random", allow_nonfinite=True).save(tmp_path / "nan2", progress=False)
    (fs, _), _ = _stores(monkeypatch, tmp_path / "nan2")
    gid = int((load_original_ids(tmp_path / "nan2")[HOMO_NODE] == 7).nonzero())
    part = int(fs.book.owner(HOMO_NODE, torch.tensor([gid])))
    ids = torch.tensor([gid, 0, 1, 2, 3])
    if part == 0:  # ask from the other partition: the row must travel
        (_, fs), _ = _stores(monkeypatch, tmp_path / "nan2")
    with pytest.raises(RemoteCallError, match=f"QuantisationError.*global id {gid} holds NaN"):
        _lookup(fs, HOMO_NODE, ids, ["x"], "int8")
    assert bool(torch.isnan(_lookup(fs, HOMO_NODE, ids, ["x"], "exact")[0]["x"][0, 3]))


@pytest.mark.parametrize("tamper, error", [
    (lambda c: dataclasses.replace(c, scale=c.scale.clone().fill_(float("inf"))), QuantisationError),
    (lambda c: dataclasses.replace(c, q=c.q[:, :3]), QuantisationError),
    (lambda c: QuantRows(c.q[1:], c.scale[1:], c.offset[1:]), PyGDistError),
])
def test_malformed_replies_fail_the_lookup_naming_the_partition(folders, monkeypatch, tamper, error):
    _, root = folders["homo"]
    (fs, owner), _ = _stores(monkeypatch, root)
    honest = owner._serve_request

    def forged(req):
        reply = honest(req)
        values = [{n: [tamper(c) if isinstance(c, QuantRows) else c for c in chunks] for n, chunks in v.items()}
                  for v in reply.values]
        return LookupReply(reply.partition, values, reply.index)
    monkeypatch.setattr(owner, "_serve_request", forged)
    with pytest.raises(error, match="partition 1 answered attribute 'x'"):
        _lookup(fs, HOMO_NODE, owner.get_global_id()[:20], ["x", "y"], "int8")
    assert _lookup(fs, HOMO_NODE, owner.get_global_id()[:20], ["x", "y"], "exact")[0]["x"].shape == (20, 16)


# ------------------------------------------------------------------------------------------------- settings
def test_settings_default_exact_and_are_checked(folders):
    from pyg_dist.loader import dist_base
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler
    from pyg_dist.train.session import TrainConfig
    _, root = folders["homo"]
    gs, fs = LocalGraphStore.from_partition(root, 0), LocalFeatureStore.from_partition(root, 0)
    assert DistNeighborSampler(gs, fs, [2]).remote_rows == "exact"
    assert DistNeighborSampler(gs, fs, [2], remote_rows="int8").remote_rows == "int8"
    with pytest.raises(InvalidArgumentError, match="remote_rows"):
        DistNeighborSampler(gs, fs, [2], remote_rows="int4")
    with pytest.raises(InvalidArgumentError, match="remote_rows"):
        fs.lookup_many_async({HOMO_NODE: torch.tensor([0])}, {HOMO_NODE: ["x"]}, remote_rows=8)
    assert TrainConfig(str(root)).remote_rows == "exact"
    with pytest.raises(InvalidArgumentError, match="remote_rows"):
        TrainConfig(str(root), remote_rows="fp8")
    args = {k: None for k in dist_base.SAMPLER_ARGS}
    args.update(replace=False, subgraph_type="directional", disjoint=False, temporal_strategy="uniform",
                directed=True, concurrency=1)
    for given, config, want in (("auto", "int8", "int8"), ("auto", None, "exact"), ("exact", "int8", "exact"),
                                ("int8", "exact", "int8")):
        env = SimpleNamespace(config=TrainConfig(str(root), remote_rows=config)) if config else (fs, gs)
        sampler = dist_base.make_sampler("DistNeighborLoader", gs, fs, [2], None,
                                         dict(args, remote_rows=given, data=env))
        assert sampler.remote_rows == want, (given, config)


# ---------------------------------------------------------------------------------------- a spawned world
WORLD = dict(num_nodes=700, avg_degree=5, num_features=100, community_size=50, seed=31)


def _world_rank(rank, world_size, root):
    from torch_geometric.sampler import NodeSamplerInput

    from pyg_dist.context import DistContext
    from pyg_dist.sampler.dist_neighbor import DistNeighborSampler, serve_partition
    from pyg_dist.sampler.stats import SamplerStats
    from pyg_dist.store import load_stores
    ctx = DistContext.from_env(num_partitions=world_size)
    data, orig = synthetic_graph(**WORLD), load_original_ids(root)
    gs, fs = load_stores(root, ctx=ctx)
    serve_partition(gs, fs)
    modes = ("exact", "int8")
    attrs = ["x", "y", "train_mask"]
    batch = {m: DistNeighborSampler(gs, fs, [5, 3], node_attrs=attrs, remote_rows=m) for m in modes}
    stats = {m: SamplerStats() for m in modes}
    rows_only = {m: DistNeighborSampler(gs, fs, [1], node_attrs=["x"], stats=stats[m], remote_rows=m) for m in modes}
    gen = torch.Generator().manual_seed(rank)
    report = {}
    with rpc.rpc_session(ctx, timeout=120, call_timeout=60):
        seeds = torch.randperm(WORLD["num_nodes"], generator=gen)[:64]
        out = {m: batch[m].sample_from_nodes(NodeSamplerInput(None, seeds), key=17) for m in modes}
        assert torch.equal(out["exact"].node, out["int8"].node)
        node = out["exact"].node
        fb = {m: out[m].metadata.features.node[HOMO_NODE] for m in modes}
        want = data.x[orig[HOMO_NODE][node]]
        remote = fs.book.owner(HOMO_NODE, node) != ctx.partition
        assert torch.equal(fb["exact"]["x"], want)
        assert torch.equal(fb["int8"]["x"][~remote], want[~remote])                 # local rows bit-exact
        assert _within_bound(want[remote], fb["int8"]["x"][remote])
        assert not torch.equal(fb["int8"]["x"][remote], want[remote])
        for name in ("y", "train_mask"):
            assert torch.equal(fb["int8"][name], fb["exact"][name]), name
            assert torch.equal(fb["int8"][name], getattr(data, name)[orig[HOMO_NODE][node]]), name
        report["remote_rows"] = int(remote.sum())
        ids = torch.randperm(WORLD["num_nodes"], generator=gen)[:400]
        for m in modes:
            rows_only[m].lookup_rows({HOMO_NODE: ids})
        report["bytes"] = {m: stats[m].bytes_received for m in modes}
        report["fetched"] = stats["int8"].feature_rows_remote
    return report


@pytest.mark.timeout(200)
def test_two_rank_world_int8_rows(tmp_path):
    from pyg_dist.testing import spawn_world
    root = tmp_path / "world2"
    Partitioner(synthetic_graph(**WORLD), 2, method="random").save(root, progress=False)
    for rep in spawn_world(2, _world_rank, str(root), timeout=180):
        assert rep["remote_rows"] > 0 and rep["fetched"] > 0
        exact, int8 = rep["bytes"]["exact"], rep["bytes"]["int8"]
        assert exact == rep["fetched"] * 400 and int8 == rep["fetched"] * 108     # each id once, 400 ids distinct
        assert exact / int8 == pytest.approx(400 / 108)                            # 3.7x fewer bytes for x


def test_int8_rows_of_a_bfloat16_folder(tmp_path, monkeypatch):
    """A folder storing bfloat16 features: int8 rows decode into bfloat16 within the bound; local rows exact."""
    data = _homo()
    Partitioner(data, 2, method="random", feature_dtype="bfloat16").save(tmp_path / "bf", progress=False)
    orig = load_original_ids(tmp_path / "bf")
    (fs, _), sent = _stores(monkeypatch, tmp_path / "bf")
    ids = torch.randint(0, data.num_nodes, (300,), generator=torch.Generator().manual_seed(4))
    remote = fs.book.owner(fs.node_types[0], ids) != 0
    got, fut = _lookup(fs, fs.node_types[0], ids, ["x"], "int8")
    exact, fut_exact = _lookup(fs, fs.node_types[0], ids, ["x"], "exact")
    want = data.x.to(torch.bfloat16)[orig[fs.node_types[0]][ids]]
    assert got["x"].dtype == exact["x"].dtype == torch.bfloat16 and torch.equal(exact["x"], want)
    assert torch.equal(got["x"][~remote], want[~remote]) and bool(remote.any())
    assert _within_bound(want[remote], got["x"][remote])
    assert 0 < fut.received_bytes < fut_exact.received_bytes
