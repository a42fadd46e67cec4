"""Start-up against a tampered store and a peer that fails first (issue 52, items 3 and 4).

- One write to the job's store before the ranks start (``add('.../sockets/gen/1', 1)``) used to stall the
  sockets rendezvous 120 s and then blame the transport and a port the job did not use: now the rank that sees a
  member a generation ahead names the key as tampered at once, publishes its line, and the other quotes it.
- A rank of a two-machine job that fails at start-up (a bad ``PYG_DIST_*`` value on its machine) used to leave the
  other 120 s in the process group's rendezvous, ending in a raw ``DistStoreError``: now the other rank quotes the
  failing rank's line, typed, within seconds.
"""
from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.testing import free_port, spawn_world

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "distributed"


def _join(rank, world):
    from pyg_dist import rpc
    from pyg_dist.context import DistContext
    from pyg_dist.errors import PyGDistError
    t0 = time.monotonic()
    try:
        rpc.init_rpc(DistContext.from_env(num_partitions=world), timeout=90)
    except PyGDistError as exc:
        return type(exc).__name__, str(exc), time.monotonic() - t0
    rpc.shutdown_rpc()
    return "joined", "", time.monotonic() - t0


@pytest.mark.timeout(150)
def test_a_generation_moved_from_outside_is_named_at_once():
    import torch.distributed as dist
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, None, True, timeout=datetime.timedelta(seconds=60),
                          wait_for_workers=False)  # plays torchrun's agent store
    store.add("pyg_dist/attempt_0/rpc/pyg_dist/sockets/gen/1", 1)   # the attacker's one write
    res = spawn_world(2, _join, timeout=120, env={"MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
                                                  "TORCHELASTIC_RESTART_COUNT": "0"})
    (kind0, text0, t0), (kind1, text1, t1) = res
    assert kind0 == "TamperedStoreError" and "pyg_dist/sockets/gen/1" in text0 and "generation 2" in text0, res
    assert "29501" not in text0 and "is 127.0.0.1" not in text0, res    # no port the job does not use
    assert kind1 == "PeerFailedError" and "TamperedStoreError" in text1, res   # it quotes rank 0's line
    assert max(t0, t1) < 30, res                                            # not the 90 s bound


def _env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PYG_DIST_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


@pytest.mark.timeout(300)
def test_a_rank_that_fails_at_start_up_on_another_machine_is_quoted_by_the_other(tmp_path):
    """Two torchrun agents (``--nnodes 2``, one rank each), as on two machines; the second machine's rank has a bad
    ``PYG_DIST_SERVE_BUDGET_MB``."""
    data = pyg_dist.synthetic_graph(600, 5, num_features=8, seed=1)
    Partitioner(data, 2, method="random").save(tmp_path / "p2", progress=False)
    port, rpc_port = free_port(), free_port()
    procs = []
    for node, extra in ((0, {}), (1, {"PYG_DIST_SERVE_BUDGET_MB": "lots"})):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
               "--master-addr=127.0.0.1", f"--master-port={port}", str(EXAMPLES / "node_classification.py"),
               "--partition-dir", str(tmp_path / "p2"), "--epochs", "1", "--quiet"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=_env(dict(extra, PYG_DIST_RPC_PORT=str(rpc_port)))))
    t0 = time.monotonic()
    outs = [p.communicate(timeout=280) for p in procs]
    took = time.monotonic() - t0
    err0, err1 = outs[0][1], outs[1][1]
    assert procs[1].returncode != 0 and "[rank 1] InvalidArgumentError" in err1 and "PYG_DIST_SERVE_BUDGET_MB" in err1
    assert procs[0].returncode != 0, outs[0]
    line = [ln for ln in err0.splitlines() if ln.startswith("[rank 0] ")]
    assert line and "PeerFailedError: peer rank 1 failed: InvalidArgumentError" in line[0], err0[-3000:]
    assert "PYG_DIST_SERVE_BUDGET_MB" in line[0] and "DistStoreError" not in err0, err0[-3000:]
    assert took < 60, took                                                 # not the 120 s rendezvous bound
