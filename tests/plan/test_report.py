"""The check's measure of the machine's speed: the calibration's 1-rank batch run again, against the batch the
costs predict for it."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan import report
from pyg_dist.plan.calibrate import Run
from pyg_dist.plan.model import Costs, Machines, predict
from pyg_dist.plan.replay import Counts

C1 = Counts(1, 100_000, 40_000, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
COSTS = Costs(u_edge=2e-6, u_row=1.5e-6, u_asm=2e-7, u_step=2e-6, u_other=0.004)


def _args(work):
    return SimpleNamespace(work=str(work), steps=5, warmup=2, batch_size=1024, num_neighbors=[4, 3], hidden=16,
                           remote_rows="exact", cache_ratio=None, num_workers=0)


def test_machine_speed_is_the_batch_now_over_the_calibrated_one(tmp_path, monkeypatch):
    (tmp_path / "parts-1").mkdir()
    (tmp_path / "parts-1" / "META.json").write_text("{}")
    then = sum(predict(COSTS, C1, Machines(1), 1024).ms.values()) / 1e3  # 0.4 s by hand: 0.2 + 0.06 + 0.008 + ...
    assert then == pytest.approx(2e-6 * 100_000 + (1.5e-6 + 2e-7 + 2e-6) * 40_000 + 0.004)
    seen = {}

    def fake_run(folder, ranks, threads, record, job_args, **kw):
        seen.update(folder=folder, ranks=ranks, threads=threads, steps=kw["steps"], warmup=kw["warmup"])
        per = 1.25 * then / 5  # five stages, each a fifth of 1.25x the calibrated batch
        rank = {"batches": 10, "sample_local": per * 10, "sample_remote": 0.0, "rows_local": per * 10,
                "rows_remote": 0.0, "assemble": per * 10, "step": per * 10, "wait": 4 * per * 10, "other": 0.0}
        return Run(1, 1, {"wall_s": 1.0, "ranks": [rank]}, {}, 1.0)

    monkeypatch.setattr(report.cal, "run_job", fake_run)
    said = []
    assert report.machine_speed(_args(tmp_path), COSTS, {1: C1}, said.append) == pytest.approx(1.25)
    assert seen == dict(folder=tmp_path / "parts-1", ranks=1, threads=1, steps=5, warmup=2)
    assert "+25% against the calibration" in said[0]


def test_without_a_one_part_folder_there_is_no_speed(tmp_path, monkeypatch):
    monkeypatch.setattr(report.cal, "run_job", lambda *a, **k: pytest.fail("nothing may run"))
    assert report.machine_speed(_args(tmp_path), COSTS, {1: C1}, print) is None


def test_the_stage_table_puts_each_stage_predicted_beside_measured():
    row = {"ranks": 2, "link_gbps": 1.0,
           "predicted_ms": dict(sample=15.7, rows=34.7, assemble=0.5, step=227.8, other=3.2),
           "measured_ms": dict(sample=16.8, rows=35.4, assemble=0.5, step=240.9, other=0.0)}
    lines = report.stage_table([row]).splitlines()
    assert lines[0].startswith("| ranks here | link | sample ms predicted / measured |")
    assert lines[2] == "| 2 | 1 Gb/s (emulated) | 15.7 / 16.8 | 34.7 / 35.4 | 0.5 / 0.5 | 227.8 / 240.9 | 3.2 / 0.0 |"


def test_the_memory_note_says_which_growth_each_count_uses():
    """The plan's notes state what the memory assumed: the growth per row measured at 1, 2 and 4 ranks, and that
    the 4-rank figure (or, without a 4-rank run, the 2-rank one) stands for every count from 3 on."""
    from dataclasses import replace
    costs = replace(COSTS, rss_train1_per_row=1 / 1024, rss_train_per_row=2 / 1024, rss_train_peers_per_row=4 / 1024)
    words = report._growth_words(costs)
    assert "1.00 KiB at 1 rank, 2.00 KiB at 2 ranks, 4.00 KiB at 4 ranks" in words
    assert "from 3 ranks on, the 4-rank figure" in words
    words = report._growth_words(replace(costs, rss_train_peers_per_row=0.0))
    assert "4 ranks" not in words.split("(")[0] and "the 2-rank figure: no 4-rank calibration run" in words


def test_memory_per_machine_says_which_rows_fit_and_the_fewest_machines():
    """``--memory-gb``: a machine holds its ranks' peak RSS (two ranks a machine: twice a rank's)."""
    from pyg_dist.plan.model import Prediction
    ms = dict.fromkeys(("sample", "rows", "assemble", "step", "other"), 1.0)
    rows = [Prediction(2 * n, n, 1, 10, ms, 100.0 / n, "step", rss) for n, rss in ((1, 3072.0), (2, 2048.0),
                                                                                  (4, 1536.0))]
    args = SimpleNamespace(memory_gb=4.0)
    assert [report.machine_gb(r) for r in rows] == [6.0, 4.0, 3.0]
    assert [report.fits(r, args) for r in rows] == [False, True, True]
    assert report.fit_line(rows, args) == ("the fewest machines whose ranks fit in 4 GiB: 2 (4.0 GiB a machine, "
                                           "epoch 50.0 s)")
    assert "none of the planned counts fits 2 GiB" in report.fit_line(rows, SimpleNamespace(memory_gb=2.0))
    assert "3.0 GiB at 4 machine(s)" in report.fit_line(rows, SimpleNamespace(memory_gb=2.0))
    assert report.fits(rows[0], SimpleNamespace(memory_gb=None)) is None
    text = report.table(rows, 2, SimpleNamespace(memory_gb=4.0))
    assert "| RSS/machine GiB | fits 4 GiB |" in text.splitlines()[0] and "| 6.0 | **no** |" in text
    assert "fits" not in report.table(rows, 2, SimpleNamespace(memory_gb=None))


def test_the_notes_say_when_a_machines_processes_outnumber_its_cores():
    """Ranks and their sampler workers beyond the cores: the plan says what it charges for crowding them (the
    factor from the calibration's 4 ranks where they outnumbered its cores), or that it charges nothing."""
    crowded = SimpleNamespace(ranks_per_machine=2, num_workers=3)
    unmeasured, measured = COSTS, replace(COSTS, crowding=1.1, crowding_at=2.0)
    (line,) = report._crowding_words(crowded, 2, unmeasured)
    assert line.startswith("8 processes a machine on 2 cores") and "charges nothing" in line and "22 % slower" in line
    said, line = report._crowding_words(crowded, 2, measured)
    assert said.startswith("crowding: the calibration's 4 ranks on 2 core(s) took 1.10x") and "log2(2)" in said
    assert line.startswith("8 processes a machine on 2 cores") and line.endswith("charges 1.20x for crowding them")
    assert report._crowding_words(crowded, 8, unmeasured) == []                      # 8 processes, 8 cores
    assert report._crowding_words(crowded, 8, measured) == [said]
    assert report._crowding_words(SimpleNamespace(ranks_per_machine=1, num_workers=0), 1, unmeasured) == []


def test_the_checked_rows_are_the_default_ones_within_check_ranks_or_those_given():
    rows = report.check_rows(SimpleNamespace(check_rows=None, check_ranks=2))
    assert rows == [(1, None), (2, None), (2, 1.0), (2, 10.0)]              # 1 and 2 ranks; 2 at 1 and 10 Gb/s
    assert (4, None) in report.check_rows(SimpleNamespace(check_rows=None, check_ranks=4))
    given = report.check_rows(SimpleNamespace(check_rows=["2", "2@1", "8@0.5"], check_ranks=1))
    assert given == [(2, None), (2, 1.0), (8, 0.5)]                          # given rows are not cut by --check-ranks
    with pytest.raises(InvalidArgumentError, match="--check-rows"):
        report.check_rows(SimpleNamespace(check_rows=["2@0"], check_ranks=2))


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_a_gpu_calibration_whose_ranks_trained_on_the_cpu_fails_loudly(tmp_path, monkeypatch, share):
    """``--gpu``: a calibration in which any rank trained on the CPU is not a GPU machine's cost."""
    from dataclasses import replace as with_

    from pyg_dist.plan import calibrate as cal
    monkeypatch.setattr(report, "folder", lambda args, n, say: tmp_path / f"parts-{n}")
    monkeypatch.setattr(cal, "calibrate", lambda *a, **k: with_(COSTS, gpu=share))
    args = SimpleNamespace(**dict(vars(_args(tmp_path)), costs=None, gpu=True, repeats=1))
    with pytest.raises(cal.JobFailedError, match="trained on the CPU"):
        report.get_costs(args, {1: C1, 2: C1, 4: C1}, 2, lambda line: None, (10, 20, None))
    monkeypatch.setattr(cal, "calibrate", lambda *a, **k: with_(COSTS, gpu=1.0))
    assert report.get_costs(args, {1: C1, 2: C1, 4: C1}, 2, lambda line: None, (10, 20, None)).gpu == 1.0
