"""The epoch record: where each rank's wall time went, per epoch, from its training loader's stage clocks.

:class:`EpochClock` wraps the epochs of a training loop::

    clock = EpochClock(env, train_loader, record_path="stages.jsonl")
    for epoch in range(epochs):
        clock.start()
        train_epoch(...)                       # iterates train_loader
        record = clock.stop(epoch)             # collective: every rank calls it
        print0(env, f"epoch={epoch} ... {record.line()}")
    print0(env, clock.totals_line())           # the sum over ranks and epochs

A rank's seconds (:mod:`pyg_dist.sampler.timing` defines the stages): ``wait`` (the loop waited for a batch) +
``step`` (the loop held a batch: forward, backward, optimiser, logging) + ``other`` (the rest of the epoch's
wall: the end-of-epoch collectives) = ``wall``; the sampling (``sample_local`` / ``sample_remote``), rows
(``rows_local`` / ``rows_remote``, and the rows read here, from the cache, fetched), ``assemble`` and ``device``
seconds are the pipeline's busy time: inside ``wait`` when the loader samples in this process one batch at a
time, beside the step (hidden) with sampler workers or ``concurrency > 1``.

Rank 0 writes one JSON line per epoch to ``record_path``: ``{"epoch", "world_size", "wall_s" (the slowest rank),
"ranks": [per rank: {"wall", "other", every stage and count, "peak_rss_mb" (the process's peak RSS so far),
"cpu_s" (the process's CPU seconds in the epoch, every thread)}], "sum": {the same, summed over ranks}}``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch

from pyg_dist import _fsio
from pyg_dist.errors import InvalidArgumentError
from pyg_dist.sampler.timing import StageTimes


@dataclass
class EpochRecord:
    """One epoch: per rank its wall seconds and :class:`StageTimes`."""
    epoch: int
    walls: List[float]
    ranks: List[StageTimes]
    rank: int = 0
    peak_rss_mb: Optional[List[float]] = None
    cpu_s: Optional[List[float]] = None

    def _extras(self, i: int) -> Dict[str, float]:
        out = {} if self.peak_rss_mb is None else {"peak_rss_mb": round(self.peak_rss_mb[i], 1)}
        return out if self.cpu_s is None else {**out, "cpu_s": round(self.cpu_s[i], 4)}

    @staticmethod
    def _entry(wall: float, t: StageTimes) -> Dict[str, float]:
        return {"wall": round(wall, 4), "other": round(max(wall - t.wait - t.step, 0.0), 4),
                **{k: round(v, 4) if isinstance(v, float) else v for k, v in t.as_dict().items()}}

    def as_dict(self) -> Dict[str, Any]:
        """The JSON line of this epoch (module docstring)."""
        total = StageTimes()
        for t in self.ranks:
            total.add(t)
        return {"epoch": self.epoch, "world_size": len(self.ranks), "wall_s": round(max(self.walls), 4),
                "ranks": [{**self._entry(w, t), **self._extras(i)}
                          for i, (w, t) in enumerate(zip(self.walls, self.ranks))],
                "sum": self._entry(sum(self.walls), total)}

    def line(self, rank: Optional[int] = None) -> str:
        """The stage split of one rank (default: this one), for the epoch line."""
        r = self.rank if rank is None else rank
        return split_line(self.walls[r], self.ranks[r], f"rank {r}")


def split_line(wall: float, t: StageTimes, who: str) -> str:
    """``rank 0: wait 1.2s step 3.4s other 0.1s | sample 2.0s (local 1.5 remote 0.5) rows 0.8s (local 0.3
    remote 0.5; owned 60% cached 10% fetched 30%) assemble 0.2s``."""
    rows = max(t.rows_owned + t.rows_cached + t.rows_fetched, 1)
    out = (f"{who}: wait {t.wait:.2f}s step {t.step:.2f}s other {max(wall - t.wait - t.step, 0.0):.2f}s | "
           f"sample {t.sample_local + t.sample_remote:.2f}s (local {t.sample_local:.2f} remote "
           f"{t.sample_remote:.2f}) rows {t.rows_local + t.rows_remote:.2f}s (local {t.rows_local:.2f} remote "
           f"{t.rows_remote:.2f}; owned {100 * t.rows_owned / rows:.0f}% cached {100 * t.rows_cached / rows:.0f}% "
           f"fetched {100 * t.rows_fetched / rows:.0f}%) assemble {t.assemble:.2f}s")
    return out + (f" device {t.device:.2f}s" if t.device else "")


class EpochClock:
    """Times the epochs of one training loader on every rank (module docstring).

    Args:
        env: The :class:`~pyg_dist.train.session.DistEnv` (its rank, world size and process group).
        loader: The training loader (any pyg_dist loader: its ``take_stage_times``).
        record_path: Where rank 0 appends one JSON line per epoch (``None``: nowhere).
    """

    def __init__(self, env, loader, record_path: Optional[Union[str, Path]] = None):
        if not hasattr(loader, "take_stage_times"):
            raise InvalidArgumentError("EpochClock", "loader", type(loader).__name__,
                                       "a pyg_dist loader (it times its stages: take_stage_times())")
        self.env, self.loader = env, loader
        self.path = Path(record_path) if record_path is not None else None
        self.records: List[EpochRecord] = []
        self._start: Optional[float] = None
        self._cpu = 0.0

    def start(self) -> None:
        """Starts an epoch: its wall clock, and the loader's stage totals from zero."""
        self.loader.take_stage_times()
        self._start, self._cpu = time.perf_counter(), time.process_time()

    def stop(self, epoch: int) -> EpochRecord:
        """Ends the epoch and gathers every rank's split (a collective: call it on every rank)."""
        if self._start is None:
            raise InvalidArgumentError("EpochClock.stop", "epoch", epoch, "an epoch begun with start()")
        wall, mine = time.perf_counter() - self._start, self.loader.take_stage_times()
        cpu, self._start = time.process_time() - self._cpu, None
        walls, ranks, rss, cpus = gather_split(self.env, wall, mine, cpu)
        record = EpochRecord(int(epoch), walls, ranks, int(getattr(self.env, "rank", 0)), rss, cpus)
        self.records.append(record)
        if self.path is not None and record.rank == 0:
            with _fsio.writing(self.path), open(self.path, "a") as f:  # a full disk: FileWriteError naming it
                f.write(json.dumps(record.as_dict()) + "\n")
        return record

    def totals_line(self) -> str:
        """The sum over ranks and epochs so far, one line."""
        total, wall = StageTimes(), 0.0
        for r in self.records:
            wall += sum(r.walls)
            for t in r.ranks:
                total.add(t)
        n = len(self.records[0].ranks) if self.records else 0
        return split_line(wall, total, f"stages, sum over {n} ranks and {len(self.records)} epochs")


