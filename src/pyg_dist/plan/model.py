"""The planner's cost model: per-batch stage seconds and epoch seconds for N ranks, from calibrated unit costs.

Per batch of one rank, ``N`` ranks on ``M`` machines of ``c`` cores (``r = N / M`` ranks a machine, ``t =
max(1, c // r)`` threads a rank), with the replayed counts of that ``N``
(:mod:`.replay`: ``E`` sampled edges, ``E_rem`` of them sampled by another rank, ``R`` rows, ``R_rem`` owned
elsewhere and not in the rank's feature cache (fetched), ``calls`` to other ranks) and calibrated one-thread unit
costs::

    sample   = (u_edge * E + h_edge * E_rem + lat * hop_calls) * A_sample(t) + wire(16 B * E_rem)
    rows     = (u_row * R + h_row * R_rem + lat * row_calls) * A_rows(t) + wire(wire_row_bytes * R_rem)
    assemble = u_asm * R * A_asm(t)
    step     = u_step * R * A_step(t) + ddp(N) + allreduce(M)    # ddp: the same-machine DDP cost at 2 ranks
    alone    = sample + rows + assemble + step + u_other         # a batch when the rank has its cores
    waits    = ddp + allreduce + wire(...) + lat * calls            # the part of `alone` that is not CPU
    batch    = max(alone, r * (alone - waits) / c * X)  when r > c   (the ranks' CPU shared by the cores)
    X        = 1 + (x - 1) * log2(p / c) / log2(4 / c_cal)  (crowding, p the machine's processes: switching, the
               peers' calls waiting for a core; x = the calibration's 4-rank run over this formula's batch with
               X = 1, at least 1, where its 4 ranks outnumbered its c_cal cores; X = 1 where they did not)
    epoch    = ceil(train_seeds / N / batch_size) * batch + epoch_other   (+ cold_s: the first epoch's start)
    wire(b)  = r * b / link_bytes_per_s   (M > 1, or an emulated link; 0 on loopback)
    A(t)     = phi + (1 - phi) / t        (Amdahl; phi from the 1-rank run at 1 and at 2 threads)
    part     = node_bytes * max_nodes_frac + edge_bytes * max_edges_frac     (the largest partition's bytes)
    rss      = rss_base + rss_per_byte * part          (own memory at the first batch: the partition as loaded)
               + rss_file_base + rss_file_per_byte * part   (pages of mapped files after training: libraries and
                                                             the memory-mapped partition's pages training reads)
               + rss_train_per_row * R                 (the peak's own growth while training, per row of a batch:
                                                        1 rank; 2 ranks (one peer); 3 or more (several peers))
               + 2 * cache_rows * (row_bytes + 16)     (the feature cache: its rows, labels and ids in shared memory,
                                                        and as many bytes of replies to the peers' fills, which
                                                        stay in the owner's allocator)

With ``W`` sampler workers a rank (``TrainConfig.num_workers``; each worker one thread, the trainer
``max(1, c // r - W)``), the workers sample, fetch and assemble while the trainer steps, and hand each batch over::

    sample, rows, assemble   as above with the workers' own one-thread costs (w_edge, w_row, w_asm), one
                             thread; assemble includes handing the batch over (the worker's CPU beyond its
                             timed stages: the batch pickled into shared memory for the trainer's queue)
    recv     = w_recv * R                                  (the trainer takes a batch over)
    alone    = max(step + recv + u_other, (sample + rows + assemble) / W)
    batch    = max(alone, r * (CPU of step + recv + sample + rows + assemble) / c * X)  when r * (1 + W) > c
    rss      = the trainer's (its own terms, from runs with a worker) + W * w_own * R   (each worker's own memory:
               its peak less the pages it shares with the trainer; mapped pages counted once). From 3 ranks on
               the trainer's growth per row is scaled as without workers (x2 at 4 ranks: measured, 370-500 MiB
               against 255 at 2, though its workers serve), a worker's stays its 2-rank figure (140-175 MiB at
               4 ranks against 140-160 at 2).

Every unit cost is measured (:mod:`.calibrate`); the one-thread costs at one rank, the remote surcharges
(``h_edge``, ``h_row``) and ``ddp`` at two ranks, ``lat`` by timed empty calls between them, the peak's growth
with several peers at four ranks (a rank that fetches from and serves several peers at once keeps about twice
the growth of one with a single peer: measured on the reference graph, 230-260 MiB at 2 ranks, 410-620 at 4,
300-480 at 8, whatever the serving threads or the cores). ``wire_row_bytes``
is what a fetched row puts on the wire: ``row_bytes`` (``remote_rows="exact"``) or one byte per feature plus an
8-byte scale and offset (``"int8"``); ``h_row`` is measured with the job's own encoding.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Dict, List, Optional, Tuple

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.replay import Counts

STAGES = ("sample", "rows", "assemble", "step", "other")
#: The sampler workers' costs (``Costs.workers``; :mod:`.calibrate` fits them from runs with one worker a rank):
#: one-thread seconds per sampled edge and per row in a worker, the trainer's per row to take a batch over, the
#: epoch's end and the first epoch's start with workers, and the memory terms of :func:`predict` as the trainer
#: has them beside its workers (``trainer*_per_row``: its growth per row at 1 and 2 ranks) and each worker's own
#: (``worker*_per_row``).
WORKER_COSTS = ("w_edge", "w_row", "w_asm", "w_recv", "epoch_other", "cold_s", "rss_base_mb", "rss_per_byte",
                "rss_file_base_mb", "rss_file_per_byte", "trainer1_per_row", "trainer_per_row", "worker1_per_row",
                "worker_per_row")


@dataclass
class Costs:
    """Calibrated unit costs (seconds, one thread, one rank per core; see the module docstring): ``u_edge`` per
    sampled edge, ``u_row`` / ``u_asm`` / ``u_step`` per row of the batch, ``u_other`` per batch."""
    u_edge: float
    u_row: float
    u_asm: float
    u_step: float
    u_other: float
    h_edge: float = 0.0
    h_row: float = 0.0
    lat: float = 0.0
    ddp: float = 0.0
    phi: Dict[str, float] = field(default_factory=lambda: {s: 1.0 for s in ("sample", "rows", "assemble", "step")})
    epoch_other: float = 0.0
    cold_s: float = 0.0
    row_bytes: int = 0
    train_seeds: int = 0
    params: int = 0
    rss_base_mb: float = 0.0
    rss_per_byte: float = 1.0
    rss_train1_mb: float = 0.0  # the peak's growth over the RSS at the first batch: 1 rank, and more ranks
    rss_train_mb: float = 0.0
    rss_file_base_mb: float = 0.0  # mapped files' pages after training: a line through the partition's bytes
    rss_file_per_byte: float = 0.0
    rss_train1_per_row: float = 0.0  # the training's own growth per row of a batch (0: the constants above)
    rss_train_per_row: float = 0.0
    rss_train_peers_per_row: float = 0.0  # the same with several peers (4 ranks; 0: rss_train_per_row)
    crowding: float = 1.0  # the calibration's 4-rank run over the model's batch where it outnumbered the cores
    crowding_at: float = 0.0  # that run's processes a core (0: its ranks did not outnumber the cores)
    node_bytes: int = 0
    edge_bytes: int = 0
    graph_nodes: int = 0  # the graph these costs were measured on (its node and edge counts)
    graph_edges: int = 0
    huge_pages: float = 1.0  # the share of the calibration's ranks where torch used huge pages (:mod:`pyg_dist._alloc`)
    wire_row_bytes: int = 0  # bytes a fetched row puts on the wire (0: row_bytes)
    gpu: float = 0.0  # the share of the calibration's ranks that trained on a GPU (pyg-dist-plan --gpu)
    workers: Dict[str, float] = field(default_factory=dict)  # the sampler workers' costs (:data:`WORKER_COSTS`)

    @classmethod
    def read(cls, data: dict, where: str = "costs") -> "Costs":
        """Costs from a ``costs.json`` document, every value checked (a finite number >= 0; ``phi`` values in
        [0, 1]); anything else raises :class:`~pyg_dist.errors.InvalidArgumentError` naming the field."""
        import math
        if not isinstance(data, dict):
            raise InvalidArgumentError("Costs.read", where, type(data).__name__, "a JSON object of costs")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise InvalidArgumentError("Costs.read", where, unknown, f"only the fields {sorted(names)}")
        for key, value in data.items():
            nested = key in ("phi", "workers")
            values = value.values() if nested and isinstance(value, dict) else [value]
            ok = not nested or (isinstance(value, dict) and (key == "phi" or set(value) <= set(WORKER_COSTS)))
            for v in values:
                ok = ok and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                ok = ok and (key != "phi" or v <= 1)
            if not ok:
                raise InvalidArgumentError("Costs.read", f"{where}[{key!r}]", value,
                                           "a finite number >= 0" + (" per stage, at most 1" if key == "phi" else "")
                                           + (f" for each of {list(WORKER_COSTS)}" if key == "workers" else ""))
        at = data.get("crowding_at", 0.0)
        if at != 0 and at < 4 / 3 - 1e-9:  # the calibration's 4 ranks crowd at most 3 cores: 4 / 3 or more
            raise InvalidArgumentError("Costs.read", f"{where}['crowding_at']", at,
                                       "0 (not measured) or the 4-rank run's processes a core, at least 4 / 3")
        return cls(**data)

    def for_graph(self, nodes: int, edges: int, train_seeds: Optional[int] = None) -> "Costs":
        """These costs for another graph of the same kind: partition bytes scaled by the node and edge counts,
        the training seeds ``train_seeds`` (default: scaled by the node count); unit costs as they are."""
        if not self.graph_nodes or (nodes, edges) == (self.graph_nodes, self.graph_edges):
            return self
        fn, fe = nodes / self.graph_nodes, edges / max(self.graph_edges, 1)
        seeds = round(self.train_seeds * fn) if train_seeds is None else train_seeds
        return replace(self, node_bytes=round(self.node_bytes * fn), edge_bytes=round(self.edge_bytes * fe),
                       train_seeds=seeds, graph_nodes=nodes, graph_edges=edges)

    def as_dict(self) -> dict:
        """The costs as plain values (``costs.json``; ``Costs(**d)`` reads them back)."""
        return asdict(self)


@dataclass
class Machines:
    """What the plan is for: ``ranks`` processes on ``machines`` machines of ``cores`` cores each, joined by a
    ``link_gbps`` network (``None``: loopback, one machine); ``emulated``: the link is one emulated NIC per rank
    on this machine (:mod:`pyg_dist.testing.link`, the ``--check`` rows), not one NIC a machine."""
    ranks: int
    machines: int = 1
    cores: int = 1
    link_gbps: Optional[float] = None
    emulated: bool = False
    workers: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 0:
            raise InvalidArgumentError("Machines", "workers", self.workers, "an int >= 0")
        for name in ("ranks", "machines", "cores"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError("Machines", name, v, "an int >= 1")
        if self.ranks % self.machines:
            raise InvalidArgumentError("Machines", "ranks", self.ranks, f"a multiple of machines={self.machines}")
        if self.link_gbps is not None and not self.link_gbps > 0:
            raise InvalidArgumentError("Machines", "link_gbps", self.link_gbps, "None or > 0")

    @property
    def per_machine(self) -> int:
        return self.ranks // self.machines

    @property
    def threads(self) -> int:
        """The trainer's threads: the cores of a machine shared by its ranks, less one a sampler worker."""
        return max(1, self.cores // self.per_machine - self.workers)

    @property
    def processes(self) -> int:
        """Processes on one machine: its ranks and their sampler workers."""
        return self.per_machine * (1 + self.workers)


@dataclass
class Prediction:
    """One row of the plan."""
    ranks: int
    machines: int
    threads: int
    batches: int
    ms: Dict[str, float]
    epoch_s: float
    bound: str
    rss_mb: float
    speedup: float = 1.0
    batch_ms: float = 0.0  # one batch (the stages' sum; with sampler workers, less: they overlap the step)

    def as_dict(self) -> dict:
        """The row as plain values (``--json``)."""
        return asdict(self)


def amdahl(phi: float, threads: int) -> float:
    """The time with ``threads`` threads over the time with one, for serial fraction ``phi``."""
    return phi + (1.0 - phi) / threads


def predict(costs: Costs, counts: Counts, m: Machines, batch_size: int) -> Prediction:
    """The predicted stage split, epoch seconds and RSS of one rank (module docstring)."""
    if counts.num_parts != m.ranks:
        raise InvalidArgumentError("predict", "counts", counts.num_parts, f"counts replayed for {m.ranks} parts")
    w = costs.workers if m.workers else {}
    if m.workers and not set(WORKER_COSTS) <= set(w):
        raise InvalidArgumentError("predict", "costs", "costs without the sampler workers' terms",
                                   "costs calibrated with --num-workers (a calibration run with a worker)")
    wire = 0.0  # seconds per byte on the link, where bytes cross one
    if m.link_gbps is not None and (m.machines > 1 or m.emulated):
        wire = (1 if m.emulated else m.per_machine) / (m.link_gbps * 1e9 / 8)
    e_rem, r_rem = counts.edges * counts.remote_edge_frac, counts.rows * counts.fetched_row_frac
    row_wire = costs.wire_row_bytes or costs.row_bytes
    a = {s: 1.0 if w and s != "step" else amdahl(costs.phi.get(s, 1.0), m.threads)  # a worker has one thread
         for s in ("sample", "rows", "assemble", "step")}
    u_edge, u_row, u_asm = (w["w_edge"], w["w_row"], w["w_asm"]) if w else (costs.u_edge, costs.u_row, costs.u_asm)
    s = {
        "sample": (u_edge * counts.edges + costs.h_edge * e_rem + costs.lat * counts.hop_calls) * a["sample"]
        + wire * 16 * e_rem,
        "rows": (u_row * counts.rows + costs.h_row * r_rem + costs.lat * counts.row_calls) * a["rows"]
        + wire * row_wire * r_rem,
        "assemble": u_asm * counts.rows * a["assemble"],
        "step": costs.u_step * counts.rows * a["step"] + (costs.ddp if m.ranks > 1 else 0.0) + _allreduce(costs, m),
        "other": costs.u_other + (w["w_recv"] * counts.rows if w else 0.0),
    }
    waits = (costs.ddp if m.ranks > 1 else 0.0) + _allreduce(costs, m) + wire * (16 * e_rem + row_wire * r_rem) \
        + costs.lat * (counts.hop_calls * a["sample"] + counts.row_calls * a["rows"])
    alone, batch = _batch_s(s, m, waits, crowding_factor(costs, m))
    s = {n: v * batch / alone for n, v in s.items()}  # every stage slowed alike where the cores are shared
    batches = max(1, math.ceil(costs.train_seeds / m.ranks / batch_size))
    epoch = batches * batch + (w["epoch_other"] if w else costs.epoch_other)
    part = costs.node_bytes * counts.max_nodes_frac + costs.edge_bytes * counts.max_edges_frac
    bound = max(s, key=lambda n: s[n])
    if w and s["step"] + s["other"] >= (s["sample"] + s["rows"] + s["assemble"]) / m.workers:
        bound = "step"
    elif w:
        bound = max(("sample", "rows", "assemble"), key=lambda n: s[n]) + " (workers)"
    return Prediction(m.ranks, m.machines, m.threads, batches, {n: round(v * 1e3, 2) for n, v in s.items()},
                      epoch, bound, _rss(costs, counts, m, part), batch_ms=round(batch * 1e3, 2))


def crowding_factor(costs: Costs, m: Machines) -> float:
    """What crowding a machine's cores costs beyond sharing their time (module docstring): 1.0 where its processes
    do not outnumber its cores or the calibration never ran more processes than cores."""
    over = m.processes / m.cores
    if over <= 1.0 or costs.crowding_at <= 1.0:
        return 1.0
    return 1.0 + (max(costs.crowding, 1.0) - 1.0) * math.log2(over) / math.log2(costs.crowding_at)


def _batch_s(s: Dict[str, float], m: Machines, waits: float, crowded: float = 1.0) -> Tuple[float, float]:
    """``(alone, batch)`` seconds of one batch: with the rank's cores to itself (its stages one after another;
    with sampler workers, the larger of the trainer's part and the workers' part over their count), and with
    the machine's processes sharing its cores (their CPU seconds, the stages less their waits: DDP's wait for the
    slowest rank, calls, wire, over the cores, times ``crowded``: :func:`crowding_factor`) where they outnumber
    them."""
    total = sum(s.values())
    alone = total
    if m.workers:
        alone = max(s["step"] + s["other"], (s["sample"] + s["rows"] + s["assemble"]) / m.workers)
    if m.processes <= m.cores or alone <= 0:
        return max(alone, 1e-12), max(alone, 1e-12)
    return alone, max(alone, m.per_machine * max(total - waits, 0.0) / m.cores * crowded)


def _rss(costs: Costs, counts: Counts, m: Machines, part: float) -> float:
    """A rank's predicted peak RSS, MiB (module docstring): its trainer's and, with workers, theirs."""
    w = costs.workers if m.workers else {}
    terms = w if w else asdict(costs)
    fixed = (terms["rss_base_mb"] + terms["rss_file_base_mb"]
             + (terms["rss_per_byte"] + terms["rss_file_per_byte"]) * part / 2**20)
    if not w:
        return fixed + _rss_train(costs, counts, m.ranks) + cache_mb(costs, counts)
    one = m.ranks == 1
    trainer = w["trainer1_per_row" if one else "trainer_per_row"]
    if m.ranks > 2 and costs.rss_train_peers_per_row > 0 and costs.rss_train_per_row > 0:
        trainer *= costs.rss_train_peers_per_row / costs.rss_train_per_row  # several peers: as without workers
    per_row = trainer + m.workers * w["worker1_per_row" if one else "worker_per_row"]  # a worker's: as at 2 ranks
    return fixed + per_row * counts.rows + cache_mb(costs, counts)


def _rss_train(costs: Costs, counts: Counts, ranks: int) -> float:
    """The peak's growth while training, MiB: per row of the batch where calibrated so (with several peers, the
    4-rank calibration's where it ran), else the constant."""
    per_row = costs.rss_train1_per_row if ranks == 1 else costs.rss_train_per_row
    if ranks > 2 and costs.rss_train_peers_per_row > 0:
        per_row = costs.rss_train_peers_per_row
    if per_row > 0:
        return per_row * counts.rows
    return costs.rss_train1_mb if ranks == 1 else costs.rss_train_mb


#: A rank's memory per byte of its feature cache: the cache itself (shared memory) and the owner's side of the
#: peers' fills, as large on average (the reply buffers stay in its allocator). Measured on the reference graph:
#: +254 MiB for 122 MiB of cache at 2 ranks, +211 MiB for 60 MiB at 4 (the fills also page in partition rows).
CACHE_MEMORY_FACTOR = 2.0


def cache_mb(costs: Costs, counts: Counts) -> float:
    """What a rank's feature cache costs in memory, MiB (rows of features, an 8-byte label and an 8-byte id;
    :data:`CACHE_MEMORY_FACTOR`)."""
    return CACHE_MEMORY_FACTOR * counts.cache_rows * (costs.row_bytes + 16) / 2**20


def _allreduce(costs: Costs, m: Machines) -> float:
    """A ring all-reduce of the float32 gradients between machines (none on one machine)."""
    if m.machines == 1 or m.link_gbps is None or m.emulated:
        return 0.0
    return 2 * (m.machines - 1) / m.machines * costs.params * 4 / (m.link_gbps * 1e9 / 8)


def with_speedups(rows: List[Prediction]) -> List[Prediction]:
    """Sets each row's speed-up over the 1-rank row (the first row with ``ranks == 1``, else the first)."""
    base = next((r for r in rows if r.ranks == 1), rows[0] if rows else None)
    for r in rows:
        r.speedup = base.epoch_s / r.epoch_s if base and r.epoch_s > 0 else 1.0
    return rows


__all__ = ["Costs", "Machines", "Prediction", "STAGES", "WORKER_COSTS", "amdahl", "predict", "with_speedups",
           "cache_mb", "crowding_factor"]
