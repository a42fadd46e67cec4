"""Calibration's fit: runs built from known unit costs give those costs back, and the fitted model reproduces
the runs it was fitted on."""
import json
from dataclasses import replace

import pytest

from pyg_dist.plan.calibrate import Run, fit, folder_bytes, job_env, merge
from pyg_dist.plan.model import Costs, Machines, predict
from pyg_dist.plan.replay import Counts

TRUE = dict(u_edge=2e-6, u_row=1.5e-6, u_asm=2e-7, u_step=2e-6, u_other=0.004, h_edge=5e-6, h_row=3e-6,
            lat=6e-4, ddp=0.01)
C1 = Counts(1, 100_000, 40_000, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
C2 = Counts(2, 100_000, 40_000, 0.2, 0.3, 3.0, 1.0, 0.5, 0.55)
SIZES = {"node_bytes": 800 * 2**20, "edge_bytes": 400 * 2**20}


def _rank(per_batch, batches=20, other=0.2, rss=0.0):
    s, r, a, st, o = (per_batch[k] for k in ("sample", "rows", "assemble", "step", "other"))
    return {"batches": batches, "sample_local": 0.7 * s * batches, "sample_remote": 0.3 * s * batches,
            "rows_local": 0.6 * r * batches, "rows_remote": 0.4 * r * batches, "assemble": a * batches,
            "step": st * batches, "wait": (s + r + a + o) * batches, "other": other, "peak_rss_mb": rss}


def _run(ranks, threads, per_batch, rss, facts=None, speed=1.0):
    per_batch = {k: v * speed for k, v in per_batch.items()}
    record = {"wall_s": 10.0, "ranks": [_rank(per_batch, rss=rss) for _ in range(ranks)]}
    return Run(ranks, threads, record, facts or {}, 1.0)


def _runs():
    t = TRUE
    one = {"sample": t["u_edge"] * C1.edges, "rows": t["u_row"] * C1.rows, "assemble": t["u_asm"] * C1.rows,
           "step": t["u_step"] * C1.rows, "other": t["u_other"]}
    e_rem, r_rem = C2.edges * C2.remote_edge_frac, C2.rows * C2.remote_row_frac
    two = dict(one, sample=one["sample"] + t["h_edge"] * e_rem + t["lat"] * C2.hop_calls,
               rows=one["rows"] + t["h_row"] * r_rem + t["lat"] * C2.row_calls,
               step=t["u_step"] * C2.rows + t["ddp"])
    p1 = SIZES["node_bytes"] + SIZES["edge_bytes"]
    p2 = SIZES["node_bytes"] * 0.5 + SIZES["edge_bytes"] * 0.55
    opened = lambda p: 350.0 + 1.2 * p / 2**20  # noqa: E731 - the RSS at the first batch
    facts = {"feature_dim": 100, "row_bytes": 400, "params": 12345, "train_seeds": 40_960, "call_latency_s": t["lat"]}
    f1, f2 = dict(facts, open_rss_mb=[opened(p1)]), dict(facts, world_size=2, open_rss_mb=[opened(p2), 10.0])
    return (_run(1, 1, one, opened(p1) + 700, f1), _run(1, 2, one, opened(p1) + 700, f1, speed=0.8),
            _run(2, 1, two, opened(p2) + 450, f2))


def test_fit_recovers_the_unit_costs():
    one, one_two, two = _runs()
    costs = fit(one, one_two, two, C1, C2, SIZES)
    for name, value in TRUE.items():
        assert getattr(costs, name) == pytest.approx(value, rel=1e-9), name
    assert costs.phi == pytest.approx({s: 0.6 for s in ("sample", "rows", "assemble", "step")})  # 0.8 = phi + (1-phi)/2
    assert costs.rss_per_byte == pytest.approx(1.2) and costs.rss_base_mb == pytest.approx(350.0)
    assert (costs.rss_train1_mb, costs.rss_train_mb) == pytest.approx((700.0, 450.0))
    assert (costs.row_bytes, costs.params, costs.train_seeds, costs.epoch_other) == (400, 12345, 40_960, 0.2)


def test_the_fitted_model_reproduces_its_calibration_runs():
    one, one_two, two = _runs()
    costs = fit(one, one_two, two, C1, C2, SIZES)
    for run, counts in ((one, C1), (two, C2)):
        p = predict(costs, counts, Machines(run.ranks, cores=run.ranks), batch_size=1024)
        measured = sum(run.per_batch()[k] for k in ("sample", "rows", "assemble", "step", "other"))
        assert sum(p.ms.values()) / 1e3 == pytest.approx(measured, rel=1e-9)
        assert p.rss_mb == pytest.approx(run.per_batch()["rss_mb"])


def test_without_a_two_thread_run_threads_do_not_help():
    one, _, two = _runs()
    assert fit(one, None, two, C1, C2, SIZES).phi == {s: 1.0 for s in ("sample", "rows", "assemble", "step")}


def test_folder_bytes_splits_node_and_edge_files(tmp_path):
    part = tmp_path / "part_0"
    part.mkdir()
    (part / "graph.pt").write_bytes(b"x" * 100)
    (part / "edge_feats.pt").write_bytes(b"x" * 10)
    (part / "node_feats.pt").write_bytes(b"x" * 1000)
    assert folder_bytes(tmp_path) == {"node_bytes": 1000, "edge_bytes": 110}
    with pytest.raises(Exception, match="folder"):
        folder_bytes(tmp_path / "nope")


def test_merged_repeats_weigh_every_batch_alike():
    one, _, _ = _runs()
    slow = _run(1, 1, {k: v * 3 for k, v in one.per_batch().items() if k != "rss_mb"}, 5000.0)
    merged = merge([one, slow])
    assert merged.record["ranks"][0]["batches"] == 40
    assert merged.per_batch()["step"] == pytest.approx(2 * one.per_batch()["step"])  # (1 + 3) / 2
    assert merged.per_batch()["rss_mb"] == 5000.0


def test_the_costs_say_how_many_calibration_ranks_had_huge_pages():
    one, one_two, two = _runs()
    assert fit(one, one_two, two, C1, C2, SIZES).huge_pages == 1.0     # jobs that did not say: assumed on
    one.facts["huge_pages_ranks"], two.facts["huge_pages_ranks"] = 1, 1  # one rank of the 2-rank run without
    assert fit(one, one_two, two, C1, C2, SIZES).huge_pages == pytest.approx(3 / 4)
    off = _run(1, 1, {k: v for k, v in one.per_batch().items() if k != "rss_mb"}, 0.0, {"huge_pages_ranks": 0})
    assert merge([one, off]).facts["huge_pages_ranks"] == 0           # repeats: the fewest


def test_split_memory_fits_own_and_mapped_lines_and_a_growth_per_row():
    one, one_two, two = _runs()
    p1 = SIZES["node_bytes"] + SIZES["edge_bytes"]
    p2 = SIZES["node_bytes"] * C2.max_nodes_frac + SIZES["edge_bytes"] * C2.max_edges_frac
    anon = lambda p: 300.0 + 0.2 * p / 2**20   # noqa: E731 - own memory at the first batch
    files = lambda p: 150.0 + 0.5 * p / 2**20  # noqa: E731 - mapped pages after training
    per_row1, per_row2 = 0.02, 0.015           # MiB of training growth per row of a batch
    for run, p, counts, per_row in ((one, p1, C1, per_row1), (two, p2, C2, per_row2)):
        run.facts = dict(run.facts, open_anon_mb=[anon(p)] * run.ranks, end_file_mb=[files(p)] * run.ranks)
        for r in run.record["ranks"]:
            r["peak_rss_mb"] = anon(p) + files(p) + per_row * counts.rows
    costs = fit(one, one_two, two, C1, C2, SIZES)
    assert (costs.rss_base_mb, costs.rss_per_byte) == pytest.approx((300.0, 0.2))
    assert (costs.rss_file_base_mb, costs.rss_file_per_byte) == pytest.approx((150.0, 0.5))
    assert (costs.rss_train1_per_row, costs.rss_train_per_row) == pytest.approx((per_row1, per_row2))
    # a graph 10x larger, with batches of 1.5x the rows: every term follows its own driver
    big = replace(costs, node_bytes=SIZES["node_bytes"] * 10, edge_bytes=SIZES["edge_bytes"] * 10)
    counts = Counts(2, C2.edges, C2.rows * 1.5, 0.2, 0.3, 3.0, 1.0, 0.5, 0.55)
    part = 10 * p2
    expected = anon(part) + files(part) + per_row2 * counts.rows
    assert predict(big, counts, Machines(2, cores=2), batch_size=1024).rss_mb == pytest.approx(expected)


def test_a_four_rank_run_gives_the_growth_with_several_peers_and_two_ranks_keep_their_own():
    """Measured on the reference graph: a rank with one peer grows 230-260 MiB while training, one with three
    410-620. The 4-rank run's growth per row is used from 3 ranks on; 2 ranks keep the 2-rank run's; without a
    4-rank run every N > 1 uses the 2-rank one."""
    one, one_two, two = _runs()
    c4 = Counts(4, 100_000, 30_000, 0.25, 0.4, 3.0, 3.0, 0.25, 0.26)
    four = _run(4, 1, {k: 0.01 for k in ("sample", "rows", "assemble", "step", "other")}, 0.0)
    for run, growth in ((one, 240.0), (two, 250.0), (four, 480.0)):
        run.facts = dict(run.facts, open_anon_mb=[300.0] * run.ranks, end_file_mb=[500.0] * run.ranks)
        for i, r in enumerate(run.record["ranks"]):
            r["peak_rss_mb"] = 800.0 + growth - 40.0 * i  # the largest peak is rank 0's: its split is used
    costs = fit(one, one_two, two, C1, C2, SIZES, four, c4)
    assert costs.rss_train_peers_per_row == pytest.approx(480.0 / c4.rows)
    base = costs.rss_base_mb + costs.rss_file_base_mb
    assert predict(costs, c4, Machines(4, cores=2), batch_size=1024).rss_mb == pytest.approx(base + 480.0)
    c8 = replace(c4, num_parts=8, rows=20_000)
    assert predict(costs, c8, Machines(8, cores=2), batch_size=1024).rss_mb == pytest.approx(base + 320.0)
    assert predict(costs, C2, Machines(2, cores=2), batch_size=1024).rss_mb == pytest.approx(base + 250.0)
    alone = fit(one, one_two, two, C1, C2, SIZES)
    assert alone.rss_train_peers_per_row == 0.0
    assert predict(alone, c4, Machines(4, cores=2), batch_size=1024).rss_mb == pytest.approx(
        base + 250.0 / C2.rows * c4.rows)


@pytest.mark.parametrize("cores, slower, crowding, at", [(2, 1.25, 1.25, 2.0), (1, 1.25, 1.25, 4.0),
                                                          (2, 0.9, 1.0, 2.0), (4, 1.25, 1.0, 0.0)])
def test_a_four_rank_run_on_fewer_cores_gives_the_crowding(cores, slower, crowding, at):
    """The 4-rank run's batch against the one the fitted model gives it on the cores it ran on: 1.25x is a
    crowding of 1.25 at 4 / cores processes a core; faster than the model is none (1.0); on 4 cores or more its
    ranks did not crowd them: nothing measured, nothing charged."""
    one, one_two, two = _runs()
    c4 = Counts(4, 100_000, 30_000, 0.25, 0.4, 3.0, 3.0, 0.25, 0.26)
    costs = fit(one, one_two, two, C1, C2, SIZES)
    model = predict(costs, c4, Machines(4, cores=cores), batch_size=1024).ms  # as the model has it, rounded
    four = _run(4, 1, {k: v / 1e3 * slower for k, v in model.items()}, 0.0)
    fitted = fit(one, one_two, two, C1, C2, SIZES, four, c4, cores)
    assert fitted.crowding == pytest.approx(crowding, rel=1e-3) and fitted.crowding_at == at
    crowded = predict(fitted, c4, Machines(4, cores=2), batch_size=1024)
    assert crowded.batch_ms == pytest.approx(predict(costs, c4, Machines(4, cores=2), batch_size=1024).batch_ms
                                             * (crowding if at == 2.0 else 1.0 if at == 0.0 else
                                                1 + (crowding - 1) * 0.5), rel=1e-3)
    assert Costs.read(json.loads(json.dumps(fitted.as_dict()))) == fitted


def test_own_memory_that_does_not_shrink_with_the_partition_is_flat_never_negative():
    """Measured on the reference graph: 308 MiB of own memory at 1 rank, 316 at 2 (run-to-run noise): a line
    through them would fall with the bytes; the fit is flat at the larger, not a negative base."""
    one, one_two, two = _runs()
    for run, anon in ((one, 308.0), (two, 316.0)):
        run.facts = dict(run.facts, open_anon_mb=[anon] * run.ranks, end_file_mb=[900.0] * run.ranks)
    costs = fit(one, one_two, two, C1, C2, SIZES)
    assert (costs.rss_base_mb, costs.rss_per_byte) == (316.0, 0.0)
    assert (costs.rss_file_base_mb, costs.rss_file_per_byte) == (900.0, 0.0)


def test_job_outputs_that_are_not_the_jobs_raise_naming_the_file(tmp_path):
    from pyg_dist.plan.calibrate import JobFailedError, _read_outputs
    record = tmp_path / "r.jsonl"
    good = {"wall_s": 1.0, "ranks": [{"batches": 2}]}
    record.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, wall_s=2.0)) + "\n")
    (tmp_path / "r.jsonl.job.json").write_text(json.dumps({"params": 3}))
    first, last, facts, lines = _read_outputs(record)
    assert (first["wall_s"], last["wall_s"], facts, len(lines)) == (1.0, 2.0, {"params": 3}, 2)
    for name, text in (("r.jsonl.job.json", "{not json"), ("r.jsonl.job.json", "[1, 2]"),
                       ("r.jsonl", '{"wall_s": 1}'), ("r.jsonl", "")):
        saved = (tmp_path / name).read_text()
        (tmp_path / name).write_text(text)
        with pytest.raises(JobFailedError, match=name.replace(".", r"\.")):
            _read_outputs(record)
        (tmp_path / name).write_text(saved)


