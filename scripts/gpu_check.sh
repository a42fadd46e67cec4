#!/usr/bin/env bash
# The GPU path, checked on a machine with an NVIDIA GPU in one go (under 8 minutes on one H100 / H200):
#   (a) the tests marked `cuda` (tests/loader/test_device_cuda.py),
#   (b) the demo on the CPU and on CUDA (2 ranks sharing the one GPU: gloo for the gradients), and the
#       node-classification example on CUDA with 1 rank (NCCL) and a GPU feature cache,
#   (c) scripts/bench_gpu.py on the products-shaped graph, 1 rank: steps/s with the model on the CPU vs the GPU,
#       device stage off vs on, GPU cache off vs on, and the share of the copy the stage hides.
# Each stage has its own time limit and log under $OUT (default ./gpu_check_out); the summary and the benchmark's
# table are printed last. Nothing is downloaded: run it from a checkout whose Python has torch (CUDA build),
# torch_geometric, numba, pymetis, scipy, tqdm and pytest (+ pytest-timeout).
#
#   bash scripts/gpu_check.sh                                   # built-in products-shaped generator (scale 1)
#   GRAPH_SCRIPT=/path/products_like.py bash scripts/gpu_check.sh   # the reference graph, generated first
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/pyg_dist_gpu_check}
mkdir -p "$WORK"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR="$WORK/numba"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

stage() {  # stage NAME SECONDS COMMAND...: runs COMMAND with a time limit, its output in $OUT/NAME.log
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(( $(date +%s) - start )) s (limit $limit s)$( [ $rc = 124 ] && echo ' TIMED OUT')" \
        | tee -a "$SUMMARY"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import sys, torch, torch_geometric, numba; print(sys.version.split()[0], 'torch', torch.__version__, \
'pyg', torch_geometric.__version__, 'numba', numba.__version__, 'cuda', torch.cuda.is_available())"
  nproc; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

stage warmup 120 "$PY" -m pyg_dist.ops.warm                        # numba kernels compiled once, cached
stage tests_cuda 200 "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/loader/test_device_cuda.py -rs

GRAPH=${GRAPH:-}
if [ -z "$GRAPH" ] && [ -n "${GRAPH_SCRIPT:-}" ]; then
    GRAPH="$WORK/products_like.pt"
    [ -f "$GRAPH" ] || stage graph 120 "$PY" "$GRAPH_SCRIPT" 2449029 32400000 "$GRAPH"
fi
stage bench 300 "$PY" scripts/bench_gpu.py ${GRAPH:+--graph "$GRAPH"} --cache-dir "$WORK/bench" \
    --steps "${BENCH_STEPS:-30}" ${BENCH_ARGS:-}

DEMO=(examples/distributed/demo.py --epochs "${DEMO_EPOCHS:-3}")
stage demo_cpu 150 env CUDA_VISIBLE_DEVICES= "$PY" "${DEMO[@]}"
stage demo_cuda_2ranks 150 "$PY" "${DEMO[@]}"
stage example_cuda_1rank 150 "$PY" "${DEMO[@]}" --num-parts 1 --keep "$WORK/demo-1"
if [ -f "$WORK/demo-1/META.json" ]; then
    stage example_cuda_gpu_cache 120 "$PY" -m torch.distributed.run --standalone --nproc-per-node 1 \
        examples/distributed/node_classification.py --partition-dir "$WORK/demo-1" --epochs "${DEMO_EPOCHS:-3}" \
        --gpu-cache-mb 64
fi

echo
echo "== accuracy (test_acc, last line of each run) =="
for f in demo_cpu demo_cuda_2ranks example_cuda_1rank example_cuda_gpu_cache; do
    [ -f "$OUT/$f.log" ] && echo "$f: $(grep -o 'test_acc=[0-9.]*' "$OUT/$f.log" | tail -n 1) \
$(grep -o 'device=[a-z0-9:]*' "$OUT/$f.log" | head -n 1)"
done | tee -a "$SUMMARY"
echo
echo "== tests =="
tail -n 3 "$OUT/tests_cuda.log"
echo
echo "== stages =="
cat "$SUMMARY"
echo
echo "== bench_gpu.py =="
grep -v '^#' "$OUT/bench.log" | tail -n 15
