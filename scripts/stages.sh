# Sourced by the one-go machine checks (gpu_check.sh, scale_check.sh) after they set OUT and WORK: the Python
# path of this checkout, the summary file, and `stage NAME SECONDS COMMAND...` (COMMAND under a time limit, its
# output in $OUT/NAME.log, one line in $OUT/summary.txt).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR="$WORK/numba"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

stage() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc in $(( $(date +%s) - start )) s (limit $limit s)$( [ $rc = 124 ] && echo ' TIMED OUT')" \
        | tee -a "$SUMMARY"
}
