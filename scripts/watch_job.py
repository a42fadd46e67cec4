"""Runs a command (e.g. a ``torchrun`` job) and reports the largest memory, threads and open files of its processes.

Every process below the command is read from ``/proc`` twice a second (``scripts/bench_scale.py``'s ``Watch``);
at the end one line per process (its command line's last words) and the largest values over all of them: VmRSS,
RssAnon (the process's own memory: what the OOM killer and a ``<= N GiB per rank`` target count), RssFile (mapped
file pages, e.g. memory-mapped partition files: page cache, given back under pressure), VmSwap, threads, files::

    python scripts/watch_job.py -- torchrun --standalone --nproc-per-node 2 \
        examples/distributed/node_classification.py --partition-dir DIR ...
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import Watch  # noqa: E402

KEYS = ("rss_mb", "anon_mb", "file_mb", "swap_mb", "threads", "files", "sockets")


def main() -> int:
    cmd = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    if not cmd:
        sys.exit("usage: watch_job.py -- COMMAND ...")
    start = time.time()
    proc = subprocess.Popen(cmd)
    watch = Watch(proc.pid, period=1.0)
    code = proc.wait()
    peak = watch.close(KEYS)
    print(f"# exit {code} after {time.time() - start:.1f} s; per process (largest seen):", file=sys.stderr)
    for pid, p in sorted(watch.peak.items()):
        print(f"#   pid {pid}: " + " ".join(f"{k}={p[k]}" for k in KEYS), file=sys.stderr)
    print("# largest over the job's processes: " + " ".join(f"{k}={peak[k]}" for k in KEYS), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
