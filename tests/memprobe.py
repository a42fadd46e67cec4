"""The owner side of the serving memory tests (``tests/store/test_bounded_serving.py``,
``tests/sampler/test_bounded_hops_world.py``): a callee that restarts and reads the process's peak RSS, and a
serving budget that remembers the most bytes it ever admitted at once."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from pyg_dist.store.limits import ByteBudget

#: Set by a ``Probe("done")``: the owner may leave its session.
DONE = threading.Event()


@dataclass
class Probe:
    op: str
    value: int = 0
    budget_peak: int = 0


class PeakBudget(ByteBudget):
    """The store's budget, remembering the most bytes it ever admitted at once."""
    peak = 0

    def acquire(self, nbytes, limit, timeout, what="a lookup reply"):
        hold = super().acquire(nbytes, limit, timeout, what)
        PeakBudget.peak = max(PeakBudget.peak, self.in_use)
        return hold


def vm_hwm() -> int:
    """This process's peak resident set (bytes)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) << 10


def probe(msg: Probe) -> Probe:
    """On the owner: ``reset`` restarts the peak RSS (VmHWM := VmRSS), ``peak`` reads it and the budget's peak,
    ``done`` sets :data:`DONE`; ``value`` is -1 where this kernel cannot restart the peak."""
    if msg.op == "done":
        DONE.set()
    elif msg.op == "reset":
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            return Probe("unsupported", -1)
    return Probe(msg.op, vm_hwm(), PeakBudget.peak)


def owner_and_asker(ctx, rank: int, op: str, ask, call_timeout: float, wait: float):
    """Rank 1 serves (the probe registered as ``op``) until rank 0 has run ``ask()`` and said done; returns
    ``ask()``'s result on rank 0, ``{"served": True}`` on rank 1 when it was told in time."""
    from pyg_dist import rpc
    rpc.register_callee(op, probe, replace=True)
    with rpc.rpc_session(ctx, timeout=120, call_timeout=call_timeout):
        if rank == 1:
            return {"served": DONE.wait(wait)}
        try:
            return ask()
        finally:
            rpc.call(1, op, Probe("done"))


def run_memory_world(tmp_path, world: dict, fn, budget_mb: int, reply_mb: int, failure_s: int, timeout: float):
    """Partitions the generator's ``world`` in two (random) and runs ``fn`` on 2 ranks under a serving budget
    and reply cap; returns rank 0's result after checking rank 1 served to the end (skips where the kernel
    cannot restart the peak RSS: the result's ``growth`` is ``None`` there)."""
    import pytest

    from pyg_dist.datasets import synthetic_graph
    from pyg_dist.partition import Partitioner
    from pyg_dist.store.limits import REPLY_MAX_ENV, SERVE_BUDGET_ENV
    from pyg_dist.testing import spawn_world
    Partitioner(synthetic_graph(**world), 2, method="random").save(tmp_path / "g", progress=False)
    env = {SERVE_BUDGET_ENV: str(budget_mb), REPLY_MAX_ENV: str(reply_mb), "PYG_DIST_FAILURE_TIMEOUT": str(failure_s)}
    asker, owner = spawn_world(2, fn, str(tmp_path / "g"), timeout=timeout, env=env)
    if owner != {"served": True}:
        raise AssertionError(f"the owner did not serve to the end: {owner!r}")
    if asker["growth"] is None:
        pytest.skip("this kernel cannot restart the peak RSS (/proc/self/clear_refs)")
    return asker
