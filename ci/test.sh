#!/usr/bin/env bash
# The whole test suite, as CI runs it (from .ci/run) and as README.md
# documents it: sudo bash ci/test.sh
#
# Installs what it needs (ci/setup-host.sh), then runs three stages; a
# stage's lanes run side by side, a lane's suites one after another:
#
# 1. alone (benchmark figures on a quiet machine; caches for what follows)
#    ci/test-lint.sh            cargo fmt --check, clippy -D warnings, the
#                               C/Rust contract, xtask's tidy tests
#    cargo test --workspace     host tests of the module logic and xtask
#    readiness's bench          gpudirect-rdma-check's run time over the
#                               largest tree and the real nodes' dumps
#                               (figures beside the real hosts')
#    ci/test-kmod.sh            module builds on Debian 6.1 / 6.12 kernels,
#                               on trees with other distributions' code
#                               generation options (ci/config-trees.sh)
#                               and on Debian 11's 5.10
#    cargo xtask bench-kmod     build cost and size beside the C module
#                               (figures; fails only if a build fails)
# 2. the host lane (installs packages on this host: dpkg, DKMS, /lib/modules)
#    ci/test-service.sh         the service helper and its status diagnoses
#    ci/test-monitoring.sh      where fleets look: the NHC check under the
#                               real NHC, node_exporter and promtool
#    ci/test-rpm.sh             build-srpm, rpmbuild --rebuild, rpmlint
#    ci/test-deb.sh             build-deb, dpkg-buildpackage, lintian, DKMS
#    ci/test-dkms.sh            build-dkms's deb and rpm: lint, the comparison
#                               with the distro-built -dkms packages, DKMS
#    ci/test-fleet.sh           build-modules and build-repo: prebuilt
#                               module packages per kernel, signed apt and
#                               dnf repositories, apt's resolver on a node
#    beside it, the isolated lane (touches none of the host's packages)
#    ci/test-nccl.sh            NCCL's own topology and GDR code (both
#                               fixture releases, cargo xtask nccl-harness)
#                               against NCCL's rules and the check's verdict
#    ci/test-suites.sh          the module and the debs in trixie and sid
#                               chroots (their own headers, gcc, rustc)
#    cargo xtask test-vm        the module in booted kernels (QEMU), against
#                               MLNX_OFED's own PeerDirect core
#    cargo xtask test-vm --arch arm64   the same in Debian's arm64 kernel
#                               (cross-built, qemu-system-aarch64, TCG);
#    ci/test-fleet-arm64.sh     build-modules' cross-built arm64 package,
#                               its module booted there
#    cargo xtask test-vm --mutants  the same suite kills every deliberate
#                               defect of kmod/tests/vm/mutants
# 3. the booted images, side by side
#    ci/test-image.sh           our debs installed with apt in a booted
#                               Debian 12 system (DKMS, systemd, the status
#                               diagnoses, a second kernel, purge)
#    ci/test-fleet-image.sh     a booted node with no toolchain installs
#                               the prebuilt module from the signed
#                               repository and keeps it across a kernel
#                               update (timed beside the DKMS update)
# Module builds of the test suites are strict (NVPM_STRICT=1: warnings are
# errors); the packaged builds (DKMS, rpmbuild) are not.
# Every suite runs even if an earlier one failed; the end prints each
# suite's counts, wall and CPU seconds, then sums them as
# `N passed, M failed`; the exit status is non-zero on any failure.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ "$(id -u)" = 0 ] || { echo "ci/test.sh: run as root (it installs packages and tests DKMS for real): sudo bash ci/test.sh" >&2; exit 2; }
command -v cargo >/dev/null || { echo "ci/test.sh: cargo not found; install Rust (https://rustup.rs) or Debian's cargo" >&2; exit 2; }

bash ci/setup-host.sh || { echo "ci/test.sh: host setup failed (see above)"; exit 1; }

