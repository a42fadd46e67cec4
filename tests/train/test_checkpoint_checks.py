"""What a resume checks (pyg_dist.train.checkpoint): rank files against the digests in their markers, the world
size that wrote a checkpoint, the model it holds, DDP replicas equal after loading; the folder is writable
at start-up. Multi-rank cases run on 2 (and 4) spawned ranks with a DDP GraphSAGE on the built-in generator."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import pyg_dist
from pyg_dist.errors import CheckpointError, InvalidArgumentError
from pyg_dist.testing import spawn_world
from pyg_dist.train.checkpoint import Checkpointer

EVERY = 3


def _data():
    return pyg_dist.synthetic_graph(300, 5, num_features=8, num_classes=4, community_size=50, seed=7)


class Net(torch.nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        from torch_geometric.nn import SAGEConv
        self.a, self.b = SAGEConv(8, hidden), SAGEConv(hidden, 4)

    def forward(self, x, edge_index):
        return self.b(F.dropout(self.a(x, edge_index).relu(), 0.5, self.training), edge_index)


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelname, record.getMessage()))


def _train_rank(rank, world, directory, steps, hidden=16):
    """Resumes from ``directory`` (a DDP model), then trains to global step ``steps``, a checkpoint every
    EVERY steps. Returns what it resumed from, the parameters right after resuming, those at each checkpoint,
    its pyg_dist log lines, or the text of the CheckpointError that stopped it."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    keep = _Keep()
    logging.getLogger("pyg_dist").addHandler(keep)
    logging.getLogger("pyg_dist").setLevel(logging.INFO)
    data = _data()
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(hidden))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    try:
        ckpt = Checkpointer(directory, model=model, optimizer=opt, every_steps=EVERY, keep=3)
        ckpt.resume()
    except CheckpointError as exc:
        return {"error": str(exc), "logs": keep.lines}
    after = {k: v.clone() for k, v in model.module.state_dict().items()}
    saved = {}
    seeds = torch.arange(rank, data.num_nodes, world)
    while ckpt.global_step < steps:
        batch = seeds[(ckpt.global_step * 16) % len(seeds):][:16]
        opt.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[batch], data.y[batch]).backward()
        opt.step()
        if ckpt.step():
            saved[ckpt.global_step] = {k: v.clone() for k, v in model.module.state_dict().items()}
    # The group is left to the rank's exit (os._exit: no destructors). Destroyed here, the last reference to gloo's
    # group goes with the DDP model when this frame ends, and its destructor joins gloo's worker threads while
    # holding the GIL; a worker still releasing the last collective's Python tensors waits for the GIL: a deadlock
    # (seen in 2 of 13 runs, py-spy: ~ProcessGroupGloo -> std::thread::join beside ~AsyncAllgatherWork).
    return {"resumed_from": ckpt.resumed_from and ckpt.resumed_from.name, "after": after, "saved": saved,
            "logs": keep.lines}


def _flip_4_bytes(path: Path) -> None:
    """Flips 4 bytes inside the data of the file's first model tensor: torch.load still reads the file."""
    state = torch.load(path, weights_only=True)
    tensor = next(t for t in state["model"].values() if t.numel() >= 16)
    blob = bytearray(path.read_bytes())
    at = blob.find(tensor.numpy().tobytes()[:64])
    assert at > 0 and blob.find(tensor.numpy().tobytes()[:64], at + 1) < 0
    blob[at + 8:at + 12] = bytes(b ^ 0x10 for b in blob[at + 8:at + 12])
    path.write_bytes(bytes(blob))
    assert torch.load(path, weights_only=True)["model"].keys() == state["model"].keys()   # still loadable


