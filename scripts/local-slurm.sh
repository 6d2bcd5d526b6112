#!/usr/bin/env bash
# A real SLURM on this one machine, for the tests and the demo: slurmctld, two slurmd nodes
# (node1, node2) with 4 fake H100s each, and munge. Needs root and the Debian packages that
# scripts/setup.sh installs.
#
#   scripts/local-slurm.sh start    # idempotent: starts only what is not running yet
#   scripts/local-slurm.sh status   # daemons, nodes; exit 0 when all are up
#   scripts/local-slurm.sh stop     # cancels the local jobs, stops the daemons this script started
#
# Everything it writes lives in $EVALPIPE_SLURM_DIR (default /var/lib/evalpipe-slurm), plus a
# link /etc/slurm/slurm.conf -> that folder (so sbatch/squeue find it; left alone if the
# machine already has its own) and the node names in /etc/hosts.
set -euo pipefail

STATE=${EVALPIPE_SLURM_DIR:-/var/lib/evalpipe-slurm}
NODES=(node1 node2)
NODE_CPUS=${EVALPIPE_SLURM_NODE_CPUS:-4}
NODE_MEM_MB=${EVALPIPE_SLURM_NODE_MEM_MB:-8192}
GPUS_PER_NODE=4
CTLD_PORT=${EVALPIPE_SLURM_PORT:-6817}
SLURMD_PORT0=17001 # node K listens on SLURMD_PORT0 + K - 1
CONF=$STATE/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
MARK="# evalpipe local SLURM"

log() { printf 'local-slurm: %s\n' "$*"; }
die() {
    printf 'local-slurm: error: %s\n' "$*" >&2
    exit 1
}

# PID from FILE when that process is alive and runs PROGRAM, else nothing (stale files ignored).
live_pid() {
    local file=$1 program=$2 pid
    [ -s "$file" ] || return 1
    pid=$(tr -dc 0-9 <"$file")
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "$program" ] || return 1
    echo "$pid"
}

# Clients (sbatch, squeue) read /etc/slurm/slurm.conf unless SLURM_CONF says otherwise.
export SLURM_CONF=$CONF

