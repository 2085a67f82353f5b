#!/usr/bin/env bash
# A single-node Slurm cluster on localhost for the Slurm executor test: munge, slurmctld and
# slurmd in the background, no systemd, state under a temporary directory.
#
#   tests/slurm/cluster.sh start   # install Debian's packages if missing, write /etc/slurm/slurm.conf, start
#   tests/slurm/cluster.sh stop    # stop the daemons, remove the state (the config is left for inspection)
#
# slurm.conf must sit at /etc/slurm/slurm.conf: snakemake-executor-plugin-slurm's in-job helper drops
# SLURM_CONF. No slurmdbd: the executor is told to poll with squeue (--slurm-status-command squeue).
set -euo pipefail
STATE=${ZEROGATE_SLURM_STATE:-/tmp/zerogate-slurm}
CONF=/etc/slurm/slurm.conf

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null && return
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
    local host cpus mem_mb
    host=$(hostname -s)
    cpus=$(nproc)
    # Leave a quarter of RAM to the OS and the test itself.
    mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) * 3 / 4 / 1024 ))
    mkdir -p /etc/slurm "$STATE/state" "$STATE/spool" "$STATE/log"
    cat >"$CONF" <<CONF
# Written by zerogate's tests/slurm/cluster.sh: a one-node test cluster on $host.
ClusterName=zerogate-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
}

start() {
    install_packages
    write_config
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
    pgrep -x slurmctld >/dev/null || slurmctld -c
    pgrep -x slurmd >/dev/null || slurmd -c
    for _ in $(seq 60); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then
            echo "slurm: one node idle ($(hostname -s))"
            return 0
        fi
        sleep 1
    done
    echo "slurm: the node did not become idle in 60 s" >&2
    sinfo >&2 || true
    tail -n 20 "$STATE"/log/*.log >&2 || true
    return 1
}

stop() {
    for daemon in slurmd slurmctld munged; do
        pkill -x "$daemon" 2>/dev/null || true
    done
    for _ in $(seq 20); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
        sleep 0.5
    done
    rm -rf "$STATE"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