def test_a_split_that_is_not_a_list_of_numbers_is_left_out():
    one, _, _ = _runs()
    one.facts = dict(one.facts, open_anon_mb="junk", end_file_mb=[None])
    got = one.per_batch()
    assert "open_anon_mb" not in got and "end_file_mb" not in got


def test_a_fact_that_is_not_a_number_reads_as_absent():
    from pyg_dist.plan.calibrate import Run
    run = Run(2, 1, {"wall_s": 1.0, "ranks": []}, {"cache_rows": [3.0, "x", 7, None], "wire_row_bytes": "big",
                                                   "n": float("nan"), "neg": -1, "ok": 12}, 1.0)
    assert run.fact("cache_rows") == 7.0 and run.fact("wire_row_bytes") == 0.0 and run.fact("missing", 5.0) == 5.0
    assert run.fact("n") == 0.0 and run.fact("neg") == 0.0 and run.fact("ok") == 12.0


def _worker_run(ranks, counts, per_row, facts, trainer_peak):
    """A run with one sampler worker a rank: the worker's stages per batch from ``per_row`` costs, the trainer's
    step 0.2 s and its wait 0.01 s (taking the batch over), its memory split as the job reports it."""
    stages = {"sample": per_row["w_edge"] * counts.edges, "rows": per_row["w_row"] * counts.rows,
              "assemble": per_row["w_asm"] * counts.rows, "step": 0.2}
    rank = {"batches": 20, "sample_local": stages["sample"] * 20, "sample_remote": 0.0,
            "rows_local": stages["rows"] * 20, "rows_remote": 0.0, "assemble": stages["assemble"] * 20,
            "step": 4.0, "wait": 0.2, "other": 0.5, "peak_rss_mb": trainer_peak}
    return Run(ranks, 1, {"wall_s": 4.5, "ranks": [dict(rank) for _ in range(ranks)]},
               dict(facts, num_workers=1), 1.0)


