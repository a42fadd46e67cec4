#!/usr/bin/env bash
# The planner's device check (issue 56) for a machine with many cores (16) and, when it has one, a GPU, in one go:
#   (a) its CPUs: calibrate (1 rank at 1 and 2 threads, 2 ranks, 4 for memory), then run the CHECK-rank row (8 ranks
#       on the 16 cores, as the scale issue's strong-scaling row) and print predicted against measured (target:
#       within 25 %);
#   (b) its GPU (skipped without CUDA): the same job on the GPU, calibrated with --gpu, checked at 1 and 2 ranks.
# Each stage has its own time limit and log under $OUT (default ./plan_device_check_out); the tables are printed
# last. Nothing is downloaded: the graph is generated first (products-shaped, NODES nodes; the reference graph is
# 2,449,029: its METIS runs alone take about 110 s a part count, so the default is smaller).
#
#   bash scripts/plan_device_check.sh                     # 1,000,000 nodes: the 8-rank row, then the GPU rows
#   PART=cpu bash scripts/plan_device_check.sh            # only (a); PART=gpu: only (b), reusing WORK's folders
#   NODES=20000 CHECK=2 bash scripts/plan_device_check.sh   # a quick look on a small machine (about 4 minutes)
# On 2 cores the quick look took 150 s for (a). Each part is sized to fit one 10-minute device command.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/plan_device_check_out}
WORK=${WORK:-/tmp/pyg_dist_plan_check}
NODES=${NODES:-1000000}
CHECK=${CHECK:-8}
GPU_CHECK=${GPU_CHECK:-"1 2"}
PART=${PART:-both}
REPEATS=${REPEATS:-1}
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
. scripts/stages.sh  # PYTHONPATH, $SUMMARY, stage NAME SECONDS COMMAND...

"$PY" -c "import os, sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', \
torch.cuda.is_available(), 'cores', os.cpu_count())" > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
stage warmup 120 "$PY" -m pyg_dist.ops.warm
GRAPH=$WORK/graph_$NODES.pt
[ -f "$GRAPH" ] || stage graph 300 "$PY" -m pyg_dist.datasets.products_like "$GRAPH" --num-nodes "$NODES" \
    --num-pairs $((NODES * 13))
PLAN=("$PY" -m pyg_dist.plan.cli --graph "$GRAPH" --x-dim 100 --num-classes 47 --train-frac 0.1
      --num-neighbors 15,10,5 --batch-size 1024 --hidden 256 --machines 1 2 4 8 --steps 10 --warmup 3
      --repeats "$REPEATS")
if [ "$PART" != gpu ]; then
    stage plan_cpu 540 "${PLAN[@]}" --work "$WORK/cpu" --check --check-rows $CHECK --json "$OUT/plan_cpu.json"
fi
if [ "$PART" = cpu ]; then
    :
elif "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    mkdir -p "$WORK/gpu"
    for d in "$WORK"/cpu/parts-*; do [ -e "$d" ] && [ ! -e "$WORK/gpu/$(basename "$d")" ] && ln -s "$d" "$WORK/gpu/"; done
    stage plan_gpu 540 "${PLAN[@]}" --work "$WORK/gpu" --gpu --check --check-rows $GPU_CHECK \
        --json "$OUT/plan_gpu.json"
else
    echo "plan_gpu: skipped (no CUDA device)" | tee -a "$SUMMARY"
fi

for name in plan_cpu plan_gpu; do
    [ -f "$OUT/$name.log" ] || continue
    echo
    echo "== $name =="
    grep -E '^(\| |- |calibrated in|planned in|this machine now)' "$OUT/$name.log"
done
echo
echo "== stages =="
cat "$SUMMARY"
