"""No orphans (issue item 7): a real torchrun (2 ranks, c10d rendezvous on 127.0.0.1) runs a dist_session
script that loops forever on short steps touching nothing that could fail; its agent is SIGKILLed. Both
ranks must be gone within the failure bound, each saying so in one typed line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pyg_dist
from pyg_dist.partition import Partitioner
from pyg_dist.testing.world import free_ports

BOUND = 3.0
SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pyg_dist.train.session import TrainConfig, dist_session
    folder, log = sys.argv[1], sys.argv[2]
    with dist_session(TrainConfig(folder, rpc=False, timeout=60)) as env:
        with open(os.path.join(log, f"rank{env.rank}.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        steps = 0
        while True:        # short steps that touch nothing shared: only the orphan watch can end this
            steps += 1
            time.sleep(0.005)
""")


def _gone(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_pids(log, agent, limit=120.0) -> dict:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        files = [log / f"rank{r}.pid" for r in (0, 1)]
        if all(f.exists() and f.read_text() for f in files):
            return {r: int(f.read_text()) for r, f in enumerate(files)}
        if agent.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"the ranks did not start: {(log / 'agent.txt').read_text()[-3000:]}")


@pytest.mark.timeout(240)
def test_sigkilled_agent_leaves_no_orphans(tmp_path):
    folder, log = tmp_path / "p2", tmp_path / "log"
    log.mkdir()
    Partitioner(pyg_dist.synthetic_graph(300, 4, num_features=4, seed=0), 2, method="random").save(
        folder, progress=False)
    (tmp_path / "loop.py").write_text(SCRIPT)
    rdzv, rpc = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_")}
    env.update(PYG_DIST_FAILURE_TIMEOUT=str(BOUND), PYG_DIST_RPC_PORT=str(rpc), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    out = open(log / "agent.txt", "w")
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                              "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{rdzv}", "--monitor-interval=0.1",
                              str(tmp_path / "loop.py"), str(folder), str(log)],
                             stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    pids = {}
    try:
        pids = _wait_pids(log, agent)
        time.sleep(0.5)                                           # both ranks are in their loop
        assert not any(_gone(p) for p in pids.values())
        t0 = time.monotonic()
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        ended = {}
        while time.monotonic() - t0 < BOUND + 10 and len(ended) < 2:
            ended.update({r: time.monotonic() - t0 for r, p in pids.items() if r not in ended and _gone(p)})
            time.sleep(0.02)
        text = (log / "agent.txt").read_text(errors="replace")
        assert sorted(ended) == [0, 1], f"orphans still running {BOUND + 10:g} s after the kill: {pids}\n{text[-2000:]}"
        assert max(ended.values()) <= BOUND, (ended, text[-2000:])
        for r in (0, 1):
            assert f"[rank {r}] AgentLostError: this rank's parent, the torchrun agent pid {agent.pid}, is gone" \
                in text, text[-2000:]
    finally:
        out.close()
        for p in pids.values():
            if not _gone(p):
                os.kill(p, signal.SIGKILL)
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
