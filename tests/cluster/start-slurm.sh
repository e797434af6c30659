#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests/cluster/test_cluster.py (and for trying the SLURM
# profile without a cluster). Debian's slurm-wlm and munge (SLURM 22.05): slurmctld and slurmd on
# this host, one partition `debug` with every core, no accounting database (so the executor plugin
# polls with `squeue`; MinJobAge keeps finished jobs visible to it for an hour).
#
#   sudo tests/cluster/start-slurm.sh          # install if missing, configure, start; idempotent
#   sudo tests/cluster/start-slurm.sh stop     # stop the daemons (packages and config stay)
#   tests/cluster/start-slurm.sh status        # sinfo, or exit 1 when the cluster is down
#
# Needs root and Debian's package registry (apt-get) on first use. Writes /etc/slurm/slurm.conf
# and /etc/munge/munge.key only when they are not this script's already.
set -euo pipefail

action="${1:-start}"
conf=/etc/slurm/slurm.conf
marker="# written by pcast-fp8 tests/cluster/start-slurm.sh"

status() { sinfo -h -o '%P %a %t %D' 2>/dev/null | grep -Eq 'idle|mix|alloc'; }

stop() {
    for d in slurmd slurmctld munged; do
        pkill -x "$d" 2>/dev/null || true
    done
    for _ in $(seq 50); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged >/dev/null || return 0
        sleep 0.2
    done
    echo "start-slurm.sh: daemons still running after 10 s" >&2
    return 1
}

case "$action" in
    status) status && sinfo; exit $? ;;
    stop) stop; exit $? ;;
    start) ;;
    *) echo "start-slurm.sh: unknown action '$action'; allowed: start, stop, status" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
    echo "start-slurm.sh: needs root (it installs packages and starts daemons); run it with sudo" >&2
    exit 2
fi

if status && grep -qF "$marker" "$conf" 2>/dev/null; then
    echo "start-slurm.sh: already running"; sinfo; exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends slurm-wlm munge
fi

host="$(hostname -s)"
cpus="$(nproc)"
mem_mb="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge
cat > "$conf.tmp" <<CONF
$marker
ClusterName=pcast
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=3600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
mv "$conf.tmp" "$conf"

if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key

stop  # a half-started earlier attempt, or daemons with another config
# munged as the munge user where that user exists (Debian's package creates it), else as root
if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c /usr/sbin/munged
else
    /usr/sbin/munged --force
fi
/usr/sbin/slurmctld -c   # -c: a clean start, forgetting jobs of an earlier run
/usr/sbin/slurmd

for _ in $(seq 60); do
    if status; then
        echo "start-slurm.sh: running"; sinfo; exit 0
    fi
    sleep 1
done
echo "start-slurm.sh: the node did not come up within 60 s; the logs:" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
