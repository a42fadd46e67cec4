"""Start-up cost of the content check at open: seconds to open one partition (``load_stores``) per ``verify``.

    python scripts/bench_open.py                                   # the reference products-shaped 2-part folder
    python scripts/bench_open.py --root /data/products-2 --part 1 --repeat 5

Rows: ``verify=False`` (sizes and 16 sampled blocks per file), the default ``verify="once"`` on a first open
(cold: a fresh, empty ``$XDG_CACHE_HOME``, so every file the rank opens is re-hashed) and on a second open
(remembered: one ``stat`` per file), and ``verify=True`` (re-hashes this partition's and the shared files every
time). Each row is the median of ``--repeat`` opens in this process; the files stay in the page cache between
rows (the first row warms it), so the cold row measures hashing, not the disk. Prints one table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REFERENCE = "/tmp/pyg_dist_bench/dist_products_like_metis2"


def _open_seconds(root: str, part: int, verify) -> float:
    from pyg_dist.store import load_stores
    start = time.perf_counter()
    load_stores(root, part, verify=verify)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=REFERENCE)
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from pyg_dist.format.meta import read_meta
    from pyg_dist.format.verified import opened_files
    meta = read_meta(args.root)
    hashed = sum((Path(args.root) / r).stat().st_size for r in opened_files(meta, args.part))
    rows = []
    _open_seconds(args.root, args.part, False)  # untimed: imports, numba and the page cache warm for every row
    with tempfile.TemporaryDirectory() as tmp:
        for label, verify, fresh in (("verify=False", False, False), ("default, first open (cold)", "once", True),
                                     ("default, second open (remembered)", "once", False),
                                     ("verify=True", True, False)):
            times = []
            for i in range(args.repeat):
                cache = Path(tmp) / (f"cold{i}" if fresh else "warm")
                os.environ["XDG_CACHE_HOME"] = str(cache)
                if label.startswith("default, second"):
                    _open_seconds(args.root, args.part, "once")  # make sure it is remembered
                times.append(_open_seconds(args.root, args.part, verify))
            rows.append((label, statistics.median(times), min(times)))
    print(f"open of part {args.part} of {args.root} ({meta.num_parts} parts, {sum(meta.num_nodes.values())} nodes; "
          f"the default re-hashes {hashed / 1e9:.2f} GB on a first open), median of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs:")
    print(f"| {'mode':<34} | {'open s (median)':>15} | {'min s':>7} |")
    print(f"|{'-' * 36}|{'-' * 17}|{'-' * 9}|")
    for label, med, low in rows:
        print(f"| {label:<34} | {med:>15.2f} | {low:>7.2f} |")


if __name__ == "__main__":
    main()
