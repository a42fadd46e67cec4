"""The tables of ``scripts/scale_check.sh``: per run of the node-classification example, its stage record
(``--stage-log``) as one row: ranks, steps per rank, seconds per step (wall / batches), the share of the wall
the step waited for its batch, and the pipeline's seconds per batch (sampling local / remote, rows local /
remote, assembly, device copy); strong-scaling speed-up is the 1-rank row's seconds per step times the batches
it would need, over each row's.

    python scripts/scale_report.py scale_check_out
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def row(name: str, rec: dict) -> dict:
    ranks = rec["ranks"]
    n = len(ranks)
    per = max(r["batches"] for r in ranks) or 1
    wall = rec["wall_s"]
    s = rec["sum"]
    b = max(s["batches"], 1)
    return {"run": name, "ranks": n, "batches/rank": per, "s/step": wall / per,
            "wait share": s["wait"] / max(s["wall"], 1e-9),
            "sample ms/batch": 1000 * (s["sample_local"] + s["sample_remote"]) / b,
            "remote hop ms": 1000 * s["sample_remote"] / b,
            "rows ms/batch": 1000 * (s["rows_local"] + s["rows_remote"]) / b,
            "remote rows ms": 1000 * s["rows_remote"] / b,
            "assemble ms": 1000 * s["assemble"] / b, "device ms": 1000 * s["device"] / b,
            "batches/s (all ranks)": n * per / max(wall, 1e-9)}


def table(rows) -> None:
    if not rows:
        return
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "scale_check_out")
    for prefix, title in (("cpu_", "strong scaling on the CPUs"), ("gpu_", "one GPU rank by sampler workers")):
        rows = []
        for f in sorted(out.glob(f"{prefix}*.jsonl"), key=lambda p: int(p.stem.split("_")[-1])):
            lines = f.read_text().splitlines()
            if lines:
                rows.append(row(f.stem, json.loads(lines[-1])))
        if rows:
            base = rows[0]["batches/s (all ranks)"] if prefix == "cpu_" else None
            for r in rows:
                if base:
                    r["speed-up"] = r["batches/s (all ranks)"] / base
            print(f"== {title} ==")
            table(rows)
            print()


if __name__ == "__main__":
    main()
