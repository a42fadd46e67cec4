"""pyg_dist.train.checkpoint: exact resume in one process (the 2-rank torchrun oracle is
tests/integration/test_resume.py), atomic writes under SIGKILL, pruning, typed errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import pyg_dist
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.loader.epoch import KeyedBatchSampler
from pyg_dist.train.checkpoint import Checkpointer, CheckpointError

EPOCHS, EVERY = 3, 3


@pytest.fixture(scope="module")
def data():
    return pyg_dist.synthetic_graph(400, 6, num_features=8, num_classes=4, community_size=50, seed=5)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = SAGEConv(8, 16), SAGEConv(16, 4)

    def forward(self, x, edge_index):
        return self.b(F.dropout(self.a(x, edge_index).relu(), 0.5, self.training), edge_index)  # uses the RNG


def _parts(data, directory, every=EVERY, keep=2):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.5)
    loader = pyg_dist.NeighborLoader(data, [4, 3], input_nodes=data.train_mask, batch_size=32, shuffle=True)
    ckpt = Checkpointer(directory, model=model, optimizer=opt, scheduler=sched, loaders={"train": loader},
                        every_steps=every, keep=keep)
    return model, opt, sched, loader, ckpt


def _job(data, directory, stop_after=None, every=EVERY, keep=2):
    """Trains EPOCHS epochs (resuming from ``directory``), stopping after global step ``stop_after``.
    Returns (model, seeds per epoch, checkpointer)."""
    model, opt, sched, loader, ckpt = _parts(data, directory, every, keep)
    ckpt.resume()
    seeds: dict = {}
    for epoch in ckpt.epochs(EPOCHS, loader):
        for batch in loader:
            opt.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size], batch.y[:batch.batch_size]).backward()
            opt.step()
            sched.step()
            seeds.setdefault(epoch, Counter()).update(batch.n_id[:batch.batch_size].tolist())
            ckpt.step()
            if ckpt.global_step == stop_after:
                return model, seeds, ckpt
    return model, seeds, ckpt


def test_resume_is_bit_identical_and_uses_every_seed_once(data, tmp_path):
    plain, plain_seeds, _ = _job(data, None)
    train = Counter(data.train_mask.nonzero().view(-1).tolist())
    assert all(plain_seeds[e] == train for e in range(1, EPOCHS + 1))
    _, first, ckpt = _job(data, tmp_path, stop_after=14)       # 14 = checkpoint 12 + 2 lost steps
    per_epoch = ckpt.loaders["train"].batch_plan.__len__()
    resumed, second, again = _job(data, tmp_path)
    assert again.resumed_from == tmp_path / "step_000000012" and again.global_step == per_epoch * EPOCHS
    for name, p in plain.named_parameters():
        assert torch.equal(p, dict(resumed.named_parameters())[name]), name
    # the steps of the first run after its last checkpoint (13, 14) were trained again, not lost
    e, b = divmod(12, per_epoch)
    kept = Counter()
    for epoch, counter in first.items():
        kept += counter if epoch <= e else Counter()
    if b:  # the interrupted epoch: what the first run trained before step 12, then the resumed run's batches
        loader = again.loaders["train"]
        order = loader.batch_plan.order(e + 1).tolist()
        done = Counter(data.train_mask.nonzero().view(-1)[order[:b * 32]].tolist())
        assert done + second[e + 1] == train
    assert all(second[x] == train for x in second if x > e + 1)


def test_keyed_batches_resume_at_any_batch():
    plan = KeyedBatchSampler(50, 8, shuffle=True, drop_last=False, seed=3, rank=1)
    epochs = [list(plan) for _ in range(3)]
    again = KeyedBatchSampler(50, 8, shuffle=True, drop_last=False, seed=3, rank=1)
    again.epoch, again.start = 1, 4                       # what set_epoch(2, 4) does
    assert list(again) == epochs[1][4:] and list(again) == epochs[2]


def test_pruning_keeps_the_last_complete_checkpoints(data, tmp_path):
    _job(data, tmp_path, stop_after=10, every=2, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000000006", "step_000000008", "step_000000010"]
    assert {p.name for p in (tmp_path / "step_000000010").iterdir()} == {"rank_0.pt", "rank_0.done"}


_KILLED_WRITER = """
import os, signal, sys, torch
sys.path.insert(0, {tests!r})
from train.test_checkpoint import _job
import pyg_dist, pyg_dist.train.checkpoint as ck
data = pyg_dist.synthetic_graph(400, 6, num_features=8, num_classes=4, community_size=50, seed=5)
real = torch.save
def dying(obj, f, *a, **k):  # the checkpoint of step 6 dies half-way through its rank file
    if isinstance(obj, dict) and obj.get("position", {{}}).get("global_step") == 6:
        f.write(b"half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real(obj, f, *a, **k)
ck.torch.save = dying
_job(data, {directory!r})
"""


def test_a_kill_during_a_write_leaves_the_previous_checkpoint(data, tmp_path):
    script = _KILLED_WRITER.format(tests=str(Path(__file__).resolve().parents[1]), directory=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    half = tmp_path / "step_000000006"
    assert [p.name for p in half.iterdir() if not p.name.startswith(".")] == [], list(half.iterdir())  # temp only
    fresh = _parts(data, tmp_path)[-1]
    assert fresh.resume() and fresh.resumed_from == tmp_path / "step_000000003"   # the one before
    fresh.global_step = 7
    fresh.save()                                   # the next write removes the half-written folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000000003", "step_000000007"]


def test_time_based_checkpoints_are_planned_from_the_step_rate(tmp_path):
    import time
    ckpt = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2), every_seconds=0.15, keep=10)
    wrote = []
    for step in range(1, 61):
        time.sleep(0.01)                                   # ~0.15 s = ~15 steps between writes
        if ckpt.step():
            wrote.append(step)
    gaps = [b - a for a, b in zip([0] + wrote, wrote)]
    assert 3 <= len(wrote) <= 5 and all(10 <= g <= 16 for g in gaps), wrote   # never before 10 steps (planning)
    assert sorted(int(p.name[5:]) for p in tmp_path.iterdir()) == wrote


def test_errors_are_typed(data, tmp_path):
    with pytest.raises(InvalidArgumentError, match="'every_steps' got 0"):
        Checkpointer(tmp_path, every_steps=0)
    with pytest.raises(InvalidArgumentError, match="'keep' got 0"):
        Checkpointer(tmp_path, keep=0)
    with pytest.raises(InvalidArgumentError, match=r"'loaders\['x'\]' got 'list'"):
        Checkpointer(tmp_path, loaders={"x": []})
    with pytest.raises(InvalidArgumentError, match=r"'extra\['e'\]' got 'int'"):
        Checkpointer(tmp_path, extra={"e": 3})
    with pytest.raises(CheckpointError, match="no directory"):
        Checkpointer(None).save()
    with pytest.raises(InvalidArgumentError, match="'checkpoint_every' got -1|'every_steps' got -1"):
        pyg_dist.TrainConfig("/tmp/x", checkpoint_dir=str(tmp_path), checkpoint_every=-1)
    loader = pyg_dist.NeighborLoader(data, [2], input_nodes=data.train_mask, batch_size=32)
    with pytest.raises(InvalidArgumentError, match="'start_batch' got 99"):
        loader.set_epoch(1, 99)
    with pytest.raises(InvalidArgumentError, match="'epoch' got 0"):
        loader.set_epoch(0)
    other = pyg_dist.NeighborLoader(data, [2], input_nodes=data.train_mask, batch_size=16)
    with pytest.raises(InvalidArgumentError, match="batches per epoch"):
        other.load_state_dict(loader.state_dict())
    ckpt = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2), every_steps=1)
    ckpt.step()
    marker = torch.load(tmp_path / "step_000000001" / "rank_0.done", weights_only=True)
    torch.save(dict(marker, world_size=4), tmp_path / "step_000000001" / "rank_0.done")
    with pytest.raises(CheckpointError, match="step_000000001 was written by 4 ranks but this run has 1: start the "
                       "job with 4 ranks to resume from it, or point the run at a new checkpoint directory"):
        Checkpointer(tmp_path, model=torch.nn.Linear(2, 2)).resume()
    state = torch.load(tmp_path / "step_000000001" / "rank_0.pt", weights_only=True)   # an older checkpoint: its
    torch.save(dict(state, world_size=4), tmp_path / "step_000000001" / "rank_0.pt")    # marker has no world size
    torch.save({"step": 1}, tmp_path / "step_000000001" / "rank_0.done")
    with pytest.raises(CheckpointError, match="written by 4 ranks, resumed by 1"):
        Checkpointer(tmp_path, model=torch.nn.Linear(2, 2)).resume()


def test_a_truncated_newest_checkpoint_falls_back_to_the_older_one(data, tmp_path, caplog):
    ckpt = _parts(data, tmp_path)[-1]
    for step in (3, 6):
        ckpt.global_step = step
        ckpt.save()
    newest = tmp_path / "step_000000006" / "rank_0.pt"
    newest.write_bytes(newest.read_bytes()[:200])          # a disk that filled up, a copy cut short
    fresh = _parts(data, tmp_path)[-1]
    with caplog.at_level("WARNING", logger="pyg_dist"):
        assert fresh.resume()
    assert fresh.resumed_from == tmp_path / "step_000000003" and fresh.global_step == 3
    assert any("skipping checkpoint" in r.message and "rank_0.pt" in r.message for r in caplog.records)
    (tmp_path / "step_000000003" / "rank_0.pt").write_bytes(b"junk")
    assert not _parts(data, tmp_path)[-1].resume()        # nothing readable left: a fresh start, not a crash


def test_a_failed_write_is_typed_and_leaves_no_temp_file(tmp_path):
    from pyg_dist.train.checkpoint import _atomic_save
    with pytest.raises(CheckpointError, match=r"writing .*state.pt failed: .*(pickle|Pickl)"):
        _atomic_save({"fn": lambda: 0}, tmp_path / "state.pt")  # fails half-way through the write
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_a_checkpoint_error_with_the_bytes_and_keeps_the_old_file(tmp_path, monkeypatch):
    import errno

    from pyg_dist import _fsio
    from pyg_dist.train.checkpoint import _atomic_save
    synced = []
    real_fsync_dir = _fsio.fsync_dir
    monkeypatch.setattr(_fsio, "fsync_dir", lambda path: (synced.append(Path(path)), real_fsync_dir(path)))
    _atomic_save({"w": torch.ones(3)}, tmp_path / "state.pt")
    assert synced == [tmp_path]                                    # the rename itself is durable

    def full(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match=r"^writing .*state.pt failed: No space left on device \(needs 4000 "
                       r"bytes, .* free on that filesystem\)$"):
        _atomic_save({"w": torch.zeros(1000)}, tmp_path / "state.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]   # no temp file
    assert torch.equal(torch.load(tmp_path / "state.pt", weights_only=True)["w"], torch.ones(3))
