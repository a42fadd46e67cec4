#!/usr/bin/env bash
# A one-machine Slurm cluster for trying examples/slurm/train.sbatch (Debian / Ubuntu, run as root).
#
#   bash scripts/slurm_local.sh install   # apt-get install slurm-wlm + munge (if absent)
#   bash scripts/slurm_local.sh start     # install if needed, write slurm.conf, start munged, slurmctld,
#                                         # slurmd, wait until `sinfo` shows the node idle
#   bash scripts/slurm_local.sh status    # daemons, sinfo, squeue
#   bash scripts/slurm_local.sh stop      # stop the three daemons this script started
#
# The cluster: one controller and one compute node on this host (named `hostname -s`), its CPUs,
# sockets, cores and memory as `slurmd -C` reports them, one partition "local". No cgroups, no systemd,
# no accounting: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, JobAcctGatherType=
# jobacct_gather/none, so it also runs inside containers and VMs without a cgroup hierarchy.
# Daemons run as root (SlurmUser=root, SlurmdUser=root); munged runs as the `munge` user.
#
# Every subcommand is idempotent: a daemon that runs is left alone, a config that is current is not
# rewritten. A slurm.conf that this script did not write is never overwritten (set
# SLURM_LOCAL_FORCE=1 to replace it; the old one is kept as slurm.conf.bak.<time>).
#
# Settings (environment): SLURM_LOCAL_CONF_DIR (default /etc/slurm, where Debian's slurm reads its
# config), SLURM_LOCAL_STATE_DIR (default /var/spool/slurm-local: state, spool, logs, pid files),
# SLURM_LOCAL_TIMEOUT (seconds to wait for the node to come up, default 60).
set -euo pipefail

CONF_DIR=${SLURM_LOCAL_CONF_DIR:-/etc/slurm}
STATE_DIR=${SLURM_LOCAL_STATE_DIR:-/var/spool/slurm-local}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
CONF=$CONF_DIR/slurm.conf
MARKER="# written by pyg_dist scripts/slurm_local.sh"
CLUSTER=pyglocal
PARTITION=local
MUNGE_KEY=/etc/munge/munge.key
MUNGE_RUN=/run/munge
MUNGE_PID=$MUNGE_RUN/munged.pid
CTLD_PID=$STATE_DIR/slurmctld.pid
SLURMD_PID=$STATE_DIR/slurmd.pid
PATH=$PATH:/usr/sbin:/sbin

say() { printf '[slurm_local] %s\n' "$*"; }
die() { printf '[slurm_local] ERROR: %s\n' "$*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root (it installs packages, writes $CONF and starts daemons)"
}

installed() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
              && command -v munged >/dev/null; }

cmd_install() {
    if installed; then
        say "slurm and munge are installed ($(slurmd -V 2>/dev/null))"
        return 0
    fi
    need_root
    command -v apt-get >/dev/null || die "apt-get not found: install slurm-wlm and munge with your package manager"
    say "installing slurm-wlm and munge with apt-get (a few minutes)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends slurm-wlm munge
    installed || die "apt-get finished but slurmctld / slurmd / sbatch / munged are still missing"
    say "installed: $(slurmd -V)"
}

# `slurmd -C` prints e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1
# RealMemory=23000"; the node line keeps its hardware fields (Slurm drains a node configured with more).
node_line() {
    local host=$1 hw
    hw=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -n1 | tr ' ' '\n' \
         | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
    if [ -z "$hw" ]; then
        hw="CPUs=$(nproc)"
        say "slurmd -C printed nothing usable; configuring $hw" >&2
    fi
    echo "NodeName=$host NodeAddr=$host ${hw% } State=UNKNOWN"
}

