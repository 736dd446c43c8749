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
    echo "SKIP: NHC: fixture $fixture not found (set NVPM_FIXTURES); nothing was tested"
    skipped=$((skipped + 3))
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
check "node_exporter on 127.0.0.1 serves the readiness metrics and MLNX_OFED's counters, node_textfile_scrape_error 0; promtool check metrics says nothing" \
    run_test node_exporter_serves_the_textfile_and_promtool_finds_nothing_to_fix

if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]; exit $?
fi
finish
