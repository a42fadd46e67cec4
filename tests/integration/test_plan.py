"""``pyg-dist-plan`` end to end at a tiny scale: calibration runs, the plan table, JSON, chart, and ``--check``
running the real job (its batch counts are the predicted ones; its seconds are compared, not asserted)."""
import json
import math
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

SMALL = ["--dataset", "synthetic", "--num-neighbors", "4,3", "--batch-size", "64", "--hidden", "16",
         "--replay-batches", "4", "--machines", "1", "2", "4", "--cores", "8"]


def _plan(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "pyg_dist.plan.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(900)
def test_plan_calibrates_predicts_and_checks(tmp_path):
    work, out, png = tmp_path / "work", tmp_path / "plan.json", tmp_path / "plan.png"
    proc = _plan(*SMALL, "--work", str(work), "--steps", "3", "--repeats", "1", "--check", "--check-rows", "2",
                 "2@1", "--num-workers", "1", "--json", str(out), "--chart", str(png))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for ranks, threads in ((1, 1), (1, 2), (2, 1), (4, 1)):  # the 4-rank run: the memory with several peers
        assert f"calibration run {ranks} rank(s) x {threads} thread(s):" in proc.stderr
    for ranks in (1, 2):  # and, for --num-workers, the runs with one sampler worker a rank
        assert f"calibration run {ranks} rank(s) x 1 thread(s) x 1 worker:" in proc.stderr
    assert "| machines | ranks |" in proc.stdout and "| ranks here | link |" in proc.stdout
    doc = json.loads(out.read_text())
    assert [r["machines"] for r in doc["rows"]] == [1, 2, 4]
    assert doc["rows"][0]["speedup"] == 1.0 and all(r["epoch_s"] > 0 for r in doc["rows"])
    seeds = doc["costs"]["train_seeds"]
    assert seeds > 0 and doc["rows"][0]["batches"] == math.ceil(seeds / 64)
    checked = {(r["ranks"], r["link_gbps"]) for r in doc["check"]}
    assert checked == {(2, None), (2, 1.0)}  # the default rows: tests/plan/test_report.py
    for r in doc["check"]:
        assert r["workers"] == 1 and "(+1 worker each)" in proc.stdout  # the checked job had its sampler worker
        assert r["batches"] == math.ceil(seeds / r["ranks"] / 64)  # the job ran the epoch the plan predicted
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["measured_rss_mb"] > 0
        assert r["machine_speed"] > 0  # the calibration's batch run beside each row
        assert r["error_at_speed"] == pytest.approx(r["predicted_s"] * r["machine_speed"] / r["measured_s"] - 1)
    assert "calibration batch now vs then" in proc.stdout and proc.stderr.count("this machine now:") == 2
    stages = ("sample", "rows", "assemble", "step", "other")
    for r in doc["check"]:  # where the time went, predicted and measured per stage
        assert set(r["predicted_ms"]) == set(r["measured_ms"]) == set(stages)
        assert r["measured_ms"]["step"] > 0 and r["predicted_ms"]["step"] > 0
    assert "| step ms predicted / measured |" in proc.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (work / "costs.json").exists() and doc["costs"]["rss_train_peers_per_row"] > 0
    from pyg_dist.plan.model import WORKER_COSTS
    assert set(doc["costs"]["workers"]) == set(WORKER_COSTS) and doc["costs"]["workers"]["w_row"] > 0
    assert any("1 sampler worker(s) a rank (one thread each; measured with one worker a rank" in line
               for line in doc["assumptions"])
    assert doc["costs"]["gpu"] == 0.0 and any(line.startswith("CPU machines") for line in doc["assumptions"])
    said = [json.loads(f.read_text()) for f in work.glob("cal_*.job.json")]  # each run said where it trained
    assert said and all(f["gpu"] == [0.0] * f["world_size"] for f in said)

    again = _plan(*SMALL, "--work", str(work), "--costs", str(work / "costs.json"), "--memory-gb", "64",
                  "--json", "-", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "the fewest machines whose ranks fit in 64 GiB: 1 " in again.stdout  # a tiny graph fits one machine
    assert "calibration run" not in again.stderr  # the costs were reused, nothing ran
    reused = json.loads(again.stdout[again.stdout.index("{"):])
    assert all(r["fits"] is True and r["machine_rss_gb"] > 0 for r in reused["rows"])
    assert any("no sampler workers" in line for line in reused["assumptions"])
    workers = _plan(*SMALL, "--work", str(work), "--costs", str(work / "costs.json"), "--num-workers", "1",
                    "--json", "-", timeout=300)
    assert workers.returncode == 0, workers.stderr[-3000:]
    same = json.loads(workers.stdout[workers.stdout.index("{"):])  # the plan with its worker, from the same costs
    assert [r["epoch_s"] for r in same["rows"]] == pytest.approx([r["epoch_s"] for r in doc["rows"]], rel=1e-9)

    cached = _plan(*SMALL, "--work", str(work), "--costs", str(work / "costs.json"), "--cache-ratio", "0.5",
                   "--json", "-", timeout=300)  # the same costs, a degree cache of half a partition's rows
    assert cached.returncode == 0, cached.stderr[-3000:]
    plan = json.loads(cached.stdout[cached.stdout.index("{"):])
    for n, row, plain in zip((1, 2, 4), plan["rows"], reused["rows"]):
        counts = plan["counts"][str(n)]
        if n == 1:   # nothing remote, nothing to cache
            assert counts["cache_rows"] == 0 and row["epoch_s"] == pytest.approx(plain["epoch_s"], rel=1e-9)
            continue
        assert 0 < counts["cached_row_frac"] <= counts["remote_row_frac"] and counts["cache_rows"] > 0
        assert row["ms"]["rows"] < plain["ms"]["rows"] and row["rss_mb"] > plain["rss_mb"]
    assert any("degree feature cache of 0.5" in line for line in plan["assumptions"])


@pytest.mark.parametrize("args, named", [(["--machines", "0"], "--machines"),
                                         (["--batch-size", "0"], "--batch-size"),
                                         (["--link-gbps", "-1"], "--link-gbps"),
                                         (["--cache-ratio", "1.5"], "--cache-ratio"),
                                         (["--check", "--check-rows", "2@x"], "--check-rows"),
                                         (["--check", "--check-rows", "0"], "--check-rows"),
                                         (["--num-workers", "-1"], "--num-workers"),
                                         (["--memory-gb", "0"], "--memory-gb"),
                                         (["--gpu"], "--gpu")])
def test_plan_names_the_bad_argument(tmp_path, args, named):
    if args == ["--gpu"]:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU: --gpu calibrates on it")
    proc = _plan(*SMALL, "--work", str(tmp_path), *args, timeout=120)
    assert proc.returncode == 2 and named in proc.stderr and "Traceback" not in proc.stderr


def test_plan_names_an_unreadable_graph_or_costs_file(tmp_path):
    proc = _plan("--graph", str(tmp_path / "missing.pt"), "--work", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "--graph" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "bad.json").write_text("{")
    proc = _plan(*SMALL, "--work", str(tmp_path), "--costs", str(tmp_path / "bad.json"), timeout=120)
    assert proc.returncode == 2 and "--costs" in proc.stderr and "Traceback" not in proc.stderr
    from pyg_dist.plan.model import Costs
    plain = Costs(u_edge=1e-6, u_row=1e-6, u_asm=1e-7, u_step=1e-6, u_other=0.0, train_seeds=100)
    (tmp_path / "plain.json").write_text(json.dumps(plain.as_dict()))  # calibrated without workers
    proc = _plan(*SMALL, "--work", str(tmp_path), "--costs", str(tmp_path / "plain.json"), "--num-workers", "1",
                 timeout=120)
    assert proc.returncode == 2 and "--costs" in proc.stderr and "--num-workers" in proc.stderr, proc.stderr
    proc = _plan(*SMALL, "--work", str(tmp_path), "--costs", str(tmp_path / "plain.json"), "--gpu", timeout=120)
    assert proc.returncode == 2 and "--costs" in proc.stderr and "--gpu" in proc.stderr, proc.stderr


def test_plan_for_gpu_machines_needs_costs_calibrated_on_a_gpu(tmp_path):
    """Costs whose calibration trained on a GPU plan GPU machines (``--gpu``) and say so; without ``--gpu`` they
    are refused, as CPU costs are refused for GPU machines (the step is measured, not modelled, on either)."""
    from pyg_dist.plan.model import Costs
    gpu = Costs(u_edge=1e-6, u_row=1e-6, u_asm=1e-7, u_step=1e-7, u_other=0.0, train_seeds=100, gpu=1.0)
    (tmp_path / "gpu.json").write_text(json.dumps(gpu.as_dict()))
    proc = _plan(*SMALL, "--work", str(tmp_path), "--costs", str(tmp_path / "gpu.json"), timeout=120)
    assert proc.returncode == 2 and "--costs" in proc.stderr and "add --gpu" in proc.stderr, proc.stderr
    proc = _plan(*SMALL, "--work", str(tmp_path), "--costs", str(tmp_path / "gpu.json"), "--gpu", "--json", "-",
                 timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert any(line.startswith("GPU machines, one GPU a rank: the job trained on a GPU in 100% of the calibration")
               for line in doc["assumptions"])