def _legacy_markers(directory: Path) -> None:
    """What the markers of checkpoints written before digests and world sizes look like."""
    for marker in directory.glob("step_*/rank_*.done"):
        torch.save({"step": int(marker.parent.name[5:])}, marker)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A 2-rank checkpoint folder with steps 3 and 6, and the parameters at each (the oracle)."""
    directory = tmp_path_factory.mktemp("ck2")
    res = spawn_world(2, _train_rank, str(directory), 6, timeout=120)
    assert _equal(res[0]["saved"][3], res[1]["saved"][3])                    # DDP: the replicas are equal
    assert sorted(p.name for p in directory.iterdir()) == ["step_000000003", "step_000000006"]
    return directory, res[0]["saved"]


def _copy(written, tmp_path) -> Path:
    shutil.copytree(written[0], tmp_path / "ck")
    return tmp_path / "ck"


@pytest.mark.timeout(200)
def test_4_bytes_flipped_in_rank_1s_newest_file_fall_back_to_the_older_step(written, tmp_path):
    directory = _copy(written, tmp_path)
    _flip_4_bytes(directory / "step_000000006" / "rank_1.pt")
    res = spawn_world(2, _train_rank, str(directory), 6, timeout=120)
    for rank, out in enumerate(res):
        assert out["resumed_from"] == "step_000000003", out
        assert _equal(out["after"], written[1][3])                           # the older step's parameters
        warnings = [text for level, text in out["logs"] if level == "WARNING"]
        assert len(warnings) == 1, out["logs"]
        assert (f"rank {rank}: skipping checkpoint" in warnings[0] and "rank 1:" in warnings[0]
                and "step_000000006/rank_1.pt: content differs from the crc32 digest in rank_1.done" in warnings[0]
                ), warnings
    assert _equal(res[0]["saved"][6], res[1]["saved"][6]) and _equal(res[0]["saved"][6], written[1][6])


@pytest.mark.timeout(300)
def test_old_markers_resume_unchecked_and_replicas_that_differ_stop_every_rank(written, tmp_path):
    directory = _copy(written, tmp_path)
    _legacy_markers(directory)                                               # no digests, no world size
    res = spawn_world(2, _train_rank, str(directory), 6, timeout=120)
    for out in res:                                                          # still readable: one INFO line
        assert out["resumed_from"] == "step_000000006" and _equal(out["after"], written[1][6])
        assert sum("predates the world size and digest" in text for _, text in out["logs"]) == 1, out["logs"]
    _flip_4_bytes(directory / "step_000000006" / "rank_1.pt")                # now nothing catches it but DDP
    res = spawn_world(2, _train_rank, str(directory), 6, timeout=120)
    for out in res:
        assert "error" in out, out
        assert (f"after resuming from {directory / 'step_000000006'}, the model and optimizer state of ranks [1] "
                "differs from rank 0's" in out["error"]), out["error"]


@pytest.mark.timeout(300)
def test_another_world_size_is_a_checkpoint_error_both_ways(written, tmp_path):
    directory = _copy(written, tmp_path)
    res = spawn_world(4, _train_rank, str(directory), 6, timeout=150)       # 2 -> 4: was a silent fresh start
    for out in res:
        assert "error" in out, {k: v for k, v in out.items() if k != "saved"}
        assert (f"{directory / 'step_000000006'} was written by 2 ranks but this run has 4: start the job with 2 "
                "ranks to resume from it, or point the run at a new checkpoint directory" in out["error"]), out
    _legacy_markers(directory)                # written before markers recorded world sizes: not refused, not silent
    res = spawn_world(4, _train_rank, str(directory), 0, timeout=150)
    for out in res:
        assert out["resumed_from"] is None, out
        warnings = [text for level, text in out["logs"] if level == "WARNING"]
        assert len(warnings) == 1 and "starting afresh" in warnings[0], out["logs"]
        assert "(steps by rank: {0: [3, 6], 1: [3, 6], 2: [], 3: []})" in warnings[0], warnings
    four = tmp_path / "ck4"
    spawn_world(4, _train_rank, str(four), 3, timeout=150)
    res = spawn_world(2, _train_rank, str(four), 6, timeout=120)            # 4 -> 2
    for out in res:
        assert "written by 4 ranks but this run has 2: start the job with 4 ranks" in out.get("error", ""), out


@pytest.mark.timeout(200)
def test_another_models_checkpoint_names_the_file_and_the_first_parameter(written, tmp_path):
    directory = _copy(written, tmp_path)
    res = spawn_world(2, _train_rank, str(directory), 6, 32, timeout=120)
    for out in res:
        errors = out.get("error", "").split("; rank ")
        assert len(errors) == 2, out                                         # both ranks' files, on every rank
        for rank, text in enumerate(errors):
            assert (f"{directory / 'step_000000006' / f'rank_{rank}.pt'} holds the checkpoint of another model: "
                    "parameter 'module.a.lin_l.weight' has shape [16, 8] in the file, [32, 8] in the model"
                    in text), text


_READ_ONLY = """
import sys
from pyg_dist.train.checkpoint import Checkpointer
import torch
try:
    ckpt = Checkpointer({directory!r}, model=torch.nn.Linear(2, 2), every_steps=1)
except Exception as exc:
    print("init", type(exc).__name__, exc); sys.exit()
try:
    ckpt.step()
except Exception as exc:
    print("step", type(exc).__name__, exc); sys.exit()