write_config() {
    local host nodelist last
    host=$(hostname -s)
    last=$((${#NODES[@]}))
    nodelist="node[1-$last]"
    mkdir -p "$STATE"/{ctld,spool,log,gpu}
    for i in $(seq 0 $((GPUS_PER_NODE - 1))); do
        # Devices must be device files; /dev/null stands in for a GPU.
        ln -sfn /dev/null "$STATE/gpu/nvidia$i"
    done
    cat >"$CONF.new" <<EOF
$MARK: written by scripts/local-slurm.sh; rewritten on every start.
ClusterName=evalpipe-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
# No cgroups here: track processes by parentage, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Declared CPUs/memory count, not what this machine has: two small "nodes" on one host.
SlurmdParameters=config_overrides
DefMemPerCPU=1024
ReturnToService=2
JobRequeue=1
# Finished jobs stay visible to squeue/scontrol for 10 minutes (there is no accounting).
MinJobAge=600
KillWait=5
# The controller shares two cores with CPU engine jobs: give its RPCs 30 s, not 10.
MessageTimeout=30
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
GresTypes=gpu
NodeName=$nodelist NodeHostname=$host NodeAddr=127.0.0.1 Port=[$SLURMD_PORT0-$((SLURMD_PORT0 + last - 1))] CPUs=$NODE_CPUS RealMemory=$NODE_MEM_MB Gres=gpu:h100:$GPUS_PER_NODE State=UNKNOWN
PartitionName=local Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$STATE/gres.conf.new" <<EOF
$MARK
AutoDetect=off
NodeName=$nodelist Name=gpu Type=h100 File=$STATE/gpu/nvidia[0-$((GPUS_PER_NODE - 1))]
EOF
    # Status 0 when the files changed, so running daemons are restarted onto them.
    local changed=0
    if cmp -s "$CONF.new" "$CONF" && cmp -s "$STATE/gres.conf.new" "$STATE/gres.conf"; then
        changed=1
    fi
    mv "$CONF.new" "$CONF"
    mv "$STATE/gres.conf.new" "$STATE/gres.conf"
    return "$changed"
}

link_config() {
    mkdir -p /etc/slurm
    if [ -L "$ETC_CONF" ] || [ ! -e "$ETC_CONF" ]; then
        ln -sfn "$CONF" "$ETC_CONF"
    elif [ "$(readlink -f "$ETC_CONF")" != "$CONF" ]; then
        log "$ETC_CONF belongs to another SLURM; left alone. Use: export SLURM_CONF=$CONF"
    fi
}

add_hosts() {
    local name
    for name in "${NODES[@]}"; do
        getent hosts "$name" >/dev/null || echo "127.0.0.1 $name $MARK" >>/etc/hosts
    done
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0 # a munged is already serving the default socket (ours or the machine's)
    fi
    [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing; reinstall munge (scripts/setup.sh)."
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 0755 /run/munge
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid
    for _ in $(seq 50); do
        if live_pid /run/munge/munged.pid munged >/dev/null; then
            live_pid /run/munge/munged.pid munged >"$STATE/munged.pid"
            return 0
        fi
        sleep 0.1
    done
    die "munged did not start; see /var/log/munge/munged.log"
}

start_daemons() {
    local node
    if ! live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null; then
        slurmctld -f "$CONF" || die "slurmctld did not start; see $STATE/log/slurmctld.log"
    fi
    for node in "${NODES[@]}"; do
        if ! live_pid "$STATE/slurmd-$node.pid" slurmd >/dev/null; then
            slurmd -f "$CONF" -N "$node" || die "slurmd $node did not start; see $STATE/log/slurmd-$node.log"
        fi
    done
}

wait_ready() {
    local states
    for _ in $(seq 60); do
        states=$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')
        if [ -n "$states" ] && ! echo "$states" | grep -Eqv '^((idle|mix|alloc|comp)[*~#]? ?)+$'; then
            log "ready: ${#NODES[@]} nodes × $GPUS_PER_NODE gpu:h100, $NODE_CPUS CPUs, $NODE_MEM_MB MB each"
            return 0
        fi
        sleep 0.5
    done
    sinfo -N >&2 || true
    die "nodes did not become idle within 30 s; see $STATE/log/"
}

stop_pid() {
    local file=$1 program=$2 pid
    if pid=$(live_pid "$file" "$program"); then
        kill -TERM "$pid"
        for _ in $(seq 100); do
            [ -d "/proc/$pid" ] || break
            sleep 0.1
        done
        [ -d "/proc/$pid" ] && kill -KILL "$pid"
        log "stopped $program ($pid)"
    fi
    rm -f "$file"
}

cmd_start() {
    [ "$(id -u)" = 0 ] || die "run as root (slurmd starts jobs as their users)."
    command -v slurmctld >/dev/null || die "SLURM is not installed; run scripts/setup.sh as root."
    mkdir -p "$STATE"
    start_munge
    if write_config && live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null; then
        log "configuration changed; restarting the daemons"
        stop_daemons
    fi
    link_config
    add_hosts
    start_daemons
    wait_ready
}

stop_daemons() {
    local node
    for node in "${NODES[@]}"; do
        stop_pid "$STATE/slurmd-$node.pid" slurmd
    done
    stop_pid "$STATE/slurmctld.pid" slurmctld
}

cmd_stop() {
    if live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null; then
        # Jobs on this cluster are ours: end them so no job steps outlive their slurmd.
        scancel --full --quiet --partition=local 2>/dev/null || true
        for _ in $(seq 50); do
            [ -z "$(squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    stop_daemons
    stop_pid "$STATE/munged.pid" munged
}

cmd_status() {
    local ok=0 name pid
    for name in slurmctld "${NODES[@]/#/slurmd-}"; do
        if pid=$(live_pid "$STATE/$name.pid" "${name%%-*}"); then
            log "$name running (pid $pid)"
        else
            log "$name not running"
            ok=1
        fi
    done
    if [ "$ok" = 0 ]; then
        sinfo -N -o '%N %P %t %c %m %G'
    fi
    return "$ok"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
