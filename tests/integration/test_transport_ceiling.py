"""scripts/transport_ceiling.py on a tiny batch: two real ranks on 127.0.0.1 run every way, ``--check`` compares
one batch of each way with the rows it must hold (the peer's rows at the fetched positions), and the table has
every row the benchmarks page quotes, for both transports."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_transport_ceiling_ways_hold_the_right_rows():
    cmd = [sys.executable, str(REPO / "scripts" / "transport_ceiling.py"), "--rows", "3000", "--owned", "5000",
           "--dim", "8", "--remote", "0.3", "--batches", "2", "--rounds", "2", "--check"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    cell = r" -?[\d.]+ \[-?[\d.]+ / -?[\d.]+\] \|"
    for way in ("local", "split", "remote", "remote, busy Python thread", "placing the fetched rows", "moving them",
                "the floor"):
        assert re.search(rf"^\| [^|]*{re.escape(way)}[^|]* \|{cell * 4}$", out, re.M), (way, out)
    assert "| way | tensorpipe cpu ms | sockets cpu ms | tensorpipe wall ms | sockets wall ms |" in out, out
    assert "3,000 rows of 8 float32 per batch, 30.0 % remote" in out
    for transport in ("tensorpipe", "sockets"):
        assert re.search(rf"^{transport}: best ratio to a no-RPC ceiling of 141 cpu ms/batch: [\d.]+x", out, re.M)