# Each suite leaves one line in $ledger (name, counts, exit status, wall
# and CPU seconds) and, if it failed, what it said about its failures in
# a file of $failures; the end of the run sums them. Files, not shell
# variables, because two lanes of suites run side by side (below).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ledger=$scratch/ledger failures=$scratch/failures
mkdir -p "$failures"
# cpu_seconds FILE: writes the CPU seconds (user + system) of this shell's
# finished children to FILE, from bash's `times` (its second line,
# "XmY.YYYs XmY.YYYs"). `times` runs in this shell, not in a pipe or $(...),
# whose subshell would have no children of its own.
cpu_seconds() {
    times >"$1.times"
    sed -n 2p "$1.times" | awk '{
        n = 0
        for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] }
        printf "%.0f\n", n }' >"$1"
    rm -f "$1.times"
}
suite() {  # suite NAME COMMAND...: runs a suite, records its counts
    local name=$1; shift
    local out; out=$(mktemp)
    echo
    echo "######## $name"
    local start=$SECONDS
    # In a subshell of its own, whose only children are the suite and tee:
    # its `times` is theirs, whatever else this shell reaps meanwhile.
    (
        "$@" 2>&1 | tee "$out"
        echo "${PIPESTATUS[0]}" >"$out.rc"
        cpu_seconds "$out.cpu"
    )
    local rc cpu wall=$((SECONDS - start))
    rc=$(cat "$out.rc" 2>/dev/null || echo 1) cpu=$(cat "$out.cpu" 2>/dev/null || echo 0)
    local p f
    if [ "$name" = "cargo test" ]; then
        p=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$out" | paste -sd+ | bc)
        f=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$out" | paste -sd+ | bc)
    else
        p=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' "$out" | paste -sd+ | bc)
        f=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' "$out" | paste -sd+ | bc)
    fi
    p=${p:-0} f=${f:-0}
    # A suite that exits non-zero counts as failed even if it printed no count.
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    if [ "$rc" != 0 ] || [ "$f" != 0 ]; then
        {
            echo "== $name (exit $rc): its failures"
            # FAIL lines of every suite's checks, minus the scenarios that
            # only "did not run" after a first failure; else the last lines.
            grep -E 'FAIL|[Ee]rror|BUG|panic' "$out" | grep -v 'did not run' | tail -n 30 | grep . ||
                tail -n 15 "$out"
        } >"$(mktemp "$failures/XXXXXX")"
    fi
    # One write of one short line: lanes append to the ledger side by side.
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$p" "$f" "$rc" "$wall" "$cpu" >>"$ledger"
    echo "######## $name: $p passed, $f failed, exit $rc, $wall s (CPU $cpu s)"
    rm -f "$out" "$out.rc" "$out.cpu"
}
# lane NAME FUNCTION: runs FUNCTION's suites in the background, their
# output kept in a file and shown whole when the lane has ended (shown:
# with `show_lane NAME`), so that the log of a suite is never interleaved
# with another's.
lane() {
    local name=$1 fn=$2
    "$fn" >"$scratch/lane-$name.log" 2>&1 &
    echo $! >"$scratch/lane-$name.pid"
    echo
    echo "######## lane '$name' started in the background: $(declare -f "$fn" | grep -c '^ *suite ') suites; its output follows when it ends"
}
show_lane() {
    local name=$1
    wait "$(cat "$scratch/lane-$name.pid")"
    echo
    echo "######## lane '$name' (ran beside the suites above):"
    cat "$scratch/lane-$name.log"
}
run_start=$SECONDS

# The prefix runs alone: the figures of the two benchmarks are taken on a
# quiet machine, and the module builds suite prepares the kernel trees
# and caches (config trees, arm64 and bullseye headers) later suites read.
suite "lint" bash ci/test-lint.sh
suite "cargo test" cargo test --workspace --locked
suite "readiness check time (figures)" cargo test --release --locked -p readiness --test bench -- --ignored --nocapture
suite "module builds" bash ci/test-kmod.sh
suite "module build cost (figures)" cargo xtask bench-kmod

