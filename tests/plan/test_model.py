"""The planner's cost model against numbers worked out by hand from its docstring's formulas."""
import math

import pytest

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.model import WORKER_COSTS, Costs, Machines, amdahl, crowding_factor, predict, with_speedups
from pyg_dist.plan.replay import Counts


def _costs(**kw):
    base = dict(u_edge=2e-6, u_row=1e-6, u_asm=1e-7, u_step=1.25e-6, u_other=0.01, h_edge=3e-6, h_row=4e-6,
                lat=1e-3, ddp=0.02, phi={"sample": 0.5, "rows": 1.0, "assemble": 1.0, "step": 0.2},
                epoch_other=0.3, row_bytes=400, train_seeds=10_000, params=1_000_000, rss_base_mb=300.0,
                rss_per_byte=1.5, node_bytes=1000 * 2**20, edge_bytes=500 * 2**20, rss_train1_mb=70.0,
                rss_train_mb=40.0)
    base.update(kw)
    return Costs(**base)


def _counts(n, remote_e=0.25, remote_r=0.5, hop_calls=3.0, row_calls=1.0, max_n=0.5, max_e=0.6):
    return Counts(n, edges=100_000, rows=40_000, remote_edge_frac=remote_e, remote_row_frac=remote_r,
                  hop_calls=hop_calls, row_calls=row_calls, max_nodes_frac=max_n, max_edges_frac=max_e)


