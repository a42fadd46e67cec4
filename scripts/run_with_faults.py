"""Runs an example's ``main`` (under torchrun) with a fault injected and every trained batch's seeds logged.

    python -m torch.distributed.run ... run_with_faults.py SCRIPT KILL_RANK KILL_STEP LOG_DIR -- ARGS...

* After optimizer step ``KILL_STEP`` (counted by the run's ``Checkpointer``; a checkpoint due at that step
  is written first), rank ``KILL_RANK`` SIGKILLs itself, in the first attempt only
  (``TORCHELASTIC_RESTART_COUNT`` 0): a restarted group runs to the end. ``KILL_STEP`` 0: no fault.
  ``KILL_STEP`` may also name a phase: ``balance`` (as the loaders agree on seeds: a collective) or
  ``shutdown`` (entering ``dist_session``'s teardown), SIGKILL there, or ``stop-balance`` /
  ``stop-shutdown``: SIGSTOP there (a hung process; whoever injects it sends SIGCONT later), or ``raise``:
  a typed error (``CheckpointError``, "No space left on device") after step 5, the way an ordinary failure ends.
* ``LOG_DIR/rank<r>_a<attempt>.txt`` gets one line per trained batch: ``epoch step unix_time
  save_seconds id,id,...`` (``save_seconds``: the checkpoint written at that step, 0 if none; then the
  batch's seed ids, global). ``LOG_DIR/rank<r>_a<attempt>.pid`` holds the rank's pid.

Used by ``tests/integration/test_resume.py`` and ``scripts/bench_faults.py``.
"""
from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "distributed"
#: ``KILL_STEP`` that makes rank ``KILL_RANK`` raise a typed error (CheckpointError) after step RAISE_STEP instead.
RAISE, RAISE_STEP = "raise", 5
sys.path.insert(0, str(EXAMPLES))


def main() -> None:
    script, kill_rank, kill_step, log_dir, sep, *rest = sys.argv[1:]
    if sep != "--":
        raise SystemExit("usage: run_with_faults.py SCRIPT KILL_RANK KILL_STEP LOG_DIR -- ARGS...")
    from pyg_dist.train.checkpoint import Checkpointer
    module = importlib.import_module(script)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    last = {}
    original_steps, original_step = getattr(module, "steps", None), Checkpointer.step

    def steps(loader, *args, **kwargs):
        bar, batches = original_steps(loader, *args, **kwargs)

        def remembered():
            for batch in batches:
                if hasattr(batch, "batch_size"):  # node batches (link batches: their edges are the seeds)
                    last["seeds"] = batch.n_id[:batch.batch_size]
                yield batch
        return bar, remembered()

    def step(self):
        start = time.perf_counter()
        wrote = original_step(self)
        took = time.perf_counter() - start if wrote else 0.0
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(log_dir) / f"rank{self.rank}_a{attempt}.txt", "a") as f:
            ids = ",".join(map(str, last["seeds"].tolist())) if "seeds" in last else "-"
            f.write(f"{self.epoch} {self.global_step} {time.time():.3f} {took:.4f} {ids}\n")
        kinds = Path(log_dir) / f"rank{self.rank}_a{attempt}.listeners.json"
        if not kinds.exists():  # what this rank listens on, by kind (bench_faults' junk rows aim at them)
            import json

            from pyg_dist.iface import listener_kinds
            kinds.write_text(json.dumps(listener_kinds()))
        if kill_step.isdigit() and self.global_step == int(kill_step) and self.rank == int(kill_rank) \
                and attempt == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        if kill_step == RAISE and self.global_step == RAISE_STEP and self.rank == int(kill_rank) and attempt == "0":
            from pyg_dist.errors import CheckpointError
            raise CheckpointError(f"cannot write {log_dir}/step_{RAISE_STEP}: No space left on device (injected)")
        return wrote

    if not kill_step.isdigit() and kill_step != RAISE and os.environ.get("RANK") == kill_rank and attempt == "0":
        _fault_at_phase(kill_step)

    if original_steps is not None:  # the examples that iterate through common.steps: seeds are logged
        module.steps = steps
    Checkpointer.step = step
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    (Path(log_dir) / f"rank{os.environ.get('RANK', '0')}_a{attempt}.pid").write_text(str(os.getpid()))
    from pyg_dist.train.entry import run_main
    run_main(module.main, rest)


def _fault_at_phase(what: str) -> None:
    """Wraps the phase's function so that this process SIGKILLs (or SIGSTOPs) itself on entering it."""
    import pyg_dist.loader.dist_node_loader as node_loader
    import pyg_dist.train.session as train
    sig = signal.SIGSTOP if what.startswith("stop-") else signal.SIGKILL
    phase = what[len("stop-"):] if what.startswith("stop-") else what
    owner, name = {"balance": (node_loader, "balance_seeds"), "shutdown": (train, "teardown")}[phase]
    original = getattr(owner, name)

    def faulty(*args, **kwargs):
        os.kill(os.getpid(), sig)
        return original(*args, **kwargs)
    setattr(owner, name, faulty)


if __name__ == "__main__":
    main()
