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
    batch    = max(alone, r * (alone - waits) / c)  when r > c     (the ranks' CPU shared by the cores)
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
from typing import Dict, List, Optional

from pyg_dist.errors import InvalidArgumentError
from pyg_dist.plan.replay import Counts

STAGES = ("sample", "rows", "assemble", "step", "other")


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
    node_bytes: int = 0
    edge_bytes: int = 0
    graph_nodes: int = 0  # the graph these costs were measured on (its node and edge counts)
    graph_edges: int = 0
    huge_pages: float = 1.0  # the share of the calibration's ranks where torch used huge pages (:mod:`pyg_dist._alloc`)
    wire_row_bytes: int = 0  # bytes a fetched row puts on the wire (0: row_bytes)

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
            values = value.values() if key == "phi" and isinstance(value, dict) else [value]
            ok = key != "phi" or isinstance(value, dict)
            for v in values:
                ok = ok and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                ok = ok and (key != "phi" or v <= 1)
            if not ok:
                raise InvalidArgumentError("Costs.read", f"{where}[{key!r}]", value,
                                           "a finite number >= 0" + (" per stage, at most 1" if key == "phi" else ""))
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

    def __post_init__(self) -> None:
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
        return max(1, self.cores // self.per_machine)


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
    t = m.threads
    wire = 0.0  # seconds per byte on the link, where bytes cross one
    if m.link_gbps is not None and (m.machines > 1 or m.emulated):
        wire = (1 if m.emulated else m.per_machine) / (m.link_gbps * 1e9 / 8)
    e_rem, r_rem = counts.edges * counts.remote_edge_frac, counts.rows * counts.fetched_row_frac
    row_wire = costs.wire_row_bytes or costs.row_bytes
    a = {s: amdahl(costs.phi.get(s, 1.0), t) for s in ("sample", "rows", "assemble", "step")}
    s = {
        "sample": (costs.u_edge * counts.edges + costs.h_edge * e_rem + costs.lat * counts.hop_calls)
        * a["sample"] + wire * 16 * e_rem,
        "rows": (costs.u_row * counts.rows + costs.h_row * r_rem + costs.lat * counts.row_calls) * a["rows"]
        + wire * row_wire * r_rem,
        "assemble": costs.u_asm * counts.rows * a["assemble"],
        "step": costs.u_step * counts.rows * a["step"] + (costs.ddp if m.ranks > 1 else 0.0) + _allreduce(costs, m),
        "other": costs.u_other,
    }
    waits = (costs.ddp if m.ranks > 1 else 0.0) + _allreduce(costs, m) + wire * (16 * e_rem + row_wire * r_rem) \
        + costs.lat * (counts.hop_calls * a["sample"] + counts.row_calls * a["rows"])
    slow = _shared_cores(m, sum(s.values()), waits)
    s = {n: v * slow for n, v in s.items()}
    batches = max(1, math.ceil(costs.train_seeds / m.ranks / batch_size))
    epoch = batches * sum(s.values()) + costs.epoch_other
    part = costs.node_bytes * counts.max_nodes_frac + costs.edge_bytes * counts.max_edges_frac
    rss = (costs.rss_base_mb + costs.rss_file_base_mb + (costs.rss_per_byte + costs.rss_file_per_byte) * part / 2**20
           + _rss_train(costs, counts, m.ranks) + cache_mb(costs, counts))
    return Prediction(m.ranks, m.machines, t, batches, {n: round(v * 1e3, 2) for n, v in s.items()},
                      epoch, max(s, key=lambda n: s[n]), rss)


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


def _shared_cores(m: Machines, alone: float, waits: float) -> float:
    """How much slower a batch gets when a machine runs more ranks than it has cores: the ranks' CPU seconds
    (the batch alone less its waits: DDP's wait for the slowest rank, calls, wire) shared by the cores, when
    that exceeds the batch alone (a rank waiting leaves its core to the others)."""
    if m.per_machine <= m.cores or alone <= 0:
        return 1.0
    return max(1.0, m.per_machine * max(alone - waits, 0.0) / m.cores / alone)


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


__all__ = ["Costs", "Machines", "Prediction", "STAGES", "amdahl", "predict", "with_speedups", "cache_mb"]
