#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel (not editable) into a fresh virtual environment, and run the
# demo and a smoke test from outside the source tree, against the installed package only. Run by .ci/run.
#
#   bash scripts/wheel_smoke.sh            # uses a temporary folder, removed at the end
#   KEEP=1 bash scripts/wheel_smoke.sh     # keeps it (its path is printed) to look at dist/ and the venv
#   WHEEL_WORK=DIR bash scripts/wheel_smoke.sh prepare   # only build and install, into DIR (.ci/run does this
#   WHEEL_WORK=DIR bash scripts/wheel_smoke.sh test      # while its checks run), then only the checks; DIR is kept
#
# Checks: `pyg-dist-partition --version` and `pyg-dist-warmup --version` print the package's version; the
# package is imported from the venv's site-packages (never from src/); `pyg-dist-warmup` with an empty
# NUMBA_CACHE_DIR compiles the kernels (first start), then the demo (partition, 2 ranks under torchrun,
# test_acc=) adds no new compiled kernel to that cache (second start: nothing left to compile).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
STEP=${1:-both}
case "$STEP" in prepare|test|both) ;; *) echo "usage: $0 [prepare|test]" >&2; exit 2 ;; esac
say() { echo "wheel_smoke: $*"; }
if [ -n "${WHEEL_WORK:-}" ]; then
    WORK=$WHEEL_WORK && mkdir -p "$WORK"
elif [ "$STEP" = both ]; then
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/pyg_dist_wheel.XXXXXX")
    [ -n "${KEEP:-}" ] && echo "wheel_smoke: working in $WORK" || trap 'rm -rf "$WORK"' EXIT
else
    say "$STEP needs WHEEL_WORK=DIR (the folder prepare builds into)"; exit 2
fi
VPY="$WORK/venv/bin/python"

if [ "$STEP" != test ]; then
    say "building sdist and wheel"
    "$PY" -m venv "$WORK/buildenv"   # the build tool in a venv of its own: the test venv gets the wheel only
    "$WORK/buildenv/bin/python" -m pip install -q build
    "$WORK/buildenv/bin/python" -m build -q --outdir "$WORK/dist" "$REPO" > "$WORK/build.log" 2>&1 \
        || { cat "$WORK/build.log"; exit 1; }
    ls -l "$WORK/dist"
    say "installing $(basename "$WORK"/dist/*.whl) into a fresh venv"
    "$PY" -m venv "$WORK/venv"
    "$VPY" -m pip install -q torch==2.13.0
    "$VPY" -m pip install -q "$WORK"/dist/*.whl
fi
[ "$STEP" = prepare ] && { say "prepared in $WORK"; exit 0; }
[ -x "$VPY" ] || { say "no venv in $WORK: run prepare first"; exit 1; }

cd "$WORK"   # outside the source tree from here on
VERSION=$("$VPY" -c "import importlib.metadata as m; print(m.version('pyg-dist'))")
"$WORK/venv/bin/pyg-dist-partition" --version | grep -qx "pyg-dist-partition $VERSION" \
    || { say "pyg-dist-partition --version does not print $VERSION"; exit 1; }
"$WORK/venv/bin/pyg-dist-warmup" --version | grep -qx "pyg-dist-warmup $VERSION" \
    || { say "pyg-dist-warmup --version does not print $VERSION"; exit 1; }
say "version $VERSION"

say "smoke test"
"$VPY" - "$REPO" <<'EOF'
import importlib.metadata, sys, sysconfig, tempfile
from pathlib import Path
import torch
import pyg_dist
from pyg_dist.partition.cli import main as partition_main

site = Path(sysconfig.get_paths()["purelib"]).resolve()
where = Path(pyg_dist.__file__).resolve()
if site not in where.parents or Path(sys.argv[1]).resolve() in where.parents:
    sys.exit(f"pyg_dist imported from {where}, not from the wheel in {site}")
if importlib.metadata.version("pyg-dist") != pyg_dist.__version__:
    sys.exit(f"metadata {importlib.metadata.version('pyg-dist')} != pyg_dist.__version__ {pyg_dist.__version__}")
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "parts"
    rc = partition_main(["--dataset", "synthetic", "--num-nodes", "3000", "--num-parts", "2", "--out", str(out),
                         "--quiet"])
    if rc != 0:
        sys.exit(f"pyg-dist-partition exited {rc}")
    meta = pyg_dist.read_meta(str(out))
    ends = [int(b[-1]) for b in meta.node_bounds.values()]
    parts = [pyg_dist.load_partition(str(out), i) for i in range(2)]
    if meta.num_parts != 2 or ends != [3000]:
        sys.exit(f"partition folder: {meta.num_parts} parts, node bounds ending at {ends}, expected 2 and [3000]")
data = pyg_dist.synthetic_graph(2000, seed=0)
batch = next(iter(pyg_dist.NeighborLoader(data, num_neighbors=[5, 3], batch_size=64, input_nodes=None)))
if batch.batch_size != 64 or not torch.equal(batch.x, data.x[batch.n_id]):
    sys.exit("NeighborLoader batch from the wheel does not match the graph's rows")
print("smoke test ok:", where)
EOF

say "first start: pyg-dist-warmup into an empty NUMBA_CACHE_DIR"
export NUMBA_CACHE_DIR="$WORK/numba-cache"
"$WORK/venv/bin/pyg-dist-warmup"
find "$NUMBA_CACHE_DIR" -type f | sort > "$WORK/cache_before"
say "the demo from the installed package (second start)"
PATH="$WORK/venv/bin:$PATH" "$VPY" "$REPO/examples/distributed/demo.py" --epochs 2 | tee "$WORK/demo.log"
grep -q "^test_acc=" "$WORK/demo.log" || { say "the demo printed no test_acc= line"; exit 1; }
find "$NUMBA_CACHE_DIR" -type f | sort > "$WORK/cache_after"
NEW=$(comm -13 "$WORK/cache_before" "$WORK/cache_after")
[ -z "$NEW" ] || { say "the demo compiled kernels pyg-dist-warmup had not: $NEW"; exit 1; }
say "ok: wheel installed, smoke test and demo passed, nothing compiled after pyg-dist-warmup"