print("no error")
"""


def _read_only_run(directory: Path) -> str:
    """Runs _READ_ONLY in a child that sees ``directory`` read-only: a read-only bind mount in a user namespace
    (EROFS, what a read-only volume gives), or, for a user that is not root, a folder without write permission."""
    code = [sys.executable, "-c", textwrap.dedent(_READ_ONLY.format(directory=str(directory)))]
    if shutil.which("unshare"):
        mount = f"mount --bind {directory} {directory} && mount -o remount,bind,ro {directory} && exec \"$@\""
        cmd = ["unshare", "-rm", "sh", "-c", mount, "sh", *code]
        if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr[-2000:]
            return proc.stdout
    if os.geteuid() == 0:
        pytest.skip("no user namespaces to mount a read-only folder, and root ignores permissions")
    directory.chmod(0o555)
    try:
        return subprocess.run(code, capture_output=True, text=True, timeout=120).stdout
    finally:
        directory.chmod(0o755)


@pytest.mark.timeout(150)
def test_a_read_only_folder_is_a_checkpoint_error_at_start_up(tmp_path):
    out = _read_only_run(tmp_path)
    assert out.startswith(f"init CheckpointError Checkpointer: the checkpoint folder {tmp_path} is not writable ("), out
    assert "Read-only file system" in out or "Permission denied" in out, out
    assert list(tmp_path.iterdir()) == []


def test_the_folder_is_created_and_replicated_is_checked(tmp_path):
    Checkpointer(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []   # no probe left
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match=f"folder {tmp_path / 'file' / 'c'} is not writable"):
        Checkpointer(tmp_path / "file" / "c")
    with pytest.raises(InvalidArgumentError, match="'replicated' got 'yes'"):
        Checkpointer(tmp_path, replicated="yes")
    assert not Checkpointer(tmp_path, model=torch.nn.Linear(2, 2)).replicated       # not DDP: not compared


def test_another_optimizer_is_a_checkpoint_error_naming_the_file(tmp_path):
    model = torch.nn.Linear(2, 2)
    ckpt = Checkpointer(tmp_path, model=model, optimizer=torch.optim.Adam(model.parameters()), every_steps=1)
    ckpt.step()
    other = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam([{"params": [other.weight]}, {"params": [other.bias]}])
    with pytest.raises(CheckpointError, match=r"rank_0.pt: its optimizer state does not fit this run's optimizer "
                       r"\(loaded state dict has a different number of parameter groups\)"):
        Checkpointer(tmp_path, model=other, optimizer=opt).resume()


def test_an_unreadable_marker_skips_its_step(tmp_path, caplog):
    ckpt = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2))
    for step in (3, 6):
        ckpt.global_step = step
        ckpt.save()
    (tmp_path / "step_000000006" / "rank_0.done").write_bytes(b"junk")
    fresh = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2))
    with caplog.at_level("WARNING", logger="pyg_dist"):
        assert fresh.resume() and fresh.global_step == 3
    assert any("step_000000006/rank_0.done is unreadable or names another step" in r.message
               for r in caplog.records), caplog.records


class _Table:
    """An extra with ``save(folder)`` / ``load(folder)`` like DistEmbedding: one file per partition."""

    def __init__(self, value: float, partition: int = 0):
        self.rows, self.partition = torch.full((64, 4), value), partition

    def save(self, folder) -> None:
        torch.save(self.rows, Path(folder) / f"table.part_{self.partition}.pt")

    def load(self, folder) -> None:
        self.rows = torch.load(Path(folder) / f"table.part_{self.partition}.pt", weights_only=True)


def test_a_flipped_extra_file_falls_back_to_the_older_step(tmp_path, caplog):
    ckpt = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2), extra={"table": _Table(0.0)})
    for step in (3, 6):
        ckpt.global_step, ckpt.extra["table"].rows = step, torch.full((64, 4), float(step))
        ckpt.save()
    extra = tmp_path / "step_000000006" / "extra" / "table.part_0.pt"
    assert sorted(p.name for p in extra.parent.iterdir()) == ["table.part_0.pt"]      # no private folder left
    raw = bytearray(extra.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 4] = bytes(b ^ 0xFF for b in raw[len(raw) // 2: len(raw) // 2 + 4])
    extra.write_bytes(bytes(raw))
    fresh = Checkpointer(tmp_path, model=torch.nn.Linear(2, 2), extra={"table": _Table(-1.0)})
    with caplog.at_level("WARNING", logger="pyg_dist"):
        assert fresh.resume() and fresh.global_step == 3
    assert torch.equal(fresh.extra["table"].rows, torch.full((64, 4), 3.0))         # the older step's rows
    assert any("table.part_0.pt" in r.message and "corrupt, truncated or altered" in r.message
               for r in caplog.records), [r.message for r in caplog.records]
