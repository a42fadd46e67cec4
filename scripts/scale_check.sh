#!/usr/bin/env bash
# The scale issue's device check in one go, on a machine with many cores (16) and, when there is one, a GPU:
#   (a) strong scaling on its CPUs: the reference graph partitioned into 1, 2, 4 and 8 (METIS), one rank per part,
#       the node-classification example for STEPS steps each with its stage split (--stage-log), 16/N threads a rank;
#   (b) the one-machine sampler at 1, 2, 4, 8 and 16 threads (scripts/bench_sampler.py);
#   (c) one rank on the GPU fed by 0, 2, 4 and 8 sampler workers: does the GPU still wait for its batches?
#       (skipped without CUDA).
# Each stage has its own time limit and log under $OUT (default ./scale_check_out); the tables are printed last
# (scripts/scale_report.py reads the stage records). Nothing is downloaded; the graph is generated first.
#
#   bash scripts/scale_check.sh                              # the reference graph (pyg_dist.datasets.products_like)
#   NODES=200000 STEPS=5 RANKS="1 2" THREADS="1 2" bash scripts/scale_check.sh   # a quick look on a small machine
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/scale_check_out}
WORK=${WORK:-/tmp/pyg_dist_scale_check}
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
STEPS=${STEPS:-30}
RANKS=${RANKS:-"1 2 4 8"}
THREADS=${THREADS:-"1 2 4 8 16"}
WORKERS=${WORKERS:-"0 2 4 8"}
CORES=$(nproc)
. scripts/stages.sh  # PYTHONPATH, $SUMMARY, stage NAME SECONDS COMMAND...

"$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', \
torch.cuda.is_available()); print('cores', $CORES)" > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
stage warmup 120 "$PY" -m pyg_dist.ops.warm

GRAPH=${GRAPH:-$WORK/products_like.pt}
if [ ! -f "$GRAPH" ]; then
    stage graph 300 "$PY" -m pyg_dist.datasets.products_like "$GRAPH" ${NODES:+--num-nodes "$NODES" --num-pairs $((NODES * 13))}
fi
TRAIN=(examples/distributed/node_classification.py --epochs 1 --max-steps "$STEPS" --eval-steps 2
       --num-neighbors 15,10,5 --batch-size 1024 --hidden 256 --trim --quiet)
for n in $RANKS; do
    parts="$WORK/parts-$n"
    [ -f "$parts/META.json" ] || stage "partition_$n" 1200 "$PY" -m pyg_dist.partition.cli --dataset products_like \
        --root "$GRAPH" --num-parts "$n" --x-dim 100 --num-classes 47 --train-frac 0.1 --out "$parts" --quiet
    rm -f "$OUT/cpu_$n.jsonl"
    stage "cpu_$n" 1200 env OMP_NUM_THREADS=$(( CORES / n > 0 ? CORES / n : 1 )) CUDA_VISIBLE_DEVICES= \
        "$PY" -m torch.distributed.run --standalone --nproc-per-node "$n" "${TRAIN[@]}" --partition-dir "$parts" \
        --device cpu --stage-log "$OUT/cpu_$n.jsonl"
done
stage sampler_threads 1200 "$PY" scripts/bench_sampler.py --graph "$GRAPH" --cache-dir "$WORK/bench" \
    --threads "$(echo $THREADS | tr ' ' ',')" --backends numba
if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    for w in $WORKERS; do
        rm -f "$OUT/gpu_$w.jsonl"
        stage "gpu_workers_$w" 1200 "$PY" -m torch.distributed.run --standalone --nproc-per-node 1 "${TRAIN[@]}" \
            --partition-dir "$WORK/parts-1" --device cuda --num-workers "$w" --stage-log "$OUT/gpu_$w.jsonl"
    done
else
    echo "gpu_workers: skipped (no CUDA device)" | tee -a "$SUMMARY"
fi

echo
"$PY" scripts/scale_report.py "$OUT"
echo
echo "== one-machine sampler by threads (bench_sampler.py) =="
grep -E '^(graph|backend|numba|torch|pyg)' "$OUT/sampler_threads.log" | tail -n 12
echo
echo "== stages =="
cat "$SUMMARY"
