#!/usr/bin/env bash
# Where fleets look (issue 27; docs/monitoring.md), with the real consumers:
#   NHC            LBNL NHC 1.4.3's own `nhc` (the fixture, unpacked, not
#                  modified) runs packaging/nvpm_gpudirect.nhc over fake
#                  sysfs trees: a ready node passes, each kind of not-ready
#                  fails with its fact and fix, a missing or crashing check
#                  fails with a reason
#   node_exporter  Debian's prometheus-node-exporter on 127.0.0.1 serves
#                  the textfile gpudirect-rdma-check --textfile wrote;
#                  Debian's promtool checks the metrics
# The tests are readiness/tests/monitoring.rs's ignored ones; this script
# provides what they need and runs each as one check. Debian's packages are
# downloaded and unpacked (apt-get download, dpkg-deb -x), not installed:
# their maintainer scripts would start the daemons system-wide.
# Last line: "N passed, M failed[, K skipped]"; exit 1 on any failure, 2
# when the host is not set up. Scratch: $NVPM_TEST_DIR (default
# /var/tmp/nv-peer-mem-test-monitoring); cache:
# /var/cache/nv-peer-mem-ci/monitoring.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-monitoring}
cache=/var/cache/nv-peer-mem-ci/monitoring
. "$here/checks.sh"
require_root_and_tools test-monitoring.sh cargo apt-get dpkg-deb
rm -rf "$work" && mkdir -p "$work" "$cache"
: >"$work/log"
skipped=0

# run_test NAME: one ignored test of readiness/tests/monitoring.rs.
run_test() {
    (cd "$root" && cargo test -q --locked -p readiness --test monitoring -- --ignored --exact "$1" --test-threads=1) 2>&1 |
        tee "$work/test-$1.log" | grep -q "test result: ok. 1 passed"
}
check "readiness builds (monitoring tests)" sh -c "cd '$root' && cargo test -q --locked -p readiness --test monitoring --no-run"

echo "== NHC (LBNL NHC 1.4.3, the fixture)"
fixture=${NVPM_FIXTURES:-$root/../shared/fixtures}/lbnl-nhc-1.4.3.tar.gz
if [ -f "$fixture" ]; then
    mkdir -p "$work/nhc" && tar -C "$work/nhc" -xzf "$fixture"
    export NVPM_NHC_TREE=$work/nhc/lbnl-nhc-1.4.3
    check "NHC: a ready node passes (any, peer nccl)" run_test nhc_passes_a_ready_node
    check "NHC: ACS, distance with nccl, DMA-BUF where peer is expected, no path, unreadable, no GPU: each fails with its fact and fix" \
        run_test nhc_fails_each_kind_of_not_ready_with_its_reason
    check "NHC: the check missing, crashing or given bad arguments fails with a reason" \
        run_test nhc_fails_when_the_check_is_missing_crashes_or_is_misused
else
    skip "NHC: fixture $fixture not found (set NVPM_FIXTURES); nothing was tested"
    skipped=$((skipped + 3))
fi

