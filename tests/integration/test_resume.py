"""Exact resume (issue 15): a 2-rank run killed mid-epoch and resumed ends bit-identical to an
uninterrupted one, by a new torchrun on the checkpoint folder and by torchrun's own elastic restart."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import pyg_dist
from pyg_dist.format import read_meta
from pyg_dist.partition import Partitioner
from pyg_dist.store import load_stores
from pyg_dist.testing import free_port

from .test_examples import EXAMPLES, _env

FAULTS = Path(__file__).resolve().parents[2] / "scripts" / "run_with_faults.py"
EVERY, KILL = 4, 20            # checkpoint every 4 steps; rank 1 dies after step 20 (epoch 2 of 3, 15 per epoch)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume") / "p2"
    data = pyg_dist.synthetic_graph(3000, 8, num_features=16, seed=1)
    Partitioner(data, 2, method="metis").save(root, progress=False)
    return root


def _run(folder, out: Path, name: str, kill_step: int, restarts: int = 0, ckpt: Path = None, rdzv="c10d"):
    shape = ([f"--rdzv-backend={rdzv}", f"--rdzv-endpoint=127.0.0.1:{free_port()}"] if rdzv == "c10d" else
             ["--master-addr=127.0.0.1", f"--master-port={free_port()}"])    # static
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2", *shape,
           f"--max-restarts={restarts}",
           "--monitor-interval=0.1", str(FAULTS), "node_classification", "1", str(kill_step),
           str(out / f"log_{name}"), "--", "--partition-dir", str(folder), "--epochs", "3", "--batch-size", "64",
           "--num-neighbors", "5,3", "--quiet", "--concurrency", "2", "--checkpoint-dir", str(ckpt or out / name),
           "--checkpoint-every", str(EVERY), "--save-model", str(out / f"{name}.pt")]
    env = dict(_env(), PYG_DIST_RPC_PORT=str(free_port()))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=EXAMPLES)


def _seeds_per_epoch(log_dir: Path, upto: dict) -> dict:
    """``{epoch: Counter(seed)}`` over every rank and attempt; attempt ``a`` counts steps ``<= upto[a]``."""
    out: dict = {}
    for path in sorted(log_dir.glob("rank*_a*.txt")):
        attempt = int(path.stem.split("_a")[1])
        for line in path.read_text().splitlines():
            epoch, step, _, _, ids = line.split(" ")
            if int(step) <= upto.get(attempt, 10 ** 9):
                out.setdefault(int(epoch), Counter()).update(int(i) for i in ids.split(","))
    return out


def _train_ids(folder) -> Counter:
    ids = []
    for p in range(read_meta(folder).num_parts):
        _, fs = load_stores(folder, p)
        lo = int(read_meta(folder).node_bounds["_N"][p])
        ids += (fs.get_tensor(group_name=None, attr_name="train_mask").nonzero().view(-1) + lo).tolist()
    return Counter(ids)


def _same_params(a: Path, b: Path) -> None:
    x, y = torch.load(a), torch.load(b)
    assert x.keys() == y.keys()
    assert all(torch.equal(x[k], y[k]) for k in x), {k: float((x[k] - y[k]).abs().max()) for k in x}


@pytest.fixture(scope="module")
def uninterrupted(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    proc = _run(folder, out, "plain", kill_step=0)
    assert proc.returncode == 0, proc.stderr[-4000:]
    seeds = _seeds_per_epoch(out / "log_plain", {})
    train = _train_ids(folder)
    assert sorted(seeds) == [1, 2, 3] and all(seeds[e] == train for e in seeds)  # the oracle: each seed once
    return out / "plain.pt"


@pytest.mark.timeout(400)
def test_killed_run_resumed_by_a_new_torchrun_is_bit_identical(folder, uninterrupted, tmp_path):
    first = _run(folder, tmp_path, "first", kill_step=KILL, ckpt=tmp_path / "ck")
    assert first.returncode != 0 and not (tmp_path / "first.pt").exists()
    done = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert done[-1] == f"step_{KILL:09d}" and len(done) == 2, done        # keep=2, the newest at the kill
    second = _run(folder, tmp_path, "second", kill_step=0, ckpt=tmp_path / "ck")
    assert second.returncode == 0, second.stderr[-4000:]
    assert f"resumed from {tmp_path / 'ck' / f'step_{KILL:09d}'} at epoch 2, batch 5 (step {KILL})" in second.stdout
    _same_params(uninterrupted, tmp_path / "second.pt")
    first_log = _seeds_per_epoch(tmp_path / "log_first", {0: KILL})
    second_log = _seeds_per_epoch(tmp_path / "log_second", {})
    train = _train_ids(folder)
    assert 1 not in second_log and first_log[1] == train                   # epoch 1 done before the kill
    assert first_log[2] + second_log[2] == train                           # the interrupted epoch: once each
    assert 3 not in first_log and second_log[3] == train


@pytest.mark.timeout(400)
@pytest.mark.parametrize("rdzv", ["c10d", "static"])
def test_elastic_restart_resumes_by_itself(folder, uninterrupted, tmp_path, rdzv):
    # torchrun's store outlives the restart: both rendezvous kinds need pyg_dist's per-attempt keys
    proc = _run(folder, tmp_path, "elastic", kill_step=KILL + 2, restarts=1, rdzv=rdzv)  # last checkpoint: 20
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"at epoch 2, batch 5 (step {KILL})" in proc.stdout
    _same_params(uninterrupted, tmp_path / "elastic.pt")
    seeds = _seeds_per_epoch(tmp_path / "log_elastic", {0: KILL})     # steps 21-22 of attempt 0 are redone
    assert all(seeds[e] == _train_ids(folder) for e in (1, 2, 3))


def _example(script, folder, log: Path, kill_step: int, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", "--monitor-interval=0.1", str(FAULTS), script,
           "1", str(kill_step), str(log), "--", "--partition-dir", str(folder), "--epochs", "3", "--quiet", *extra]
    env = dict(_env(), PYG_DIST_RPC_PORT=str(free_port()))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=EXAMPLES)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script,extra", [
    ("embedding_node_classification", ("--sync",)),              # DistEmbedding rows + SparseAdam state saved
    ("link_prediction", ("--batch-size", "128", "--num-neighbors", "4,3")),
])
def test_other_examples_resume_to_the_same_result(folder, tmp_path, script, extra):
    plain = _example(script, folder, tmp_path / "a", 0, *extra)
    assert plain.returncode == 0, plain.stderr[-3000:]
    ck = ("--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "10")
    killed = _example(script, folder, tmp_path / "b", 20, *extra, *ck)
    assert killed.returncode != 0
    resumed = _example(script, folder, tmp_path / "c", 0, *extra, *ck)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(step 20)" in resumed.stdout, resumed.stdout
    final = [ln for ln in plain.stdout.splitlines() if ln.startswith("test_acc=")]
    assert final and final == [ln for ln in resumed.stdout.splitlines() if ln.startswith("test_acc=")]
