#!/usr/bin/env bash
# A real two-node SLURM on this machine, for the cluster tests (tests/slurm): Debian's slurmctld, slurmd and munge,
# no accounting database. Both nodes are this host (NodeAddr 127.0.0.1 and 127.0.0.2, one slurmd each on its own
# port), so sbatch, srun -N2 and a Ray cluster across the allocation's nodes run as on a real cluster.
#
#   tests/slurm/cluster.sh check   exit 0 if it can run here, else print why and exit 3 (not root, not Debian, or a
#                                  SLURM of someone else's on the machine)
#   tests/slurm/cluster.sh start   install the packages when missing, write /etc/slurm/slurm.conf, start munged,
#                                  slurmctld and two slurmd, wait until both nodes are idle
#   tests/slurm/cluster.sh stop    cancel every job, stop the daemons it started (by pid), remove its slurm.conf
#
# The config sits at SLURM's default path on purpose: a config named by SLURM_CONF does not reach the job steps
# that the Snakemake plugin runs with srun ("srun: error: Unable to confirm allocation"). State, logs and pids go
# to DPPO_BENCH_SLURM_STATE (default /var/tmp/dppo-bench-slurm).
set -euo pipefail

STATE=${DPPO_BENCH_SLURM_STATE:-/var/tmp/dppo-bench-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by dppo-bench tests/slurm/cluster.sh"
CLUSTER=dppo-ci
NODES=(node1 node2)
PACKAGES=(slurmctld slurmd slurm-client munge)

say() { echo "slurm-ci: $*" >&2; }

# Why this machine cannot host the test cluster (empty: it can).
unfit() {
    if [[ $(id -u) != 0 ]]; then echo "needs root (it writes $CONF and starts SLURM's daemons)"; return; fi
    if ! command -v apt-get >/dev/null || ! grep -qi debian /etc/os-release 2>/dev/null; then
        echo "needs Debian's slurm packages (apt-get on a Debian-family system)"; return
    fi
    if [[ -e $CONF ]] && ! grep -qF "$MARK" "$CONF"; then echo "$CONF exists and is not ours: a real SLURM host"; return; fi
    if [[ ! -s $STATE/pids ]] && pids_of slurmctld | grep -q .; then
        echo "a slurmctld not started by this script is running"; return
    fi
}

# pids of running processes whose executable is /usr/sbin/<name> (read-only: for the checks above and below)
pids_of() {
    local exe
    for exe in /proc/[0-9]*/exe; do
        [[ $(readlink "$exe" 2>/dev/null) == "/usr/sbin/$1"* ]] && { local p=${exe#/proc/}; echo "${p%/exe}"; }
    done
    return 0
}

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    ((${#missing[@]})) || return 0
    say "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$STATE/apt.log" 2>&1 || {
        apt-get update -q >>"$STATE/apt.log" 2>&1 &&
            apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"$STATE/apt.log" 2>&1
    } || { tail -20 "$STATE/apt.log" >&2; exit 1; }
}

write_conf() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(($(nproc) > 4 ? $(nproc) : 4)) # at least the 4 CPUs of a verl run's evaluation job (its math-verify workers)
    mem=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 / 2)) # MB: half the machine's memory per node
    mkdir -p "$(dirname "$CONF")"
    cat >"$CONF" <<EOF
$MARK: a two-node test cluster on $host
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=6817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# no accounting: sacct has nothing to answer, so the profile's status command is squeue
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# squeue shows a finished job this long; the plugin's squeue status queries need at least 3 x its first wait, and
# the tests count a run's jobs in squeue after it ends (tiny_smoke took 550 s in a loaded CI: 300 lost its first)
MinJobAge=3600
KillWait=10
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdSpoolDir=$STATE/%n
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmdLogFile=$STATE/slurmd-%n.log
NodeName=${NODES[0]} NodeHostname=$host NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=${NODES[1]} NodeHostname=$host NodeAddr=127.0.0.2 Port=6819 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# Start a daemon in the foreground of its own session; its pid goes to $STATE/pids.
spawn() {
    local name=$1
    shift
    setsid "$@" </dev/null >>"$STATE/$name.out" 2>&1 &
    echo "$name $!" >>"$STATE/pids"
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        say "using the munged already running"
        return
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    spawn munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground
    wait_for munge 'munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1'
}

# wait_for WHAT CONDITION [SECONDS]
wait_for() {
    local deadline=$((SECONDS + ${3:-60}))
    until eval "$2"; do
        if ((SECONDS >= deadline)); then
            say "$1 not ready after ${3:-60} s"
            tail -n 20 "$STATE"/*.log "$STATE"/*.out >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.5
    done
}

nodes_idle() {
    [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l) == "${#NODES[@]}" ]]
}

start() {
    local why
    why=$(unfit)
    if [[ -n $why ]]; then say "cannot start: $why"; exit 3; fi
    if [[ -s $STATE/pids ]]; then say "a cluster of an earlier start is still up: stopping it first"; stop; fi
    mkdir -p "$STATE"
    rm -f "$STATE"/*.log "$STATE"/*.out
    install_packages
    write_conf
    start_munge
    spawn slurmctld /usr/sbin/slurmctld -D -c -i
    wait_for slurmctld 'scontrol ping >/dev/null 2>&1'
    local node
    for node in "${NODES[@]}"; do
        mkdir -p "$STATE/$node"
        spawn "slurmd-$node" /usr/sbin/slurmd -D -N "$node"
    done
    wait_for "both nodes idle" nodes_idle
    say "up: $(sinfo -h -N -o '%N %t %c CPUs %m MB' | paste -sd ';')"
}

# Stop every pid of $STATE/pids: TERM to all, then KILL to any still running after 20 s.
stop_daemons() {
    local name pid deadline=$((SECONDS + 20))
    while read -r name pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$STATE/pids"
    while read -r name pid; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
            say "$name ($pid) ignored TERM; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done <"$STATE/pids"
}

# Processes started inside this cluster's jobs (SLURM_CLUSTER_NAME=dppo-ci in their environment) that outlived
# them: proctrack/linuxproc follows a job's processes by parentage, so one whose parent died first escapes its end.
job_stragglers() {
    local env
    for env in /proc/[0-9]*/environ; do
        if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "SLURM_CLUSTER_NAME=$CLUSTER"; then
            local p=${env#/proc/}
            echo "${p%/environ}"
        fi
    done
    return 0
}

end_stragglers() {
    local left
    left=$(job_stragglers | paste -sd ' ')
    [[ -n $left ]] || return 0
    say "ending processes of the cluster's jobs that outlived them: $left"
    # shellcheck disable=SC2086
    kill -TERM $left 2>/dev/null || true
    wait_for "their end" '[[ -z $(job_stragglers) ]]' 10 2>/dev/null || {
        # shellcheck disable=SC2046
        kill -KILL $(job_stragglers) 2>/dev/null || true
    }
}

stop() {
    if [[ ! -s $STATE/pids ]]; then say "not running (no $STATE/pids)"; return 0; fi
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
        say "cancelling jobs: $(echo "$jobs" | paste -sd ' ')"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null || true
        wait_for "the jobs' end" '! squeue -h -t all -o "%A %T" 2>/dev/null | grep -qvE " (COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)$"' 60 || true
    fi
    # job steps (slurmstepd) outlive slurmd: wait until none is left before stopping the daemons
    wait_for "the job steps' end" '! pids_of slurmstepd | grep -q .' 60 || true
    stop_daemons
    end_stragglers
    rm -f "$STATE/pids"
    if grep -qF "$MARK" "$CONF" 2>/dev/null; then rm -f "$CONF"; fi
    local left
    left=$({ for d in slurmstepd slurmd slurmctld; do pids_of "$d"; done; job_stragglers; } | paste -sd ' ')
    if [[ -n $left ]]; then say "still running after stop: pids $left"; exit 1; fi
    say "stopped"
}

case ${1:-} in
check)
    why=$(unfit)
    if [[ -n $why ]]; then echo "$why"; exit 3; fi
    ;;
start) start ;;
stop) stop ;;
*)
    echo "usage: $0 check|start|stop" >&2
    exit 2
    ;;
esac
