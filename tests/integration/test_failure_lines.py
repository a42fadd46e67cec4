"""What a failing job says, under the real launcher: every rank's own typed line, and survivors that quote the
line a failed peer published (``peer rank 1 failed: CheckpointError: ...``) instead of guessing at a cause."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pyg_dist.testing import free_port

#: A torchrun script: ``run_main`` around a ``main`` that the test fills in (``BODY``); rank 0 may start late.
SCRIPT = '''
import os, sys, time
from dataclasses import dataclass
rank = int(os.environ["RANK"])
if rank == 0 and os.environ.get("SLOW_START"):
    time.sleep(float(os.environ["SLOW_START"]))  # a rank still importing when its peer fails
from pyg_dist.errors import CheckpointError, InvalidArgumentError
from pyg_dist.train.entry import run_main


@dataclass
class Nap:  # a message (module level: the sockets transport finds message classes by module and name)
    seconds: float


def main(argv):
{body}

run_main(main, sys.argv[1:])
'''

USER_ERROR = '''
    if rank == 0 and os.environ.get("SLOW_MAIN"):
        time.sleep(float(os.environ["SLOW_MAIN"]))  # inside main: torchrun's SIGTERM arrives here
    raise InvalidArgumentError("main", "--partition-dir", "/missing", "an existing folder")
'''

COLLECTIVE = '''
    import torch.distributed as dist
    from pyg_dist.group import init_process_group
    init_process_group("gloo", 60)
    if rank == 1:
        time.sleep(1.0)  # rank 0 is blocked in the barrier by then
        raise CheckpointError("cannot write /ckpt/step_3: No space left on device")
    dist.barrier()
'''

REMOTE_CALL = '''
    from pyg_dist import rpc
    from pyg_dist.context import DistContext

    rpc.register_callee("nap", lambda m: time.sleep(m.seconds), replace=True)
    with rpc.rpc_session(DistContext.from_env(num_partitions=2), timeout=60):  # left in `finally`, as a job does
        if rank == 1:
            time.sleep(1.0)  # rank 0 waits on its call to this rank by then
            raise CheckpointError("cannot write /ckpt/step_3: No space left on device")
        rpc.call(1, "nap", Nap(60.0), timeout=90)
'''


def _torchrun(tmp_path, body, timeout=180, **env):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(body=textwrap.indent(textwrap.dedent(body).strip(), "    ")))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(script)]  # default monitor interval
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PYG_DIST_RPC"))}
    base.update(OMP_NUM_THREADS="1", PYG_DIST_RPC_PORT=str(free_port()), **env)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=base)
    return proc, {ln[:8]: ln for ln in proc.stderr.splitlines() if ln.startswith("[rank ")}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("where", ["SLOW_START", "SLOW_MAIN"])
def test_every_rank_says_its_user_error_though_one_is_late(tmp_path, where):
    # rank 1 fails at once; rank 0 gets to the same error 4 s later, before its main (still importing) or
    # inside it. torchrun stops the other ranks 0.1 s after the first exit: rank 0 must still say its line.
    proc, lines = _torchrun(tmp_path, USER_ERROR, **{where: "4"})
    assert proc.returncode != 0
    assert sorted(lines) == ["[rank 0]", "[rank 1]"], proc.stderr[-3000:]
    for line in lines.values():
        assert "InvalidArgumentError: " in line and "/missing" in line, line


@pytest.mark.timeout(200)
def test_a_survivor_blocked_in_a_collective_quotes_the_peer_s_error(tmp_path):
    proc, lines = _torchrun(tmp_path, COLLECTIVE)
    assert lines["[rank 1]"] == ("[rank 1] CheckpointError: cannot write /ckpt/step_3: No space left on device"), \
        proc.stderr[-3000:]
    survivor = lines.get("[rank 0]", "")
    assert survivor.startswith("[rank 0] PeerFailedError: peer rank 1 failed: CheckpointError: cannot write "
                               "/ckpt/step_3: No space left on device"), proc.stderr[-3000:]
    assert "TensorPipe" not in proc.stderr and "unexpected connection" not in proc.stderr


@pytest.mark.timeout(200)
@pytest.mark.parametrize("transport", ["sockets", "tensorpipe"])
def test_a_survivor_blocked_in_a_remote_call_quotes_the_peer_s_error(tmp_path, transport):
    proc, lines = _torchrun(tmp_path, REMOTE_CALL, PYG_DIST_TRANSPORT=transport)
    assert lines.get("[rank 1]", "").startswith("[rank 1] CheckpointError: cannot write"), proc.stderr[-3000:]
    survivor = lines.get("[rank 0]", "")
    assert survivor.startswith("[rank 0] RemoteCallError: remote call 'nap' to partition 1"), proc.stderr[-3000:]
    assert "peer rank 1 failed: CheckpointError: cannot write /ckpt/step_3: No space left on device" in survivor
    assert "TensorPipe" not in survivor and "unexpected connection" not in survivor, survivor
