"""A 2-rank start prints no deprecation warning of torch's, on either transport.

torch's own ``init_rpc`` (tensorpipe) gathers device maps over a bare ``ProcessGroupGloo`` backend and warned
"You are using a Backend ... as a ProcessGroup. This usage is deprecated since PyTorch 2.0" once per rank of
every run (issue 46); pyg_dist's object collectives pass process groups."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
import torch

from pyg_dist.testing import spawn_world


@dataclass
class Echo:
    x: torch.Tensor


def _rank(rank, world):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # every warning, even one already shown in this process
        rpc.register_callee("warn_echo", lambda m: Echo(m.x * 2), replace=True)
        rpc.init_rpc(DistContext.from_env(num_partitions=world), timeout=60)
        try:
            got = rpc.call(1 - rank, "warn_echo", Echo(torch.arange(3)), timeout=20).x
        finally:
            rpc.shutdown_rpc()
    return got.tolist(), [f"{w.category.__name__}: {w.message}" for w in seen]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["sockets", "tensorpipe"])
def test_a_two_rank_start_prints_no_deprecation_warning(tmp_path, transport):
    res = spawn_world(2, _rank, timeout=120, log_dir=str(tmp_path), env={"PYG_DIST_TRANSPORT": transport})
    for rank, (got, seen) in enumerate(res):
        assert got == [0, 2, 4], rank                     # the call went through the transport
        assert not [w for w in seen if "deprecat" in w.lower()], (rank, seen)
        log = (tmp_path / f"rank{rank}.log").read_text(errors="replace")
        assert "deprecat" not in log.lower(), log[-3000:]