def test_one_rank_on_one_core_is_the_sum_of_the_unit_costs():
    c = _counts(1, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
    p = predict(_costs(), c, Machines(1, cores=1), batch_size=1000)
    # sample 2e-6*1e5 = 0.2 ; rows 1e-6*4e4 = 0.04 ; assemble 1e-7*4e4 = 0.004 ; step 0.05 ; other 0.01
    assert p.ms == {"sample": 200.0, "rows": 40.0, "assemble": 4.0, "step": 50.0, "other": 10.0}
    assert p.batches == 10 and p.threads == 1
    assert p.epoch_s == pytest.approx(10 * 0.304 + 0.3)
    assert p.bound == "sample"
    assert p.rss_mb == pytest.approx(300 + 1.5 * 1500 + 70)


def test_two_machines_add_remote_surcharges_wire_and_allreduce():
    c = _counts(2)
    m = Machines(2, machines=2, cores=4, link_gbps=8.0)  # 1 GB/s, one rank a machine, 4 threads
    p = predict(_costs(), c, m, batch_size=1000)
    e_rem, r_rem = 25_000, 20_000
    a_s, a_step = amdahl(0.5, 4), amdahl(0.2, 4)
    sample = (0.2 + 3e-6 * e_rem + 1e-3 * 3) * a_s + 16 * e_rem / 1e9
    rows = (0.04 + 4e-6 * r_rem + 1e-3 * 1) * 1.0 + 400 * r_rem / 1e9
    step = 0.05 * a_step + 0.02 + 2 * (1 / 2) * 4e6 / 1e9
    assert p.ms["sample"] == pytest.approx(sample * 1e3, abs=0.01)
    assert p.ms["rows"] == pytest.approx(rows * 1e3, abs=0.01)
    assert p.ms["step"] == pytest.approx(step * 1e3, abs=0.01)
    assert p.batches == 5 and p.threads == 4
    assert p.epoch_s == pytest.approx(5 * (sample + rows + 0.004 + step + 0.01) + 0.3, rel=1e-3)
    assert p.rss_mb == pytest.approx(300 + 1.5 * (1000 * 0.5 + 500 * 0.6) + 40)


def test_more_ranks_than_cores_share_the_cores_cpu_but_not_the_waits():
    c = _counts(4)
    costs = _costs()
    alone = predict(costs, c, Machines(4, cores=4), batch_size=1000)
    shared = predict(costs, c, Machines(4, cores=2), batch_size=1000)
    assert Machines(4, cores=2).threads == 1 and alone.threads == 1
    t_alone = sum(alone.ms.values()) / 1e3
    waits = 0.02 + 1e-3 * (3 + 1)  # ddp + latency x calls (at 1 thread Amdahl changes nothing)
    slow = 4 * (t_alone - waits) / 2 / t_alone  # 4 ranks' CPU on 2 cores
    assert sum(shared.ms.values()) / 1e3 == pytest.approx(t_alone * slow, abs=1e-4)  # ms are rounded
    assert shared.ms["step"] / alone.ms["step"] == pytest.approx(slow, rel=1e-3)
    # a rank that mostly waits leaves its core to the others: no slow-down while the CPU fits
    mostly_waiting = _costs(ddp=10.0)
    a = predict(mostly_waiting, c, Machines(4, cores=4), batch_size=1000)
    b = predict(mostly_waiting, c, Machines(4, cores=2), batch_size=1000)
    assert a.ms == b.ms


def test_crowding_measured_at_two_processes_a_core_scales_by_log2_of_the_processes_a_core():
    """x = 1.1 measured at 4 ranks on 2 cores: a batch 1.1x the shared one there, 1.2x at 8 ranks on 2 cores
    (log2 4 / log2 2 = 2), nothing where the processes fit the cores or the calibration never crowded them."""
    c4, c8 = _counts(4), _counts(8)
    plain, crowded = _costs(), _costs(crowding=1.1, crowding_at=2.0)
    for c, m, factor in ((c4, Machines(4, cores=2), 1.1), (c8, Machines(8, cores=2), 1.2),
                         (c4, Machines(4, cores=4), 1.0), (c4, Machines(2 * 2, cores=2, workers=0), 1.1)):
        assert crowding_factor(crowded, m) == pytest.approx(factor)
        a, b = predict(plain, c, m, batch_size=1000), predict(crowded, c, m, batch_size=1000)
        assert b.batch_ms == pytest.approx(a.batch_ms * factor, rel=1e-4)
        assert b.epoch_s - 0.3 == pytest.approx((a.epoch_s - 0.3) * factor, rel=1e-4)
    # workers count as processes: 2 ranks with a worker each on 2 cores crowd them as 4 ranks do
    w = {k: 1e-6 for k in WORKER_COSTS}
    assert crowding_factor(_costs(crowding=1.1, crowding_at=2.0, workers=w), Machines(2, cores=2, workers=1)) == \
        pytest.approx(1.1)
    # never measured (a calibration whose 4 ranks had their own cores), or measured faster: nothing charged
    for costs in (_costs(crowding=1.3, crowding_at=0.0), _costs(crowding=0.9, crowding_at=2.0)):
        assert crowding_factor(costs, Machines(8, cores=2)) == 1.0


def test_loopback_has_no_wire_term():
    c = _counts(2)
    p = predict(_costs(), c, Machines(2, cores=2), batch_size=1000)
    assert p.ms["rows"] == pytest.approx((0.04 + 4e-6 * 20_000 + 1e-3) * 1e3, abs=0.01)


def test_speedups_are_over_the_one_rank_row():
    rows = [predict(_costs(), _counts(n, 0.0, 0.0, 0, 0), Machines(n, machines=n, cores=1, link_gbps=10.0), 1000)
            for n in (1, 2)]
    with_speedups(rows)
    assert rows[0].speedup == 1.0
    assert rows[1].speedup == pytest.approx(rows[0].epoch_s / rows[1].epoch_s)
    assert rows[1].speedup < 2.0  # ddp and the all-reduce cost something


@pytest.mark.parametrize("kw, name", [({"ranks": 0}, "ranks"), ({"ranks": 3, "machines": 2}, "ranks"),
                                      ({"ranks": 2, "cores": 0}, "cores"), ({"ranks": True}, "ranks"),
                                      ({"ranks": 1, "link_gbps": 0.0}, "link_gbps")])
def test_machines_refuse_what_cannot_be(kw, name):
    with pytest.raises(InvalidArgumentError, match=name):
        Machines(**kw)


def test_counts_must_be_for_the_planned_rank_count():
    with pytest.raises(InvalidArgumentError, match="counts"):
        predict(_costs(), _counts(2), Machines(4), batch_size=10)


@pytest.mark.parametrize("at", [0.5, 1.0, 1.0001, 1.3])
def test_a_crowding_no_calibration_can_measure_is_refused_naming_its_field(at):
    """4 ranks crowd 1, 2 or 3 cores (4, 2, 4/3 processes a core): a value between 0 and 4/3 would divide the
    charge by a log2 near 0."""
    data = dict(_costs().as_dict(), crowding=1.1, crowding_at=at)
    with pytest.raises(InvalidArgumentError, match="crowding_at"):
        Costs.read(data)
    for ok in (0.0, 4 / 3, 2.0, 4.0):
        assert Costs.read(dict(data, crowding_at=ok)).crowding_at == ok


def test_amdahl():
    assert amdahl(1.0, 8) == 1.0 and amdahl(0.0, 8) == 0.125 and math.isclose(amdahl(0.5, 2), 0.75)


def test_costs_for_another_graph_scale_bytes_and_seeds_not_unit_costs():
    c = _costs(graph_nodes=1000, graph_edges=10_000)
    big = c.for_graph(4000, 20_000)
    assert (big.node_bytes, big.edge_bytes, big.train_seeds) == (4 * c.node_bytes, 2 * c.edge_bytes, 40_000)
    assert (big.u_edge, big.u_row, big.u_step, big.lat) == (c.u_edge, c.u_row, c.u_step, c.lat)
    assert c.for_graph(4000, 20_000, train_seeds=123).train_seeds == 123
    assert c.for_graph(1000, 10_000) is c and _costs().for_graph(5, 5) == _costs()  # same graph / unknown one


@pytest.mark.parametrize("change, field", [({"u_edge": -1.0}, "u_edge"), ({"u_row": "fast"}, "u_row"),
                                           ({"lat": float("nan")}, "lat"), ({"phi": {"step": 1.5}}, "phi"),
                                           ({"phi": [0.5]}, "phi"), ({"ddp": True}, "ddp"),
                                           ({"bogus": 1.0}, "--costs")])
def test_costs_read_back_from_a_file_are_checked(change, field):
    good = _costs().as_dict()
    assert Costs.read(good, "--costs") == _costs()
    with pytest.raises(InvalidArgumentError, match=field.replace("-", r"\-")):
        Costs.read({**good, **change}, "--costs")


def test_a_cache_takes_its_rows_off_the_wire_and_adds_its_memory():
    from dataclasses import replace
    base = _counts(2)
    hit = replace(base, cached_row_frac=0.2, cache_rows=10_000.0)
    m = Machines(2, machines=2, cores=4, link_gbps=8.0)
    plain, cached = predict(_costs(), base, m, 1000), predict(_costs(), hit, m, 1000)
    r_rem_plain, r_rem_cached = 20_000, 12_000      # 0.5 and 0.3 of 40,000 rows fetched
    saved = (4e-6 * (r_rem_plain - r_rem_cached)) + 400 * (r_rem_plain - r_rem_cached) / 1e9
    assert plain.ms["rows"] - cached.ms["rows"] == pytest.approx(saved * 1e3, abs=0.01)
    assert cached.rss_mb - plain.rss_mb == pytest.approx(2 * 10_000 * 416 / 2**20)  # the cache and the fills served
    int8 = predict(_costs(wire_row_bytes=108), hit, m, 1000)   # 100 features as int8 + scale and offset
    assert cached.ms["rows"] - int8.ms["rows"] == pytest.approx((400 - 108) * r_rem_cached / 1e9 * 1e3, abs=0.01)


WORKERS = dict(w_edge=3e-6, w_row=2e-6, w_asm=1e-7, w_recv=5e-7, epoch_other=0.5, cold_s=1.0, rss_base_mb=200.0,
               rss_per_byte=1.0, rss_file_base_mb=100.0, rss_file_per_byte=0.5, trainer1_per_row=1e-3,
               trainer_per_row=2e-3, worker1_per_row=3e-3, worker_per_row=4e-3)


def test_sampler_workers_overlap_the_step_by_hand():
    """One rank, one worker, two cores: the worker samples (its own one-thread costs) while the trainer steps;
    the batch is the larger of the trainer's part (step, taking the batch over, its own rest) and the worker's."""
    c = _counts(1, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0)
    costs = _costs(workers=dict(WORKERS), u_step=5e-6)  # step 0.2 s at one thread
    m = Machines(1, cores=2, workers=1)
    assert m.threads == 1 and m.processes == 2
    p = predict(costs, c, m, batch_size=1000)
    worker = 3e-6 * 1e5 + 2e-6 * 4e4 + 1e-7 * 4e4                  # 0.3 + 0.08 + 0.004 = 0.384 s
    trainer = 5e-6 * 4e4 * amdahl(0.2, 1) + 0.01 + 5e-7 * 4e4      # 0.2 + 0.01 + 0.02 = 0.23 s
    assert p.ms["sample"] == pytest.approx(300.0) and p.ms["other"] == pytest.approx(30.0)
    assert p.batch_ms == pytest.approx(max(worker, trainer) * 1e3) and p.bound == "sample (workers)"
    assert p.epoch_s == pytest.approx(10 * worker + 0.5)
    two = predict(costs, c, Machines(1, cores=3, workers=2), batch_size=1000)   # two workers: 0.192 s < 0.23 s
    assert two.batch_ms == pytest.approx(trainer * 1e3) and two.bound == "step"
    # memory: the trainer's fixed terms over the 1500 MiB partition, its growth and each worker's, per row
    fixed = 200 + 100 + (1.0 + 0.5) * 1500
    assert p.rss_mb == pytest.approx(fixed + (1e-3 + 3e-3) * 4e4)
    assert two.rss_mb == pytest.approx(fixed + (1e-3 + 2 * 3e-3) * 4e4)


def test_sampler_workers_share_the_cores_when_processes_outnumber_them():
    """Two ranks with a worker each on two cores: four processes; the batch is their CPU over the cores."""
    c = _counts(2, 0.0, 0.0, 0.0, 0.0)
    costs = _costs(workers=dict(WORKERS), u_step=5e-6, ddp=0.0)
    p = predict(costs, c, Machines(2, cores=2, workers=1), batch_size=1000)
    cpu = (3e-6 * 1e5 + 2e-6 * 4e4 + 1e-7 * 4e4) + (0.2 + 0.01 + 0.02)
    assert p.batch_ms == pytest.approx(2 * cpu / 2 * 1e3)
    assert p.rss_mb == pytest.approx(200 + 100 + 1.5 * (1000 * 0.5 + 500 * 0.6) + (2e-3 + 4e-3) * 4e4)
    four = predict(_costs(workers=dict(WORKERS), rss_train_per_row=1e-3, rss_train_peers_per_row=2e-3),
                   _counts(4, 0.0, 0.0, 0.0, 0.0), Machines(4, cores=8, workers=1), batch_size=1000)
    assert four.rss_mb == pytest.approx(200 + 100 + 1.5 * 800 + (2 * 2e-3 + 4e-3) * 4e4)  # the trainer's: x2


def test_workers_need_costs_calibrated_with_them():
    with pytest.raises(InvalidArgumentError, match="--num-workers"):
        predict(_costs(), _counts(1), Machines(1, workers=1), batch_size=1000)
    with pytest.raises(InvalidArgumentError, match="workers"):
        Machines(1, workers=-1)
    with pytest.raises(InvalidArgumentError, match="workers"):
        Costs.read(dict(_costs().as_dict(), workers={"w_edge": -1.0}))
    with pytest.raises(InvalidArgumentError, match="workers"):
        Costs.read(dict(_costs().as_dict(), workers={"nonsense": 1.0}))
    assert Costs.read(dict(_costs().as_dict(), workers=dict(WORKERS))).workers == WORKERS