write_conf() {
    local host new
    host=$(hostname -s)
    new=$(mktemp)
    cat >"$new" <<EOF
$MARKER: a one-host cluster (controller and node: $host)
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SwitchType=switch/none
# no cgroups (containers, VMs without a delegated hierarchy)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/d
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=60
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
MinJobAge=300
$(node_line "$host")
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    mkdir -p "$CONF_DIR"
    if [ -f "$CONF" ] && cmp -s <(grep -v '^#' "$CONF") <(grep -v '^#' "$new"); then
        say "$CONF is current"
        rm -f "$new"
        return 0
    fi
    if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
        if [ "${SLURM_LOCAL_FORCE:-0}" != 1 ]; then
            rm -f "$new"
            die "$CONF exists and was not written by this script; not touching it (SLURM_LOCAL_FORCE=1 replaces it, keeping a backup)"
        fi
        cp -p "$CONF" "$CONF.bak.$(date +%Y%m%d%H%M%S)"
        say "kept the old $CONF as $CONF.bak.*"
    fi
    install -m 0644 "$new" "$CONF"
    rm -f "$new"
    # Slurm 24.05+ knows CgroupPlugin=disabled (slurmd sets cgroups up even without cgroup plugins
    # otherwise); older releases refuse that value and need no cgroup.conf here.
    local major
    major=$(slurmd -V 2>/dev/null | sed -n 's/^slurm[^0-9]*\([0-9]*\)\..*/\1/p')
    if [ "${major:-0}" -ge 24 ] && [ ! -f "$CONF_DIR/cgroup.conf" ]; then
        printf '%s\nCgroupPlugin=disabled\n' "$MARKER" >"$CONF_DIR/cgroup.conf"
        say "wrote $CONF_DIR/cgroup.conf (CgroupPlugin=disabled)"
    fi
    say "wrote $CONF (node: $(node_line "$host" | cut -d' ' -f1,3-))"
    CONF_CHANGED=1
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    if [ ! -s "$MUNGE_KEY" ]; then
        say "creating the munge key $MUNGE_KEY"
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge "$MUNGE_KEY"
    chmod 0700 /etc/munge
    chmod 0400 "$MUNGE_KEY"
    mkdir -p "$MUNGE_RUN" /var/log/munge /var/lib/munge
    chown munge:munge "$MUNGE_RUN" /var/log/munge /var/lib/munge
    chmod 0755 "$MUNGE_RUN"
    if pid_alive "$MUNGE_PID"; then
        say "munged is running (pid $(cat "$MUNGE_PID"))"
    else
        say "starting munged"
        runuser -u munge -- munged
    fi
    local i
    for i in $(seq 1 20); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "munge does not answer (munge -n | unmunge); see /var/log/munge/munged.log"
}

start_daemon() {   # name pidfile
    local name=$1 pidfile=$2
    if pid_alive "$pidfile"; then
        if [ "${CONF_CHANGED:-0}" = 1 ]; then
            say "$name is running with an old config: reconfiguring"
            scontrol reconfigure >/dev/null 2>&1 || true
        else
            say "$name is running (pid $(cat "$pidfile"))"
        fi
        return 0
    fi
    say "starting $name (log: $STATE_DIR/log/$name.log)"
    "$name" || die "$name did not start; tail of its log:
$(tail -n 30 "$STATE_DIR/log/$name.log" 2>/dev/null)"
}

node_state() { sinfo -h -N -n "$(hostname -s)" -o '%T' 2>/dev/null | head -n1; }

wait_idle() {
    local host state="" i
    host=$(hostname -s)
    say "waiting up to ${TIMEOUT}s for node $host to be idle"
    for i in $(seq 1 "$TIMEOUT"); do
        state=$(node_state || true)
        case "$state" in
            idle|mixed|allocated|completing) say "node $host is $state"; sinfo; return 0 ;;
            down*|drain*|fail*)
                # e.g. left down by an earlier run whose slurmd went away; ReturnToService=2 usually
                # handles it once slurmd registers, this covers a node drained for another reason
                scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    sinfo -N -l || true
    scontrol show node "$host" 2>/dev/null | grep -E 'State|Reason' || true
    die "node $host is '${state:-unknown}' after ${TIMEOUT}s; logs: $STATE_DIR/log/slurmctld.log, $STATE_DIR/log/slurmd.log"
}

cmd_start() {
    need_root
    cmd_install
    mkdir -p "$STATE_DIR/ctld" "$STATE_DIR/d" "$STATE_DIR/log"
    CONF_CHANGED=0
    write_conf
    start_munge
    start_daemon slurmctld "$CTLD_PID"
    local i
    for i in $(seq 1 30); do scontrol ping >/dev/null 2>&1 && break; sleep 1; done
    scontrol ping >/dev/null 2>&1 || die "slurmctld does not answer scontrol ping; see $STATE_DIR/log/slurmctld.log"
    start_daemon slurmd "$SLURMD_PID"
    wait_idle
    say "ready: submit with sbatch (partition '$PARTITION'); stop with: bash $0 stop"
}

stop_pid() {   # name pidfile
    local name=$1 pidfile=$2 pid i
    if ! pid_alive "$pidfile"; then
        say "$name is not running"
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    say "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }; sleep 0.5; done
    say "$name (pid $pid) ignored SIGTERM for 15s: SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

cmd_stop() {
    need_root
    # slurmd first (running jobs are killed by it), then the controller, then munge
    stop_pid slurmd "$SLURMD_PID"
    stop_pid slurmctld "$CTLD_PID"
    stop_pid munged "$MUNGE_PID"
    say "stopped"
}

cmd_status() {
    local rc=0
    if ! installed; then say "slurm / munge not installed (bash $0 install)"; return 3; fi
    for d in "munged:$MUNGE_PID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
        if pid_alive "${d#*:}"; then say "${d%%:*}: running (pid $(cat "${d#*:}"))"
        else say "${d%%:*}: not running"; rc=3; fi
    done
    if [ $rc -eq 0 ]; then sinfo -N -l || rc=3; squeue || true; fi
    return $rc
}

case "${1:-}" in
    install) need_root; cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