def test_runs_with_a_worker_give_the_workers_costs_and_memory_back():
    """The worker's one-thread costs per edge and row, the trainer's cost to take a batch over (its wait, the
    worker being faster than the step), and the memory of the trainer and of its worker: the rank's peak is the
    trainer's plus the worker's own plus the mapped pages the worker holds beyond the trainer's."""
    from pyg_dist.plan.calibrate import fit_workers
    one, one_two, two = _runs()
    costs = fit(one, one_two, two, C1, C2, SIZES)
    w = {"w_edge": 1e-6, "w_row": 2e-6, "w_asm": 1e-7}
    p1 = SIZES["node_bytes"] + SIZES["edge_bytes"]
    p2 = SIZES["node_bytes"] * C2.max_nodes_frac + SIZES["edge_bytes"] * C2.max_edges_frac
    runs = []
    for ranks, counts, p, t_row, w_row in ((1, C1, p1, 0.004, 0.002), (2, C2, p2, 0.003, 0.0025)):
        anon, tfile, wfile = 300.0 + 0.2 * p / 2**20, 100.0 + 0.1 * p / 2**20, 150.0 + 0.5 * p / 2**20
        timed = w["w_edge"] * counts.edges + (w["w_row"] + w["w_asm"]) * counts.rows
        facts = dict(one.facts, open_anon_mb=[anon] * ranks, end_file_mb=[tfile] * ranks,
                     workers_mb=[w_row * counts.rows] * ranks, workers_file_mb=[wfile] * ranks,
                     workers_cpu_s=[(timed + 0.05) * 20] * ranks, batches_per_epoch=20)  # 50 ms a batch untimed
        runs.append(_worker_run(ranks, counts, w, facts, anon + tfile + t_row * counts.rows))
        mem = runs[-1].rank_memory()[0]
        assert mem["rss_mb"] == pytest.approx(anon + wfile + (t_row + w_row) * counts.rows)
        assert mem["end_file_mb"] == pytest.approx(wfile)
    got = fit_workers(costs, runs[0], runs[1], C1, C2, SIZES)
    assert got["w_asm"] == pytest.approx(w["w_asm"] + 0.05 / C1.rows)  # the hand-over: the worker's CPU untimed
    got["w_asm"] = w["w_asm"]
    for name, value in w.items():
        assert got[name] == pytest.approx(value, rel=1e-9), name
    assert got["w_recv"] == pytest.approx(0.01 / C1.rows) and got["epoch_other"] == pytest.approx(0.5)
    assert (got["rss_base_mb"], got["rss_per_byte"]) == pytest.approx((300.0, 0.2))
    assert (got["rss_file_base_mb"], got["rss_file_per_byte"]) == pytest.approx((150.0, 0.5))
    assert (got["trainer1_per_row"], got["trainer_per_row"]) == pytest.approx((0.004, 0.003))
    assert (got["worker1_per_row"], got["worker_per_row"]) == pytest.approx((0.002, 0.0025))
    costs.workers = dict(got, w_asm=w["w_asm"])
    for run, counts in zip(runs, (C1, C2)):  # the fitted model gives the runs' memory back
        p = predict(costs, counts, Machines(run.ranks, cores=8, workers=1), batch_size=1024)
        assert p.rss_mb == pytest.approx(run.per_batch()["rss_mb"])
    p = predict(costs, C1, Machines(1, cores=2, workers=1), batch_size=1024)
    worker = 1e-6 * C1.edges + (2e-6 + 1e-7) * C1.rows                  # 0.184 s
    trainer = costs.u_step * C1.rows + costs.u_other + 0.01             # 0.094 s: step, its rest, the take-over
    assert p.batch_ms / 1e3 == pytest.approx(max(worker, trainer)) and p.bound == "sample (workers)"


