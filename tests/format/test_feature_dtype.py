"""Feature precision (``feature_dtype``): a folder stores its features as float32, bfloat16 or float16 (META says
which, digests verify, rows are exactly ``original.to(dtype)``), labels / weights / masks stay exact, float32
folders are unchanged, caches keep the dtype, and distributed batches arrive in the dtype the model asks for."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from pyg_dist.cache.file import read_feature_cache
from pyg_dist.datasets import synthetic_graph
from pyg_dist.errors import InvalidArgumentError, PartitionFormatError
from pyg_dist.format import load_original_ids, load_partition, read_meta
from pyg_dist.format import meta as M
from pyg_dist.format.precision import batch_value, parse_dtype
from pyg_dist.loader.dist_base import batch_dtype
from pyg_dist.partition import Partitioner
from pyg_dist.partition.cli import main
from pyg_dist.partition.ooc.partitioner import OutOfCorePartitioner
from pyg_dist.store import LocalFeatureStore, load_stores
from pyg_dist.testing import spawn_world
from pyg_dist.train.session import TrainConfig

E = ("_N", "_E", "_N")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _graph():
    data = synthetic_graph(400, 6, num_features=8, edge_dim=3, edge_weight=True, node_time=True, seed=3)
    data.score = torch.rand(data.num_nodes, dtype=torch.float64) * 7 + 1e-3  # a float64 feature
    data.y = data.y.float()  # float labels (regression-style) stay exact
    return data


@pytest.fixture(scope="module")
def data():
    return _graph()


@pytest.fixture(scope="module")
def folders(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    for name, dtype in (("none", None), ("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", torch.float16)):
        Partitioner(data, 2, "metis", feature_dtype=dtype, cache_ratio=0.3).save(root / name, progress=False)
    return root


def _node_rows(root, part):
    pd = load_partition(root, part)
    orig = load_original_ids(root)
    return pd, orig["_N"][pd.node_feats["_N"].global_id], orig[E][pd.edge_feats[E].global_id]


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_folder_stores_the_dtype_and_rows_are_the_cast_originals(folders, data, name):
    root, dtype = folders / name, DTYPES[name]
    extra = read_meta(root).extra
    assert extra["feature_dtype"] == name
    assert extra["attr_dtypes"]["node"]["_N"] == {"score": name, "test_mask": "bool", "train_mask": "bool",
                                                  "val_mask": "bool", "x": name, "y": "float32"}
    assert extra["attr_dtypes"]["edge"]["_N___E___N"] == {"edge_attr": name, "edge_weight": "float32"}
    assert main(["--verify", str(root)]) == 0  # every file's size and digest
    for part in range(2):
        pd, on, oe = _node_rows(root, part)
        feats, efeats = pd.node_feats["_N"].feats, pd.edge_feats[E].feats
        assert feats["x"].dtype == dtype and torch.equal(feats["x"], data.x[on].to(dtype))
        assert feats["score"].dtype == dtype and torch.equal(feats["score"], data.score[on].to(dtype))
        assert torch.equal(feats["y"], data.y[on]) and feats["y"].dtype == torch.float32
        assert torch.equal(feats["train_mask"], data.train_mask[on])
        assert torch.equal(pd.node_feats["_N"].time, data.time[on])
        assert torch.equal(efeats["edge_attr"], data.edge_attr[oe].to(dtype))
        assert torch.equal(efeats["edge_weight"], data.edge_weight[oe])  # sampling weights stay exact


def test_float32_folders_are_unchanged(folders, data, tmp_path):
    """An explicit float32 on float32 input writes the very files of no setting (the writer of before):
    same bytes, same fingerprint; META differs only in the new setting."""
    plain = data.clone()
    del plain.score
    a, b = tmp_path / "none", tmp_path / "float32"
    Partitioner(plain, 2, "metis", cache_ratio=0.3).save(a, progress=False)
    Partitioner(plain, 2, "metis", cache_ratio=0.3, feature_dtype=torch.float32).save(b, progress=False)
    ma, mb = read_meta(a).extra, read_meta(b).extra
    assert ma["fingerprint"] == mb["fingerprint"] and ma["files"] == mb["files"]
    for rel in ma["files"]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    assert ma["feature_dtype"] is None and mb["feature_dtype"] == "float32"
    assert ma["attr_dtypes"] == mb["attr_dtypes"] and ma["attr_dtypes"]["node"]["_N"]["x"] == "float32"
    skip = ("feature_dtype", "stats")
    assert {k: v for k, v in ma.items() if k not in skip} == {k: v for k, v in mb.items() if k not in skip}
    # float64 input with float32 asked for is cast; without a setting it stays float64
    assert read_meta(folders / "none").extra["attr_dtypes"]["node"]["_N"]["score"] == "float64"
    assert read_meta(folders / "float32").extra["attr_dtypes"]["node"]["_N"]["score"] == "float32"


def test_old_folders_without_the_record_open_as_before(folders, tmp_path):
    root = shutil.copytree(folders / "none", tmp_path / "old")
    raw = json.loads(M.meta_path(root).read_text())
    del raw["pyg_dist"]["feature_dtype"], raw["pyg_dist"]["attr_dtypes"]
    M.meta_path(root).write_text(json.dumps(raw))
    gs, fs = load_stores(root, 0)
    assert fs.get_tensor(None, "x").dtype == torch.float32


def test_a_file_disagreeing_with_meta_is_refused(folders, tmp_path):
    root = shutil.copytree(folders / "bfloat16", tmp_path / "lied")
    raw = json.loads(M.meta_path(root).read_text())
    raw["pyg_dist"]["attr_dtypes"]["node"]["_N"]["x"] = "float32"
    M.meta_path(root).write_text(json.dumps(raw))
    with pytest.raises(PartitionFormatError, match="node_feats.pt.*'x'.*bfloat16.*float32"):
        load_stores(root, 0)


def test_stores_and_the_folder_cache_keep_the_dtype(folders, data):
    root = folders / "bfloat16"
    entries, _ = read_feature_cache(M.feature_cache_path(root, 0))
    orig = load_original_ids(root)["_N"]
    cached = entries["_N"]
    assert cached.cols["x"].dtype == torch.bfloat16 and cached.cols["y"].dtype == torch.float32
    assert torch.equal(cached.cols["x"], data.x[orig[cached.ids]].to(torch.bfloat16))
    fs = LocalFeatureStore.from_partition(root, 0)
    assert fs.cache is not None and fs.cache.column("_N", "x").dtype == torch.bfloat16  # accepted at open
    own = fs.get_global_id()[:5]
    assert torch.equal(fs.lookup_features(own), data.x[orig[own]].to(torch.bfloat16))
    assert fs.get_tensor(None, "x").element_size() == 2  # half the memory of float32


def test_out_of_core_writes_the_same_cast_rows(data, tmp_path):
    """``random`` is the same assignment in memory and out of core: the same bfloat16 rows and META record."""
    Partitioner(data, 2, "random", feature_dtype="bfloat16").save(tmp_path / "mem", progress=False)
    OutOfCorePartitioner(data, 2, "random", feature_dtype="bfloat16").save(tmp_path / "ooc", progress=False)
    assert read_meta(tmp_path / "ooc").extra["attr_dtypes"] == read_meta(tmp_path / "mem").extra["attr_dtypes"]
    for part in range(2):
        a, b = load_partition(tmp_path / "mem", part), load_partition(tmp_path / "ooc", part)
        for name, col in a.node_feats["_N"].feats.items():
            other = b.node_feats["_N"].feats[name]
            assert col.dtype == other.dtype and torch.equal(col, other)
        assert torch.equal(a.edge_feats[E].feats["edge_attr"], b.edge_feats[E].feats["edge_attr"])
    assert main(["--verify", str(tmp_path / "ooc")]) == 0


def test_pyg_layout_folder_keeps_the_dtype(data, tmp_path):
    """The migration layer's PyG-layout writer: no META record (PyG's keys only), the tensors carry the dtype."""
    from pyg_dist.distributed import Partitioner as PyGPartitioner
    PyGPartitioner(data, 2, str(tmp_path / "pyg"), feature_dtype="bfloat16").generate_partition(progress=False)
    pd = load_partition(tmp_path / "pyg", 0)
    ids = pd.node_feats["_N"].global_id
    assert torch.equal(pd.node_feats["_N"].feats["x"], data.x[ids].to(torch.bfloat16))
    assert torch.equal(pd.node_feats["_N"].feats["y"], data.y[ids])
    gs, fs = load_stores(tmp_path / "pyg", 1)
    assert fs.get_tensor(None, "x").dtype == torch.bfloat16


def test_cli_flag(tmp_path, capsys):
    base = ["--dataset", "synthetic", "--num-nodes", "200", "--edge-dim", "2", "--num-parts", "2", "--quiet"]
    assert main(base + ["--feature-dtype", "float16", "--out", str(tmp_path / "mem")]) == 0
    assert main(base + ["--out-of-core", "--method", "random", "--feature-dtype", "bfloat16",
                        "--out", str(tmp_path / "ooc")]) == 0
    assert read_meta(tmp_path / "mem").extra["attr_dtypes"]["node"]["_N"]["x"] == "float16"
    assert load_partition(tmp_path / "ooc", 1).edge_feats[E].feats["edge_attr"].dtype == torch.bfloat16
    capsys.readouterr()
    assert main(base + ["--feature-dtype", "int8", "--out", str(tmp_path / "bad")]) == 2
    assert "--feature-dtype" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_bad_values_are_typed_errors_naming_the_setting(data, tmp_path):
    for bad in ("int8", torch.int64, 16, "float64"):
        with pytest.raises(InvalidArgumentError, match="Partitioner: argument 'feature_dtype'"):
            Partitioner(data, 2, feature_dtype=bad)
    with pytest.raises(InvalidArgumentError, match="OutOfCorePartitioner: argument 'feature_dtype'"):
        OutOfCorePartitioner(data, 2, "random", feature_dtype="half")
    with pytest.raises(InvalidArgumentError, match="TrainConfig: argument 'feature_dtype'"):
        TrainConfig(str(tmp_path), feature_dtype="int8")
    with pytest.raises(InvalidArgumentError, match="DistNeighborLoader: argument 'feature_dtype'"):
        batch_dtype("DistNeighborLoader", torch.int32, None)
    big = data.clone()
    big.x[17, 2] = 1e6  # finite in float32 and bfloat16, inf in float16
    with pytest.raises(InvalidArgumentError, match=r"feature_dtype.*float16.*\.x: 1 rows overflow.*rows \[17\]"):
        Partitioner(big, 2, feature_dtype="float16")
    Partitioner(big, 2, feature_dtype="bfloat16")  # bfloat16 has float32's range


def test_batch_dtype_defaults_and_the_cast():
    class Env:  # what the loaders read from a DistEnv
        def __init__(self, dtype):
            self.config = TrainConfig("/nowhere", feature_dtype=dtype)
    assert batch_dtype("L", "auto", None) == torch.float32  # a store pair: float32
    assert batch_dtype("L", "auto", Env("bfloat16")) == torch.bfloat16 and batch_dtype("L", "auto", Env(None)) is None
    assert batch_dtype("L", None, Env(torch.float16)) is None and batch_dtype("L", "float64", None) == torch.float64
    assert TrainConfig("/nowhere").feature_dtype == torch.float32
    x = torch.ones(2, 2, dtype=torch.bfloat16)
    assert batch_value("x", x, torch.float32).dtype == torch.float32
    assert batch_value("x", x, None) is x and batch_value("y", x, torch.float32) is x
    same = torch.ones(2)
    assert batch_value("x", same, torch.float32) is same  # float32 rows: not copied, bit-identical
    assert parse_dtype("P", "feature_dtype", "torch.bfloat16") == torch.bfloat16


# ------------------------------------------------------------------------------------ distributed batches
def _batches_rank(rank, world_size, root):
    from pyg_dist.loader.dist_link_loader import DistLinkNeighborLoader
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import dist_session

    data, bf = _graph(), torch.bfloat16
    orig = load_original_ids(root)
    out = {"remote": 0}
    # the run keeps the stored dtype (None); a loader asks for float32; a runtime cache is filled over RPC
    with dist_session(TrainConfig(root, timeout=60, feature_dtype=None, cache_ratio=0.3)) as env:
        own = env.feature_store.get_global_id()
        for label, kwargs in (("stored", {}), ("float32", {"feature_dtype": torch.float32})):
            loader = DistNeighborLoader(env, [4, 3], input_nodes="train_mask", batch_size=32, seed=0, **kwargs)
            ok, dtypes = True, set()
            try:
                for batch in loader:
                    on, oe = orig["_N"][batch.n_id], orig[E][batch.e_id]
                    want = data.x[on].to(bf).to(batch.x.dtype)
                    ok &= torch.equal(batch.x, want) and torch.equal(batch.y, data.y[on])
                    ok &= torch.equal(batch.edge_attr, data.edge_attr[oe].to(bf).to(batch.edge_attr.dtype))
                    dtypes |= {batch.x.dtype, batch.edge_attr.dtype}
                    out["remote"] += int((~torch.isin(batch.n_id, own)).sum())
            finally:
                loader.shutdown()
            out[label] = (ok, sorted(map(str, dtypes)))
        link = DistLinkNeighborLoader(env, [3], batch_size=64, neg_sampling="binary", seed=0)
        try:
            batch = next(iter(link))
            on, oe = orig["_N"][batch.n_id], orig[E][batch.e_id]
            out["link"] = (torch.equal(batch.x, data.x[on].to(bf)) and torch.equal(batch.edge_attr,
                                                                                   data.edge_attr[oe].to(bf)),
                           str(batch.x.dtype))
        finally:
            link.shutdown()
    return out


@pytest.mark.timeout(200)
def test_distributed_batches_arrive_in_the_asked_dtype(folders):
    res = spawn_world(2, _batches_rank, str(folders / "bfloat16"), timeout=180)
    for out in res:
        assert out["stored"] == (True, ["torch.bfloat16"])
        assert out["float32"] == (True, ["torch.float32"])
        assert out["link"] == (True, "torch.bfloat16")
        assert out["remote"] > 0  # rows of the other partition came over RPC (or the cache) in bfloat16


def _workers_rank(rank, world_size, root):
    """Sampler workers (spawned) build the batches; the cache is filled through the process group (gloo)."""
    from pyg_dist.loader.dist_node_loader import DistNeighborLoader
    from pyg_dist.train.session import dist_session

    data, orig = _graph(), load_original_ids(root)
    with dist_session(TrainConfig(root, timeout=60, num_workers=1, cache_ratio=0.3)) as env:
        loader = DistNeighborLoader(env, [4, 3], input_nodes="train_mask", batch_size=32, seed=0, num_workers=1,
                                    multiprocessing_context="spawn")
        ok, dtypes = True, set()
        try:
            for batch in loader:
                ok &= torch.equal(batch.x, data.x[orig["_N"][batch.n_id]].to(torch.bfloat16).float())
                dtypes.add(str(batch.x.dtype))
        finally:
            loader.shutdown()
        return ok, sorted(dtypes), str(env.feature_store.cache.column("_N", "x").dtype)


@pytest.mark.timeout(200)
def test_workers_and_the_collective_cache_fill_keep_the_dtype(folders):
    res = spawn_world(2, _workers_rank, str(folders / "bfloat16"), timeout=180)
    assert res == [(True, ["torch.float32"], "torch.bfloat16")] * 2
