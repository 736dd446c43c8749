#!/usr/bin/env bash
# The whole test suite, as CI runs it (from .ci/run) and as README.md
# documents it: sudo bash ci/test.sh
#
# Installs what it needs (ci/setup-host.sh), then runs, in order:
#   1. ci/test-lint.sh            cargo fmt --check, clippy -D warnings,
#                                 the C/Rust contract, xtask's tidy tests
#   2. cargo test --workspace     host tests of the module logic and xtask
#      readiness's bench          gpudirect-rdma-check's run time over the
#                                 largest tree and the real nodes' dumps
#                                 (figures beside the real hosts')
#   3. ci/test-kmod.sh            module builds on Debian 6.1 / 6.12 kernels,
#                                 on trees with other distributions' code
#                                 generation options (ci/config-trees.sh)
#                                 and on Debian 11's 5.10
#      cargo xtask bench-kmod     build cost and size beside the C module
#                                 (figures; fails only if a build fails)
#   4. ci/test-service.sh         the service helper and its status diagnoses
#   4b. ci/test-monitoring.sh     where fleets look: the NHC check under the
#                                 real NHC, node_exporter and promtool
#   4c. ci/test-nccl.sh           NCCL's own topology and GDR code (both
#                                 fixture releases, cargo xtask nccl-harness)
#                                 against NCCL's rules and the check's verdict
#   5. ci/test-rpm.sh             build-srpm, rpmbuild --rebuild, rpmlint
#   6. ci/test-deb.sh             build-deb, dpkg-buildpackage, lintian, DKMS
#   7. ci/test-dkms.sh            build-dkms's deb and rpm: lint, the comparison
#                                 with the distro-built -dkms packages, DKMS
#   7b. ci/test-fleet.sh          build-modules and build-repo: prebuilt
#                                 module packages per kernel, signed apt and
#                                 dnf repositories, apt's resolver on a node
#   8. ci/test-suites.sh          the module and the debs in trixie and sid
#                                 chroots (their own headers, gcc, rustc)
#   9. cargo xtask test-vm        the module in booted kernels (QEMU), against
#                                 MLNX_OFED's own PeerDirect core
#  10. cargo xtask test-vm --arch arm64   the same in Debian's arm64 kernel
#                                 (cross-built, qemu-system-aarch64, TCG);
#      ci/test-fleet-arm64.sh     build-modules' cross-built arm64 package,
#                                 its module booted there
#  11. cargo xtask test-vm --mutants  the same suite kills every deliberate
#                                 defect of kmod/tests/vm/mutants
#  12. ci/test-image.sh           our debs installed with apt in a booted
#                                 Debian 12 system (DKMS, systemd, the status
#                                 diagnoses, a second kernel, purge)
#  13. ci/test-fleet-image.sh     a booted node with no toolchain installs
#                                 the prebuilt module from the signed
#                                 repository and keeps it across a kernel
#                                 update (timed beside 12's DKMS update)
# Module builds of the test suites are strict (NVPM_STRICT=1: warnings are
# errors); the packaged builds (DKMS, rpmbuild) are not.
# Every suite runs even if an earlier one failed; the last line sums them
# as `N passed, M failed`, and the exit status is non-zero on any failure.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ "$(id -u)" = 0 ] || { echo "ci/test.sh: run as root (it installs packages and tests DKMS for real): sudo bash ci/test.sh" >&2; exit 2; }
command -v cargo >/dev/null || { echo "ci/test.sh: cargo not found; install Rust (https://rustup.rs) or Debian's cargo" >&2; exit 2; }

bash ci/setup-host.sh || { echo "ci/test.sh: host setup failed (see above)"; exit 1; }

total_passed=0 total_failed=0 broken=()
# What each failed suite said about its failures, repeated at the end so
# the last lines of a long run name the cause (a CI log is often read
# from its tail only).
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
suite() {  # suite NAME COMMAND...: runs a suite, adds up its counts
    local name=$1; shift
    local out; out=$(mktemp)
    echo
    echo "######## $name"
    local start=$SECONDS
    "$@" 2>&1 | tee "$out"
    local rc=${PIPESTATUS[0]}
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
        broken+=("$name")
        {
            echo "== $name (exit $rc): its failures"
            # FAIL lines of every suite's checks, minus the scenarios that
            # only "did not run" after a first failure; else the last lines.
            grep -E 'FAIL|[Ee]rror|BUG|panic' "$out" | grep -v 'did not run' | tail -n 30 | grep . ||
                tail -n 15 "$out"
        } >>"$failures"
    fi
    total_passed=$((total_passed + p)) total_failed=$((total_failed + f))
    echo "######## $name: $p passed, $f failed, exit $rc, $((SECONDS - start)) s"
    rm -f "$out"
}

suite "lint" bash ci/test-lint.sh
suite "cargo test" cargo test --workspace --locked
suite "readiness check time (figures)" cargo test --release --locked -p readiness --test bench -- --ignored --nocapture
suite "module builds" bash ci/test-kmod.sh
suite "module build cost (figures)" cargo xtask bench-kmod
suite "service helper" bash ci/test-service.sh
suite "fleet monitoring" bash ci/test-monitoring.sh
suite "NCCL's own code" bash ci/test-nccl.sh
suite "rpm route" bash ci/test-rpm.sh
suite "deb route" bash ci/test-deb.sh
suite "dkms packages" bash ci/test-dkms.sh
suite "fleet route" bash ci/test-fleet.sh
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
# The two booted-image suites run side by side: most of each is a TCG
# guest keeping about one of this machine's two cores busy, so together
# they take little more than the longer one (docs/testing.md, "The whole
# run"). The fleet node's output is shown when it has ended.
fleet_log=$(mktemp) fleet_rc=$(mktemp)
( bash ci/test-fleet-image.sh >"$fleet_log" 2>&1; echo $? >"$fleet_rc" ) &
fleet_pid=$!
suite "booted image" bash ci/test-image.sh
wait "$fleet_pid"
suite "booted fleet node" sh -c 'cat "$1"; exit "$(cat "$2")"' sh "$fleet_log" "$fleet_rc"
rm -f "$fleet_log" "$fleet_rc"
# Issue 21 item 4: the two routes' kernel update, timed natively in this
# run by the two suites (each writes its figure; see them for what is timed).
echo "kernel update to a loadable nv_peer_mem, natively, this run: prebuilt route $(cat /var/tmp/nv-peer-mem-test-fleet-image/kernel-update-seconds 2>/dev/null || echo '(not measured)') s, DKMS route $(cat /var/tmp/nv-peer-mem-test-image/kernel-update-seconds 2>/dev/null || echo '(not measured)') s"

echo
if [ ${#broken[@]} != 0 ]; then
    cat "$failures"
    echo "failed suites: ${broken[*]}"
fi
echo "$total_passed passed, $total_failed failed"
[ ${#broken[@]} = 0 ]