def test_the_workers_cpu_per_batch_counts_the_batches_prefetched_past_a_cut_epoch():
    """An epoch cut short by --max-steps leaves two batches a worker prefetched (torch's prefetch_factor): their
    CPU is in the figure, so they are in the count; repeats merge both."""
    rank = {"batches": 20, "peak_rss_mb": 1.0}
    cut = Run(1, 1, {"wall_s": 1.0, "ranks": [rank]}, {"num_workers": 1, "batches_per_epoch": 100,
                                                       "workers_cpu_s": [4.4]}, 1.0)
    whole = Run(1, 1, {"wall_s": 1.0, "ranks": [rank]}, {"num_workers": 1, "batches_per_epoch": 20,
                                                         "workers_cpu_s": [4.0]}, 1.0)
    assert cut.workers_cpu_per_batch() == pytest.approx(4.4 / 22) and whole.workers_cpu_per_batch() == 0.2
    assert merge([cut, whole]).workers_cpu_per_batch() == pytest.approx(8.4 / 42)
    assert Run(1, 1, {"wall_s": 1.0, "ranks": [rank]}, {}, 1.0).workers_cpu_per_batch() == 0.0
    odd = Run(1, 1, {"wall_s": 1.0, "ranks": [rank]}, {"workers_cpu_s": ["x", 2.0], "workers_cpu_batches": "y"}, 1.0)
    assert odd.workers_cpu_per_batch() == 2.0  # a hand-edited facts file: what is not a number is left out


def test_the_costs_say_how_many_calibration_ranks_trained_on_a_gpu():
    one, one_two, two = _runs()
    assert fit(one, one_two, two, C1, C2, SIZES).gpu == 0.0            # jobs that did not say: the GPUs hidden
    one.facts["gpu"], one_two.facts["gpu"], two.facts["gpu"] = [1.0], [1.0], [1.0, 0.0]
    assert fit(one, one_two, two, C1, C2, SIZES).gpu == pytest.approx(3 / 4)
    two.facts["gpu"] = "yes"                                           # not the job's list: left out
    assert fit(one, one_two, two, C1, C2, SIZES).gpu == 1.0


def test_the_job_sees_the_gpus_only_when_its_arguments_put_it_on_one(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert job_env(2, ["--hidden", "16"])["CUDA_VISIBLE_DEVICES"] == ""
    assert job_env(2, ["--device", "cpu"])["CUDA_VISIBLE_DEVICES"] == ""
    env = job_env(3, ["--hidden", "16", "--device", "cuda"])
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["OMP_NUM_THREADS"] == "3"
    assert job_env(1, ["--device"])["CUDA_VISIBLE_DEVICES"] == ""      # a flag without its value: hidden