# Then two lanes side by side (docs/testing.md, "The whole run"): the host
# lane's suites install packages on this host (dpkg, DKMS, /lib/modules,
# the system core cache /var/cache/nv_peer_mem) and run one after another;
# the isolated lane's suites touch none of that: NCCL's code, chroots,
# booted kernels (their modules are built in target/, their core cache is
# the lane's own, below). Most of the host lane is single-threaded (dpkg,
# rpm, dnf, lintian), so the two share the machine's two cores.
host_lane_suites() {
    suite "service helper" bash ci/test-service.sh
    suite "fleet monitoring" bash ci/test-monitoring.sh
    suite "rpm route" bash ci/test-rpm.sh
    suite "deb route" bash ci/test-deb.sh
    suite "dkms packages" bash ci/test-dkms.sh
    suite "fleet route" bash ci/test-fleet.sh
}
isolated_lane_suites() {
    # The host lane's checks see /var/cache/nv_peer_mem come and go (the
    # DKMS builds' core cache, purged with the packages): this lane's
    # module builds keep their compiled core elsewhere.
    export NVPM_RUST_CACHE=$top/target/isolated-lane-core-cache
    suite "NCCL's own code" bash ci/test-nccl.sh
    # Measured on the 2-core CI machine (2026-11-23): cold, no cached chroot,
    # 864 s (mmdebstrap: trixie 302 s, sid 357 s); warm 340 s (chroot unpack
    # 30-55 s, four module builds ~60 s and the deb route 60-80 s per suite).
    # ci/chroot.sh keeps the chroots for a week.
    suite "newer suites" bash ci/test-suites.sh
    suite "booted kernels" env NVPM_STRICT=1 cargo xtask test-vm
    # arm64, bookworm's kernel and the backports one (where nv_peer_mem makes
    # memory_peers itself, issue 41): bookworm's warm ~100 s, cold ~330 s;
    # 6.12 warm ~35 s (docs/testing.md).
    suite "booted kernels (arm64)" env NVPM_STRICT=1 cargo xtask test-vm --arch arm64
    # Needs the arm64 MLNX_OFED and NVIDIA builds test-vm made just before.
    suite "fleet route (arm64)" bash ci/test-fleet-arm64.sh
    # Each mutant of kmod/tests/vm/mutants must fail the booted-kernel suite on
    # 6.12, the kernel where nv_peer_mem makes memory_peers itself (the
    # memory_peers_link_kept mutant is visible only there); the same
    # NVPM_STRICT as above, so the builds above are reused.
    suite "mutation check" env NVPM_STRICT=1 cargo xtask test-vm --mutants --kernel 6.12
}
lane isolated isolated_lane_suites
host_lane_suites
show_lane isolated

# The two booted-image suites run side by side: most of each is a TCG
# guest keeping about one of this machine's two cores busy, so together
# they take little more than the longer one (docs/testing.md, "The whole
# run"). They come last, alone: their guests have the machine to
# themselves, and the kernel updates they time are figures.
fleet_node_suite() { suite "booted fleet node" bash ci/test-fleet-image.sh; }
lane fleet-node fleet_node_suite
suite "booted image" bash ci/test-image.sh
show_lane fleet-node
# Issue 21 item 4: the two routes' kernel update, timed natively in this
# run by the two suites (each writes its figure; see them for what is timed).
echo "kernel update to a loadable nv_peer_mem, natively, this run: prebuilt route $(cat /var/tmp/nv-peer-mem-test-fleet-image/kernel-update-seconds 2>/dev/null || echo '(not measured)') s, DKMS route $(cat /var/tmp/nv-peer-mem-test-image/kernel-update-seconds 2>/dev/null || echo '(not measured)') s"

# The per-suite figures, then the failures (a CI log is often read from
# its tail only: the last lines name the cause), then the sum.
echo
echo "######## per suite (wall and CPU seconds; the lanes' suites ran side by side)"
awk -F'\t' '{ printf "%-34s %5d passed %4d failed  exit %-3s %6d s wall %6d s CPU\n", $1, $2, $3, $4, $5, $6 }' "$ledger"
echo "whole run: $((SECONDS - run_start)) s wall"
total_passed=$(awk -F'\t' '{ n += $2 } END { print n + 0 }' "$ledger")
total_failed=$(awk -F'\t' '{ n += $3 } END { print n + 0 }' "$ledger")
broken=$(awk -F'\t' '$3 != 0 || $4 != 0 { printf "%s%s", sep, $1; sep = ", " }' "$ledger")
echo
if [ -n "$broken" ]; then
    cat "$failures"/* 2>/dev/null
    echo "failed suites: $broken"
fi
echo "$total_passed passed, $total_failed failed"
[ -z "$broken" ]
