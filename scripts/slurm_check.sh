#!/usr/bin/env bash
# examples/slurm/train.sbatch, end to end on this machine: a one-host Slurm (scripts/slurm_local.sh:
# installed and started if needed), the example submitted with sbatch on the node's CPUs, waited for,
# its output printed and checked for the `test_acc=` line. Exit status 0 only when the job completed
# and printed test_acc=. For CI or a developer; run as root (Slurm is installed and started):
#
#   bash scripts/slurm_check.sh
#   SLURM_CHECK_TIMEOUT=900 PYG_DIST_EPOCHS=5 bash scripts/slurm_check.sh
#
# Settings (environment): PYG_DIST_PYTHON (default: the checkout's .venv/bin/python if there is one,
# else `python`), SLURM_CHECK_TIMEOUT (seconds the job may take, queueing included; default 600),
# SLURM_CHECK_KEEP=1 (keep the job's folder: output file, partitions are removed by the job itself),
# SLURM_CHECK_STOP (1: stop Slurm afterwards; 0: leave it running; default: stop it only when this
# script started it). PYG_DIST_GRAPH_NODES (default 5000) and PYG_DIST_EPOCHS (default 3) size the run;
# every other PYG_DIST_* setting of train.sbatch passes through (sbatch --export=ALL).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SBATCH_SCRIPT=$REPO/examples/slurm/train.sbatch
TIMEOUT=${SLURM_CHECK_TIMEOUT:-600}
PATH=$PATH:/usr/sbin:/sbin

say() { printf '[slurm_check] %s\n' "$*"; }
fail() { printf '[slurm_check] FAILED: %s\n' "$*" >&2; exit 1; }

if [ -z "${PYG_DIST_PYTHON:-}" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PYG_DIST_PYTHON=$REPO/.venv/bin/python; else PYG_DIST_PYTHON=python; fi
fi
"$PYG_DIST_PYTHON" -c "import torch, pyg_dist" \
    || fail "$PYG_DIST_PYTHON cannot import torch and pyg_dist (set PYG_DIST_PYTHON)"

# ---- Slurm up ----
WAS_RUNNING=0
if bash "$HERE/slurm_local.sh" status >/dev/null 2>&1; then WAS_RUNNING=1; fi
STOP=${SLURM_CHECK_STOP:-$((1 - WAS_RUNNING))}
bash "$HERE/slurm_local.sh" start
NODE=$(hostname -s)
finish() {
    local rc=$?
    if [ -n "${JOB:-}" ] && squeue -h -j "$JOB" 2>/dev/null | grep -q .; then
        say "cancelling job $JOB"; scancel "$JOB" || true
    fi
    cd "$REPO"
    if [ -n "${WORK:-}" ]; then
        if [ "${SLURM_CHECK_KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
    fi
    if [ "$STOP" = 1 ]; then bash "$HERE/slurm_local.sh" stop || true; fi
    exit $rc
}
trap finish EXIT

# ---- ranks: 2 on one node when it has 2 CPUs or more (the demo's layout: 2 partitions, RPC between
# the ranks), else 1 (a 1-partition world: no RPC, but the same launch path) ----
CPUS=$(sinfo -h -N -n "$NODE" -o '%c' | head -n 1)
[ -n "$CPUS" ] || fail "sinfo does not list node $NODE"
if [ "$CPUS" -ge 2 ]; then
    NPROC=2
    say "node $NODE has $CPUS CPUs: 2 trainer ranks on 1 node (2 partitions, RPC between them)"
else
    NPROC=1
    say "node $NODE has $CPUS CPU: 1 trainer rank (2 ranks would share one core; the job would take minutes)"
fi

# ---- submit from a scratch folder (the job's output file and partitions go there) ----
WORK=$(mktemp -d /tmp/pyg-dist-slurm-check.XXXXXX)
chmod 755 "$WORK"
cd "$WORK"
export PYG_DIST_PYTHON PYG_DIST_REPO=$REPO PYG_DIST_NPROC_PER_NODE=$NPROC
export PYG_DIST_GRAPH_NODES=${PYG_DIST_GRAPH_NODES:-5000} PYG_DIST_EPOCHS=${PYG_DIST_EPOCHS:-3}
# settings of an enclosing torchrun / job must not leak into the job
unset PYG_DIST_RPC_PORT MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK
while IFS='=' read -r name _; do
    case "$name" in TORCHELASTIC_*|SLURM_*) [ "$name" = SLURM_CONF ] || unset "$name" ;; esac
done < <(env)
say "sbatch $SBATCH_SCRIPT (graph $PYG_DIST_GRAPH_NODES nodes, $PYG_DIST_EPOCHS epochs, python $PYG_DIST_PYTHON)"
START=$SECONDS
JOB=$(sbatch --parsable --export=ALL --nodes=1 --ntasks-per-node=1 --cpus-per-task="$CPUS" \
      --time=$(( (TIMEOUT + 59) / 60 )) --output="$WORK/slurm-%j.out" "$SBATCH_SCRIPT")
JOB=${JOB%%;*}
OUT=$WORK/slurm-$JOB.out
say "job $JOB submitted; waiting up to ${TIMEOUT}s"

STATE=""
while squeue -h -j "$JOB" 2>/dev/null | grep -q .; do
    NOW=$(squeue -h -j "$JOB" -o '%T' 2>/dev/null || true)
    if [ "$NOW" != "$STATE" ]; then say "job $JOB: ${NOW:-?} (${SECONDS}s)"; STATE=$NOW; fi
    if [ $((SECONDS - START)) -ge "$TIMEOUT" ]; then
        say "job $JOB still ${NOW:-running} after ${TIMEOUT}s; its output so far:"
        cat "$OUT" 2>/dev/null || true
        fail "timeout after ${TIMEOUT}s"
    fi
    sleep 2
done
ELAPSED=$((SECONDS - START))
INFO=$(scontrol show job "$JOB" 2>/dev/null || true)
JSTATE=$(grep -o 'JobState=[A-Z_]*' <<<"$INFO" | head -n 1 | cut -d= -f2)
JEXIT=$(grep -o ' ExitCode=[0-9:]*' <<<"$INFO" | head -n 1 | cut -d= -f2)

echo "------------------------------- job $JOB output ($OUT) -------------------------------"
cat "$OUT" 2>/dev/null || say "(no output file)"
echo "----------------------------------------------------------------------------------------"
say "job $JOB: state ${JSTATE:-unknown}, exit code ${JEXIT:-unknown}, ${ELAPSED}s from submission to end"
LAST=$(grep -v '^\s*$' "$OUT" 2>/dev/null | tail -n 1 || true)
if [ "${JSTATE:-}" != COMPLETED ] && [ -n "${JSTATE:-}" ]; then
    fail "job $JOB ended $JSTATE (exit code $JEXIT); daemon logs: ${SLURM_LOCAL_STATE_DIR:-/var/spool/slurm-local}/log/"
fi
[[ "$LAST" =~ ^test_acc=([0-9.]+)$ ]] || fail "the job's output does not end with test_acc=<float> (last line: '$LAST')"
say "PASSED: $LAST (job $JOB, ${ELAPSED}s)"