echo "== Slurm (Debian's slurmctld, slurmd, munge) with NHC as HealthCheckProgram"
# One node on this machine, loopback only: munged with a throwaway key,
# slurmctld and slurmd on their own ports and files under $work/slurm,
# HealthCheckProgram a site's wrapper running NHC (the fixture's) with our
# check over a fake tree. Not ready (DMA-BUF serves, the site expects a
# peer memory client): slurmd's health check drains the node with
# "NHC: ..."; repaired (the tree link moved to a ready tree): the next
# health check's node-mark-online resumes it. Daemons stopped at the end.
s=$work/slurm
slurm_stop() {
    [ -n "${SLURM_CONF:-}" ] && timeout 10 scontrol shutdown >/dev/null 2>&1
    local f
    for f in "$s/slurmd.pid" "$s/slurmctld.pid" "$s/munged.pid"; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    sleep 1
    for f in "$s/slurmd.pid" "$s/slurmctld.pid" "$s/munged.pid"; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    rm -f "$s"/*.pid
}
trap slurm_stop EXIT
slurm_setup() {
    mkdir -p "$s/state" "$s/spool" "$s/nhc/scripts" || return 1
    (cd "$root" && NVPM_EXPORT_TREES=$s/trees cargo test -q --locked -p readiness --test monitoring -- --ignored --exact export_trees_for_the_slurm_scenario) >>"$work/log" 2>&1 || return 1
    ln -sfn trees/not-ready "$s/tree"
    # NHC's helpers, executable as its `make install` installs them.
    install -D -m 0755 -t "$s/nhc/helpers" "$NVPM_NHC_TREE/helpers/node-mark-offline" "$NVPM_NHC_TREE/helpers/node-mark-online" &&
    cp "$NVPM_NHC_TREE/scripts/common.nhc" "$root/packaging/nvpm_gpudirect.nhc" "$s/nhc/scripts/" &&
        echo '* || check_gpudirect_rdma peer' >"$s/nhc/nhc.conf" || return 1
    # The site's wrapper: what its HealthCheckProgram would set (slurmd
    # passes no SLURM_CONF), here also the fake tree.
    cat >"$s/health-check" <<WRAP || return 1
#!/bin/sh
export SLURM_CONF=$s/slurm.conf PATH=/usr/sbin:/usr/bin:/sbin:/bin
export NV_PEER_MEM_SYSFS=$s/tree/sys NV_PEER_MEM_PROC=$s/tree/proc NV_PEER_MEM_ROOT=$s/tree
export NV_PEER_MEM_SERVICE=/nonexistent NV_PEER_MEM_NCCL_CONF=/nonexistent NV_PEER_MEM_NVIDIA_SMI=/nonexistent
export GPUDIRECT_RDMA_CHECK=${CARGO_TARGET_DIR:-$root/target}/debug/gpudirect-rdma-check
exec bash $NVPM_NHC_TREE/nhc -D $s/nhc -t 60 LOGFILE=- HELPERDIR=$s/nhc/helpers >>$s/nhc.log 2>&1
WRAP
    chmod 0755 "$s/health-check"
    head -c 1024 /dev/urandom >"$s/munge.key" && chmod 0400 "$s/munge.key"
    local host; host=$(hostname -s)
    cat >"$s/slurm.conf" <<CONF || return 1
ClusterName=nvpmtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$s/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
HealthCheckProgram=$s/health-check
HealthCheckInterval=5
HealthCheckNodeState=ANY
NodeName=$host NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=nvpm Nodes=$host Default=YES State=UP
CONF
    export SLURM_CONF=$s/slurm.conf
    munged --force --key-file="$s/munge.key" --socket="$s/munge.socket" --pid-file="$s/munged.pid" \
        --log-file="$s/munged.log" --seed-file="$s/munged.seed" || return 1
    slurmctld -f "$s/slurm.conf" || return 1
    slurmd -f "$s/slurm.conf" || return 1
}
# node_says WHAT PATTERN: within 90 s, scontrol show node matches PATTERN.
node_says() {
    local i
    for i in $(seq 90); do
        scontrol show node "$(hostname -s)" >"$s/node.txt" 2>&1 && grep -Eq "$2" "$s/node.txt" && return 0
        sleep 1
    done
    echo "after 90 s, no $1:"; cat "$s/node.txt"; tail -n 5 "$s/nhc.log" "$s/slurmd.log" "$s/slurmctld.log" 2>/dev/null
    return 1
}
if [ -z "${NVPM_NHC_TREE:-}" ]; then
    skip "Slurm: no NHC (its fixture is missing); nothing was tested"
    skipped=$((skipped + 3))
elif ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    fail "Slurm: slurmctld, slurmd or munged missing; run: sudo bash ci/setup-host.sh"
else
    check "Slurm: munged, slurmctld and slurmd for one node on 127.0.0.1, HealthCheckProgram = NHC" slurm_setup
    check "Slurm: the not-ready node is drained with Reason=NHC: gpudirect-rdma expect ... fix ..." \
        node_says "drain" 'Reason=NHC: gpudirect-rdma expe'
    drained_reason() { grep -q 'Reason=NHC: gpudirect-rdma expect GPU memory registers through dmabuf, but this site expects a peer memory client.*fix: start nv_peer_mem' "$s/node.txt" && grep -Eq 'State=[A-Z+]*DRAIN' "$s/node.txt" || { cat "$s/node.txt"; return 1; }; }
    check "Slurm: scontrol show node: State DRAIN, the reason names the fact and its fix" drained_reason
    ln -sfn trees/ready "$s/tree"
    resumed() { node_says "resume" 'State=IDLE ' && ! grep -q 'Reason=' "$s/node.txt"; }
    check "Slurm: repaired, NHC's node-mark-online returns the node to service (IDLE, no reason)" resumed
    slurm_stop
fi

echo "== node_exporter (Debian's prometheus-node-exporter, promtool)"
fetch_debs() {
    local p
    for p in prometheus-node-exporter prometheus; do
        ls "$cache"/${p}_*.deb >/dev/null 2>&1 || (cd "$cache" && apt-get download -q "$p") || return 1
    done
    rm -rf "$cache/root" && mkdir -p "$cache/root" &&
        for d in "$cache"/prometheus-node-exporter_*.deb "$cache"/prometheus_*.deb; do dpkg-deb -x "$d" "$cache/root" || return 1; done
}
check "prometheus-node-exporter and prometheus (promtool) from Debian, unpacked" fetch_debs
export NVPM_NODE_EXPORTER=$cache/root/usr/bin/prometheus-node-exporter NVPM_PROMTOOL=$cache/root/usr/bin/promtool
rules_tested() {
    (cd "$root/docs/examples" && "$NVPM_PROMTOOL" check rules gpudirect-rdma.rules.yml && "$NVPM_PROMTOOL" test rules gpudirect-rdma.rules.test.yml)
}
check "promtool: docs/examples' alerting rules are valid and their unit tests pass (not ready for 3 min; stale textfile)" rules_tested
check "node_exporter on 127.0.0.1 serves the readiness metrics and MLNX_OFED's counters, node_textfile_scrape_error 0; promtool check metrics says nothing" \
    run_test node_exporter_serves_the_textfile_and_promtool_finds_nothing_to_fix
check "promtool check metrics says nothing on every real node of the corpus (readiness/tests/real, replayed) nor on a bridge shared by two GPUs' paths" \
    run_test promtool_finds_nothing_to_fix_in_the_corpus

if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]; exit $?
fi
finish
