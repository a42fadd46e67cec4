#!/bin/bash
# pyg-dist-plan on the papers100M-shaped graph (pyg_dist.datasets.papers_like): calibrate on the graph at a
# hundredth of papers100M's size, predict the same job on a larger scale of it, then run that job and compare.
#
#   bash scripts/plan_papers_check.sh                    # calibration at scale 0.01, target scale 0.25
#   TARGET_ROOT=/data/pl25 TARGET_PARTS=/data/pl25_parts bash scripts/plan_papers_check.sh   # existing ones
#
# Both graphs are partitioned as the scale issue's run was (out-of-core, fennel, bfloat16 features); an existing
# target folder can be given (TARGET_PARTS: its 2-part folder, linked into the planner's work folder, so the replay
# uses its own partitions). The job: fanouts 15,10,5, batches of 1024, GraphSAGE 256 wide; the check runs
# CHECK_WARMUP batches, then CHECK_STEPS compared with the prediction. Disk: ~15 GB at scale 0.25.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/plan_papers}
TARGET_SCALE=${TARGET_SCALE:-0.25}
TARGET_ROOT=${TARGET_ROOT:-$WORK/target}
CHECK_STEPS=${CHECK_STEPS:-8}
CHECK_WARMUP=${CHECK_WARMUP:-2}
CALIBRATION=(--steps "${CAL_STEPS:-10}" --warmup "${CAL_WARMUP:-3}" --repeats "${CAL_REPEATS:-1}")
JOB=(--num-neighbors 15,10,5 --batch-size 1024 --hidden 256)
mkdir -p "$WORK/cal" "$WORK/tgt"

gen() { [ -f "$1/x.rows.json" ] || python -m pyg_dist.datasets.papers_like "$1" --scale "$2"; }
part() {
    [ -f "$3/META.json" ] || pyg-dist-partition --dataset chunked --root "$1" --num-parts "$2" --method fennel \
        --feature-dtype bfloat16 --memory-budget 8GB --out "$3" --quiet
}

gen "$WORK/small" 0.01
gen "$TARGET_ROOT" "$TARGET_SCALE"
part "$WORK/small" 1 "$WORK/cal/parts-1"
part "$WORK/small" 2 "$WORK/cal/parts-2"
part "$WORK/small" 4 "$WORK/cal/parts-4"   # the calibration's 4-rank run (memory with several peers)
if [ -n "${TARGET_PARTS:-}" ]; then ln -sfn "$TARGET_PARTS" "$WORK/tgt/parts-2"; else part "$TARGET_ROOT" 2 "$WORK/tgt/parts-2"; fi

echo "== calibration at scale 0.01 =="
/usr/bin/time -f "calibration: %e s wall, %M KiB peak" pyg-dist-plan --dataset chunked --root "$WORK/small" \
    --work "$WORK/cal" "${JOB[@]}" "${CALIBRATION[@]}" --machines 1 2 --cores "$(nproc)" --json "$WORK/cal.json"
echo "== scale $TARGET_SCALE from those costs, and the job run there =="
pyg-dist-plan --dataset chunked --root "$TARGET_ROOT" --work "$WORK/tgt" "${JOB[@]}" --costs "$WORK/cal/costs.json" \
    --machines 2 --ranks-per-machine 1 --cores "$(nproc)" --check --check-rows 2 --check-steps "$CHECK_STEPS" \
    --check-warmup "$CHECK_WARMUP" --json "$WORK/target.json"
