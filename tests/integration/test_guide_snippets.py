"""The guides' snippets run as printed: "Bring your own graph" top to bottom in one empty folder (each block
a fresh process, the torchrun training block included), and the partitioning guide's "From Python" block."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_dist.format import read_meta
from pyg_dist.testing import free_port

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "docs" / "guides"


def _blocks(page: Path):
    """Every fenced ``python`` / ``bash`` block of ``page``, in order: ``(language, code)``."""
    return re.findall(r"^```(python|bash)\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "PYG_DIST_RPC"))}
    bindir = str(Path(sys.executable).parent)  # pyg-dist-partition and torchrun of this interpreter
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PATH=bindir + os.pathsep + env.get("PATH", ""),
               PYG_DIST_RPC_PORT=str(free_port()))
    return env


def _run(lang: str, code: str, cwd: Path):
    code = code.replace("examples/distributed/", str(REPO / "examples" / "distributed") + "/")
    cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=280, env=_env())
    assert proc.returncode == 0, (code, proc.stdout[-2000:], proc.stderr[-4000:])
    return proc


@pytest.mark.timeout(900)
def test_own_graph_guide_runs_as_printed(tmp_path):
    blocks = _blocks(GUIDES / "own-graph.md")
    assert len(blocks) >= 10
    outputs = [_run(lang, code, tmp_path) for lang, code in blocks]
    for folder, parts in (("mine-2", 2), ("graph-2", 2), ("graph-el-2", 2), ("npy-2", 2), ("pq-2", 2),
                          ("ogb-2", 2), ("big-2", 2)):
        assert read_meta(tmp_path / folder).num_parts == parts, folder
    assert read_meta(tmp_path / "big-2").num_nodes["_N"] == 2000
    assert re.search(r"^test_acc=[0-9.]+$", outputs[-1].stdout, re.M), outputs[-1].stdout


def test_partitioning_guide_from_python_runs(tmp_path):
    text = (GUIDES / "partitioning.md").read_text(encoding="utf-8")
    code = text.split("## From Python\n\n```python\n", 1)[1].split("```", 1)[0]
    _run("python", code.replace('"/data/p4"', repr(str(tmp_path / "p4"))), tmp_path)
    assert read_meta(tmp_path / "p4").num_parts == 4