def process_age() -> float:
    """Seconds since this process started (``/proc/self/stat``; launch to first batch, as a job's log says it)."""
    import os
    try:
        start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(open("/proc/uptime").read().split()[0])
        return uptime - start
    except (OSError, ValueError, IndexError):  # not Linux: since this module was imported
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def peak_rss_mb() -> float:
    """This process's peak resident set so far, MiB (``getrusage``; 0.0 where it is unavailable)."""
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    except (ImportError, OSError):
        return 0.0


def current_rss_mb() -> float:
    """This process's resident set now, MiB (``/proc/self/statm``; 0.0 where it is unavailable)."""
    import os
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def rss_parts_mb(pid: Union[int, str] = "self") -> Dict[str, float]:
    """A process's resident set now split (``/proc/<pid>/status``, MiB; default this process): ``anon`` (its own
    memory) and ``file`` (pages of mapped files and shared memory: libraries, memory-mapped partition files), and
    its ``peak`` (``VmHWM``); zeros where unknown."""
    out = {"anon": 0.0, "file": 0.0, "peak": 0.0}
    names = {"RssAnon": "anon", "RssFile": "file", "RssShmem": "file", "VmHWM": "peak"}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in names:
                    out[names[key]] += int(value.split()[0]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return out


def gather_split(env, wall: float, mine: StageTimes, cpu: float = 0.0):
    """Every rank's ``(wall, StageTimes, peak RSS MiB, CPU seconds)`` as four lists, on every rank (one
    all-reduce of a ``world x fields`` table)."""
    import torch.distributed as dist
    world, rank = int(getattr(env, "world_size", 1)), int(getattr(env, "rank", 0))
    row = [wall, peak_rss_mb(), cpu] + mine.as_list()
    table = torch.zeros(world, len(row), dtype=torch.float64)
    table[rank] = torch.tensor(row, dtype=torch.float64)
    if world > 1 and dist.is_initialized():
        dist.all_reduce(table)
    return (table[:, 0].tolist(), [StageTimes.from_list(r[3:]) for r in table.tolist()], table[:, 1].tolist(),
            table[:, 2].tolist())


__all__ = ["EpochClock", "EpochRecord", "split_line", "gather_split", "peak_rss_mb", "current_rss_mb", "process_age"]
