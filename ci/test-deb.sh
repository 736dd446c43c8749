#!/usr/bin/env bash
# End-to-end test of `cargo xtask build-deb` (docs/packaging.md), for real, as root
# on a Debian 12 machine prepared by ci/setup-host.sh:
#   build-deb twice gives the same bytes; the xtask unit and golden tests pass;
#   dpkg-buildpackage -us -uc builds both debs; lintian: 0 errors and only the
#   accepted warnings below; every deb suite has its own version;
#   dpkg -i (MLNX_OFED's package stood in by equivs) on kernels without
#   MLNX_OFED's and NVIDIA's symbols succeeds, skipping each kernel with one
#   line that names what is missing and the fix, and installs no module;
#   another linux-headers install (dkms autoinstall through the kernel hook)
#   succeeds the same way; a kernel update with both prerequisites
#   registered with DKMS (ci/prereq-standin.sh dkms-add) builds them and then
#   nv_peer_mem in the kernel hook's one autoinstall; once
#   ci/prereq-standin.sh places real modules
#   exporting those symbols, `dkms autoinstall -k` builds and installs
#   nv_peer_mem.ko; the service helper behaves; dpkg -P leaves nothing behind;
#   the leftovers of a run stopped before its cleanup (stand-ins, DKMS
#   registrations, the equivs package) are removed before it starts.
# It installs packages system-wide and undoes that on exit (also on failure
# or Ctrl-C); running it again starts from a clean state.
# Last line: "N passed, M failed"; exit status 1 when anything failed,
# 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-deb}
packages=(nvidia-peer-memory nvidia-peer-memory-dkms)
standin=mlnx-ofed-kernel-modules   # satisfies mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules

# lintian warnings we accept, each with its reason:
accepted_warnings=(
    # Not uploaded to Debian, so there is no ITP bug to close.
    initial-upload-closes-no-bugs
    # The orig tarball carries debian/ itself: build_module.sh's documented
    # layout (unpack, cd, dpkg-buildpackage) kept from the original (docs/packaging.md).
    no-debian-changes
)

. "$here/checks.sh"

require_root_and_tools test-deb.sh cargo dpkg-buildpackage lintian equivs-build dkms modinfo apt-get

. "$here/lib/host-packages.sh"
. "$here/lib/routes.sh"
# Host package installs are serialised with other test runs on this machine.
hold_host_packages
# Everything this test may have installed or built, removed on exit and
# before it starts (ci/lib/host-packages.sh).
trap 'cleanup_host_packages' EXIT
trap 'echo "interrupted"; exit 130' INT TERM

mkdir -p "$work"
cleanup_host_packages
rm -rf "$work/a" "$work/b" "$work/equivs"
: >"$work/log"
mkdir -p "$work/a" "$work/b" "$work/equivs"
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
upstream=${version/-/\~}
release=1

echo "== build-deb"
check "xtask unit and golden tests" cargo test --quiet --release --manifest-path "$root/Cargo.toml" -p xtask -- deb:: distro:: render:: tarball:: pipeline:: error::
check "cargo build of xtask" cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask
xtask=$root/target/release/xtask
tarball=nvidia-peer-memory_${upstream}.orig.tar.gz
check "build-deb prints Built: <path>" sh -c "'$xtask' build-deb --out '$work/a' --distro debian12 | grep -qx 'Built: $work/a/$tarball'"
"$xtask" build-deb --out "$work/b" --distro debian12 >>"$work/log" 2>&1
sum_a=$(sha256sum <"$work/a/$tarball" | cut -d' ' -f1)
sum_b=$(sha256sum <"$work/b/$tarball" 2>/dev/null | cut -d' ' -f1)
check "two build-deb runs give the same sha256 ($sum_a)" test "$sum_a" = "$sum_b"

# Bad input: exit status 2 and no file written.
check "unknown --distro: exit 2, lists the known ones, nothing written" bad_input build-deb "build-deb knows: debian12" --out "$work/bad" --distro plan9
check "rpm --distro: exit 2, names build-srpm, nothing written" bad_input build-deb "use \`cargo xtask build-srpm\` for rhel9" --out "$work/bad" --distro rhel9
check "--release 0: exit 2, nothing written" bad_input build-deb "invalid value '0' for '--release <N>'" --out "$work/bad" --release 0
check "missing --out: exit 2" sh -c "'$xtask' build-deb --out '$work/no/such/dir' >>'$work/log' 2>&1; test \$? = 2"

echo "== one version per suite"
# Each deb suite's packages get their own version (version_suffix in
# packaging/distros.yaml), ordered so that a distribution upgrade moves to
# the newer suite's build; read back from each rendered debian/changelog.
suite_version() {  # suite_version ID: the top changelog version build-deb writes for ID
    local dir=$work/versions/$1
    rm -rf "$dir"; mkdir -p "$dir"
    "$xtask" build-deb --out "$dir" --distro "$1" >/dev/null 2>>"$work/log" || return 1
    tar -xzf "$dir/$tarball" -C "$dir" "nvidia-peer-memory-$upstream/debian/changelog" &&
        dpkg-parsechangelog -l "$dir/nvidia-peer-memory-$upstream/debian/changelog" -S Version
}
declare -A suite_versions
for id in debian12 debian13 ubuntu2204 ubuntu2404 ubuntu2604; do
    suite_versions[$id]=$(suite_version "$id")
    echo "  $id: ${suite_versions[$id]:-?}"
done
distinct=$(printf '%s\n' "${suite_versions[@]}" | sort -u | grep -c .)
check "five deb suites, five versions" test "$distinct" = 5
check "debian12 (${suite_versions[debian12]}) < debian13 (${suite_versions[debian13]})" \
    dpkg --compare-versions "${suite_versions[debian12]}" lt "${suite_versions[debian13]}"
check "ubuntu2204 (${suite_versions[ubuntu2204]}) < ubuntu2404 (${suite_versions[ubuntu2404]}) < ubuntu2604 (${suite_versions[ubuntu2604]}) < debian13" sh -c \
    "dpkg --compare-versions '${suite_versions[ubuntu2204]}' lt '${suite_versions[ubuntu2404]}' && dpkg --compare-versions '${suite_versions[ubuntu2404]}' lt '${suite_versions[ubuntu2604]}' && dpkg --compare-versions '${suite_versions[ubuntu2604]}' lt '${suite_versions[debian13]}'"
check "debian13, the newest Debian release, has the bare ${upstream}-${release}" \
    test "${suite_versions[debian13]}" = "${upstream}-${release}"

echo "== dpkg-buildpackage"
cd "$work/a" || finish
tar xzf "$tarball"
debver=$(dpkg-parsechangelog -l "nvidia-peer-memory-$upstream/debian/changelog" -S Version)
check "dpkg-buildpackage -us -uc" sh -c "cd nvidia-peer-memory-$upstream && dpkg-buildpackage -us -uc"
deb=$work/a/nvidia-peer-memory_${debver}_$(dpkg --print-architecture).deb
dkms_deb=$work/a/nvidia-peer-memory-dkms_${debver}_all.deb
check "nvidia-peer-memory_${debver}_$(dpkg --print-architecture).deb built" test -f "$deb"
check "nvidia-peer-memory-dkms_${debver}_all.deb built" test -f "$dkms_deb"
[ -f "$deb" ] && [ -f "$dkms_deb" ] || finish

echo "== maintainer scripts"
# What debhelper generated from debian/rules and the maintscript file: an
# upgrade does not stop the service (its ExecStop unloads the module), and
# Mellanox 1.3's init script and upstart job are removed on the upgrade
# from it (ci/test-suites.sh runs both for real in its chroots).
check "preinst does not stop nv_peer_mem.service on upgrade" sh -c \
    "! dpkg-deb -I '$deb' preinst 2>/dev/null | grep -E 'deb-systemd-invoke (stop|restart)'"
# The prerm (debian/nvidia-peer-memory.prerm) run as dpkg runs it, with
# systemd "running" (a tmpfs /run holding /run/systemd/system in a private
# mount namespace) and deb-systemd-invoke recording what it was asked;
# dpkg-maintscript-helper (the maintscript file's rm_conffile, which
# needs dpkg's environment) does nothing here: the upgrade tests in
# ci/test-suites.sh run it for real.
prerm_invokes() {  # prerm_invokes ARG: the deb-systemd-invoke calls of "prerm ARG"
    local d=$work/prerm-run
    rm -rf "$d" && mkdir -p "$d/bin" || return 1
    dpkg-deb -I "$deb" prerm >"$d/prerm" 2>/dev/null || { echo "no prerm in $deb"; return 1; }
    printf '#!/bin/sh\necho "$*" >>%s/invoked\n' "$d" >"$d/bin/deb-systemd-invoke"
    printf '#!/bin/sh\nexit 0\n' >"$d/bin/dpkg-maintscript-helper"
    chmod +x "$d/bin/deb-systemd-invoke" "$d/bin/dpkg-maintscript-helper"
    : >"$d/invoked"
    unshare --mount sh -c "mount -t tmpfs nvpm-run /run && mkdir -p /run/systemd/system && PATH='$d/bin':\$PATH sh '$d/prerm' '$1'" >>"$work/log" 2>&1 || return 1
    cat "$d/invoked"
}
# nv_peer_mem.service first (debian/nvidia-peer-memory.prerm), then
# debhelper's snippet for gpudirect-rdma-check.timer.
prerm_stops_on_remove() {
    test "$(prerm_invokes remove)" = "stop nv_peer_mem.service
stop gpudirect-rdma-check.timer"
}
prerm_stops_nothing() { local out; out=$(prerm_invokes "$1") && test -z "$out"; }
check "prerm remove stops nv_peer_mem.service (its ExecStop unloads the module), then gpudirect-rdma-check.timer" prerm_stops_on_remove
for arg in upgrade failed-upgrade deconfigure; do
    check "prerm $arg stops nothing (an upgrade keeps the module loaded)" prerm_stops_nothing "$arg"
done
# (debhelper writes the prior-version 1.4.0~ as 1.4.0\~.)
for conffile in /etc/init.d/nv_peer_mem /etc/init/nv_peer_mem.conf; do
    check "preinst and postinst remove 1.3's $conffile (rm_conffile)" sh -c \
        "dpkg-deb -I '$deb' preinst | grep -qF 'dpkg-maintscript-helper rm_conffile $conffile 1.4.0\\~ nvidia-peer-memory' && dpkg-deb -I '$deb' postinst | grep -qF 'dpkg-maintscript-helper rm_conffile $conffile 1.4.0\\~ nvidia-peer-memory'"
done

echo "== lintian"
lintian --fail-on none --no-tag-display-limit "$work/a/nvidia-peer-memory_${debver}_amd64.changes" >"$work/lintian.txt" 2>>"$work/log"
sed 's/^/  /' "$work/lintian.txt"
errors=$(grep -c '^E: ' "$work/lintian.txt")
check "lintian: 0 errors on source and debs ($errors)" test "$errors" = 0
# "W: <package>[ source]: <tag> [<where>]" -> <tag>
unexpected=$(sed -n 's/^W: [^:]*: \([^ ]*\).*/\1/p' "$work/lintian.txt" | sort -u | grep -vxF -f <(printf '%s\n' "${accepted_warnings[@]}") || true)
check "lintian: only accepted warnings${unexpected:+ (not accepted: $unexpected)}" test -z "$unexpected"

# A run stopped half-way (here: ci/test-dkms.sh's, after it placed its
# stand-ins) leaves the host with prerequisites; the next run must start
# without them, or its skip checks below fail for the wrong reason. Made
# here for real, then removed by the same call every suite's cleanup makes.
echo "== leftovers of an interrupted run"
kernels=()
for build in /lib/modules/*/build; do
    [ -e "$build/include" ] && kernels+=("$(basename "$(dirname "$build")")")
done
# prerequisites_here: what exports either prerequisite's symbol for some
# kernel here (depmod's modules.symbols, MLNX_OFED's per-kernel tree).
prerequisites_here() {
    grep -ls 'symbol:\(ib_register_peer_memory_client\|nvidia_p2p_get_pages\) ' /lib/modules/*/modules.symbols
    ls -d /usr/src/ofa_kernel 2>/dev/null
}
leftover_kver=${kernels[0]:-}
if [ -n "$leftover_kver" ]; then
    bash "$here/mofed-standin.sh" "$work/equivs-leftover" "$standin" \
        "Installed by ci/test-deb.sh as another run's leftover, and purged by it." >>"$work/log" 2>&1
    check "leftovers made: equivs stand-in, $leftover_kver's stand-in modules, DKMS stand-ins" sh -c \
        "dpkg -i '$work/equivs-leftover/${standin}_0-test_all.deb' && bash '$here/prereq-standin.sh' install '$leftover_kver' && bash '$here/prereq-standin.sh' dkms-add"
    check "remove-test-leftovers.sh removes them" bash "$here/remove-test-leftovers.sh"
    left=$(prerequisites_here
           ls -d /var/lib/dkms/mlnx-ofed-kernel /var/lib/dkms/nvidia-current /usr/src/mlnx-ofed-kernel-* /usr/src/nvidia-current-* 2>/dev/null
           dpkg-query -W -f='${Status}' "$standin" 2>/dev/null | grep -q 'install ok installed' && echo "$standin")
    check "nothing of them is left${left:+: $left}" test -z "$left"
    rm -rf "$work/equivs-leftover"
else
    fail "no kernel here has headers for the leftover stand-ins"
fi

echo "== install on kernels without MLNX_OFED and the NVIDIA driver"
if ! dpkg-query -W -f='${Status}' mlnx-ofed-kernel-dkms mlnx-ofed-kernel-modules 2>/dev/null | grep -q 'install ok installed'; then
    bash "$here/mofed-standin.sh" "$work/equivs" "$standin" \
        "Installed by ci/test-deb.sh only, and purged by it." >>"$work/log" 2>&1
    check "equivs stand-in for MLNX_OFED's package installed (no modules in it)" dpkg -i "$work/equivs/${standin}_0-test_all.deb"
fi
check "at least one kernel has headers (${kernels[*]:-none})" test "${#kernels[@]}" -gt 0
# The skip is only honest where the prerequisites really are absent.
exporters=$(prerequisites_here)
check "no kernel here has MLNX_OFED or NVIDIA symbols yet${exporters:+ ($exporters)}" test -z "$exporters"
check "dpkg -i of both debs succeeds" sh -c "dpkg -i '$deb' '$dkms_deb' >'$work/dpkg-i.txt' 2>&1"
# gpudirect-rdma-check, compiled by dpkg-buildpackage with the distro's
# rustc: installed with its manual page, and on this GPU-less host it
# says so with its documented status (3: nothing to check).
check "gpudirect-rdma-check installed in /usr/sbin with its manual page" sh -c \
    "test -x /usr/sbin/gpudirect-rdma-check && test -f /usr/share/man/man8/gpudirect-rdma-check.8.gz"
# The kernel hook (docs/next-boot.md): after dkms's in run-parts order, a
# conffile, and on this host (no nv_peer_mem for the kernel asked) it warns
# and still exits 0.
kernel_hook_installed() {
    local hook=/etc/kernel/postinst.d/zz-nv-peer-mem
    test -x "$hook" && grep -qx "$hook" /var/lib/dpkg/info/nvidia-peer-memory.conffiles &&
        ls /etc/kernel/postinst.d | LC_ALL=C sort |
        awk '/^dkms$/ { d = NR } /^zz-nv-peer-mem$/ { z = NR } END { exit !(z && (!d || z > d)) }'
}
check "the kernel hook /etc/kernel/postinst.d/zz-nv-peer-mem: executable, a conffile, after dkms's" kernel_hook_installed
hook_runs() {
    "$hook_path" "$(uname -r)" /boot/vmlinuz-"$(uname -r)" >"$work/hook.out" 2>&1 || return 1
    cat "$work/hook.out"
    grep -q "nv_peer_mem" "$work/hook.out"
}
hook_path=/etc/kernel/postinst.d/zz-nv-peer-mem
check "the kernel hook runs gpudirect-rdma-check for a kernel and exits 0 (says whether nv_peer_mem will load)" hook_runs
# apt's kernel guard (docs/fleet.md): the postinst's apt configuration, as
# apt itself reads it.
guard_configured() {
    apt-config dump >"$work/apt-config.txt" || return 1
    grep -F 'nv_peer_mem-apt-guard' "$work/apt-config.txt"
    grep -qx 'DPkg::Pre-Install-Pkgs:: "/usr/libexec/nv_peer_mem/nv_peer_mem-apt-guard";' "$work/apt-config.txt" &&
        grep -qx 'DPkg::Tools::Options::/usr/libexec/nv_peer_mem/nv_peer_mem-apt-guard::Version "2";' "$work/apt-config.txt" &&
        test -x /usr/libexec/nv_peer_mem/nv_peer_mem-apt-guard
}
check "apt's kernel guard: apt-config names it as a Pre-Install-Pkgs hook, protocol version 2" guard_configured
readiness_on_host() {
    local rc=0
    /usr/sbin/gpudirect-rdma-check >"$work/readiness.txt" 2>&1 || rc=$?
    sed 's/^/  /' "$work/readiness.txt"
    test "$rc" = 3 && grep -q 'no NVIDIA GPU' "$work/readiness.txt"
}
check "gpudirect-rdma-check on this host: exit 3, 'no NVIDIA GPU'" readiness_on_host
sed 's/^/  | /' "$work/dpkg-i.txt"
for p in "${packages[@]}"; do
    check "$p is installed and configured" sh -c "dpkg-query -W -f='\${Status}' $p | grep -qx 'install ok installed'"
done
not_built_line() {  # not_built_line FILE KVER: the skip line for KVER, naming both and the fix
    grep -F "nv_peer_mem: not built for kernel $2: it lacks MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)" "$1" |
        grep -qF "then run: dkms autoinstall -k $2"
}
no_module() { ! find "/lib/modules/$1" -name 'nv_peer_mem.ko*' 2>/dev/null | grep -q .; }
# skip_verdict KVER: before a reboot into KVER, gpudirect-rdma-check
# --kernel gives the same reason DKMS gave when it skipped the kernel
# (docs/next-boot.md), and the fix, and says the module will not load.
skip_verdict() {
    local out rc=0
    out=$(/usr/sbin/gpudirect-rdma-check --kernel "$1" 2>&1) || rc=$?
    echo "$out"
    [ "$rc" = 4 ] &&
        echo "$out" | grep -qF "its dkms.conf skips that kernel: it lacks MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)" &&
        echo "$out" | grep -qF "fix: install what $1 lacks (MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)), then run: dkms autoinstall -k $1"
}
for kver in "${kernels[@]}"; do
    check "$kver: skipped with the line naming what is missing and the fix" not_built_line "$work/dpkg-i.txt" "$kver"
    check "$kver: no nv_peer_mem.ko installed" no_module "$kver"
    if [ -e "/lib/modules/$kver/modules.dep" ]; then
        check "$kver: gpudirect-rdma-check --kernel $kver says NEXT BOOT LOST (exit 4) with DKMS's reason and the fix" skip_verdict "$kver"
    fi
done

# another_headers_install: installs the -cloud flavour of the oldest
# installed kernel: a different headers package whose kernel the module
# supports, so the kernel's dkms hook runs autoinstall for it as after a
# kernel upgrade. That kernel has neither prerequisite: dkms 3.0.10
# (bookworm) would fail the headers' postinst on a BUILD_EXCLUSIVE skip
# there, so dkms.conf must keep nv_peer_mem out of that autoinstall, whether
# the module is built for no kernel yet or already for others (then 3.0.10
# reads dkms.conf with those kernels' $kernelver: docs/packaging.md).
another_headers_install() {
    local base extra_kver extra
    base=$(printf '%s\n' "${kernels[@]}" | grep -- '-amd64$' | sort -V | head -n 1)
    extra_kver=${base%-amd64}-cloud-amd64
    extra=linux-headers-$extra_kver
    if [ -z "$base" ]; then
        fail "another linux-headers install: no -amd64 kernel with headers to pick a sibling flavour of"
    elif dpkg-query -W -f='${Status}' "$extra" 2>/dev/null | grep -qx 'install ok installed'; then
        # Already on the machine: run what its postinst runs, the dkms hook.
        check "dkms kernel hook for the installed $extra succeeds" sh -c "/etc/kernel/header_postinst.d/dkms '$extra_kver' >'$work/headers.txt' 2>&1"
        check "$extra_kver: skipped with the line naming what is missing and the fix" not_built_line "$work/headers.txt" "$extra_kver"
    elif apt-cache show "$extra" >/dev/null 2>&1; then
        echo "$extra" >"$work/extra-headers"
        echo "$extra_kver" >"$work/extra-kver"
        check "apt-get install $extra succeeds" \
            sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends '$extra' >'$work/headers.txt' 2>&1"
        sed -n '/dkms\|nv_peer_mem/s/^/  | /p' "$work/headers.txt"
        check "$extra is configured" sh -c "dpkg-query -W -f='\${Status}' $extra | grep -qx 'install ok installed'"
        check "$extra_kver: skipped with the line naming what is missing and the fix" not_built_line "$work/headers.txt" "$extra_kver"
        check "$extra_kver: no nv_peer_mem.ko installed" no_module "$extra_kver"
        # The headers' files under /usr/src fire -dkms's file trigger
        # (docs/next-boot.md, "Provider updates"): the other kernels' builds
        # are LOST here for want of MLNX_OFED, which no rebuild mends, so
        # none is redone.
        check "the headers install ran -dkms's trigger, which rebuilt nothing (no build is stale)" sh -c "
            grep -q '^Processing triggers for nvidia-peer-memory-dkms ' '$work/headers.txt' && ! grep -q 'rebuilding nv_peer_mem' '$work/headers.txt'"
        check "apt-get purge $extra succeeds" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$extra"
        rm -f "$work/extra-headers"
    else
        fail "another linux-headers install: $extra is not available; run apt-get update"
    fi
}
echo "== another linux-headers install, still without the prerequisites"
another_headers_install

echo "== a kernel update with MLNX_OFED and NVIDIA from DKMS"
# Both prerequisites registered with DKMS (ci/prereq-standin.sh dkms-add:
# mlnx-ofed-kernel and nvidia-current, as MLNX_OFED's and Debian's DKMS
# packages register them) and built for no kernel yet: the kernel hook a
# kernel image install runs (/etc/kernel/postinst.d/dkms, one dkms
# autoinstall for the new kernel) must build them and then nv_peer_mem.
# dkms.conf reads as "MLNX_OFED and the driver are missing" for that kernel
# until they are built; without BUILD_DEPENDS on them dkms 3.0.10 never
# queues nv_peer_mem and the new kernel boots without it (issue 23).
newest=$(printf '%s\n' "${kernels[@]}" | sort -V | tail -n 1)
check "MLNX_OFED and NVIDIA DKMS stand-ins registered (mlnx-ofed-kernel, nvidia-current)" bash "$here/prereq-standin.sh" dkms-add
check "$newest: the kernel's dkms hook (postinst.d) succeeds" sh -c \
    "/etc/kernel/postinst.d/dkms '$newest' >'$work/kernel-update.txt' 2>&1; rc=\$?; grep -v '^readelf: Warning' '$work/kernel-update.txt' | tail -n 8; exit \$rc"
for name in mlnx-ofed-kernel nvidia-current nv_peer_mem; do
    check "$newest: dkms status: $name installed by the same autoinstall" sh -c "dkms status -m $name -k '$newest' | grep -q ': installed'"
done
check "$newest: no skip line for nv_peer_mem" sh -c "! grep -q 'nv_peer_mem: not built' '$work/kernel-update.txt'"
# dkms prints "<module>.ko[.xz]:" as it installs each module.
installed_last() {
    grep -Ex '(nv_peer_mem|nvpm_standin_[a-z]+)\.ko(\.[a-z]+)?:' "$work/kernel-update.txt" | sed 's/\..*//' | tr '\n' ' ' |
        grep -Eqx '(nvpm_standin_(mofed|nvidia) ){2}nv_peer_mem '
}
check "$newest: nv_peer_mem installed after both stand-ins" installed_last
check "DKMS stand-ins removed" bash "$here/prereq-standin.sh" dkms-remove
check "$newest: nv_peer_mem unbuilt again for the next steps" dkms unbuild -m nv_peer_mem -v "$upstream" -k "$newest"

echo "== the prerequisites appear: dkms autoinstall builds the module"
# ci/prereq-standin.sh: real modules for each kernel exporting the two
# symbols, where MLNX_OFED's DKMS package and the NVIDIA driver put them.
for kver in "${kernels[@]}"; do
    echo "$kver" >>"$work/standin-kernels"
    check "$kver: MLNX_OFED and NVIDIA stand-ins placed" bash "$here/prereq-standin.sh" install "$kver"
    check "$kver: dkms autoinstall -k $kver succeeds" sh -c "dkms autoinstall -k '$kver' >'$work/autoinstall.txt' 2>&1; rc=\$?; cat '$work/autoinstall.txt'; exit \$rc"
    check "$kver: no skip line any more" sh -c "! grep -q 'nv_peer_mem: not built' '$work/autoinstall.txt'"
    check "dkms status: nv_peer_mem installed for $kver" sh -c "dkms status -m nv_peer_mem -v '$upstream' -k '$kver' | grep -q ': installed'"
    check "modinfo -k $kver nv_peer_mem finds version $version" sh -c "modinfo -k '$kver' -F version nv_peer_mem | grep -qx '$version'"
done

echo "== another linux-headers install, nv_peer_mem built for the other kernels"
another_headers_install

# BUILD_EXCLUSIVE_KERNEL: a kernel older than 4.18 is skipped (dkms exit 77,
# which the package's postinst reports as "Skipped."), not a build failure.
check "dkms build for kernel 3.10.0 is skipped with exit 77" \
    sh -c "dkms build -m nv_peer_mem -v '$upstream' -k 3.10.0-1160.el7.x86_64; test \$? = 77"

echo "== service helper (installed)"
# The start/boot/stop checks ci/test-service.sh runs on the source tree's
# helper, here on the one the deb installed, on the same fake machine.
helper=/usr/libexec/nv_peer_mem/nv_peer_mem-service
fake=$work/fake
. "$here/kernels.sh"
kver=$KVER_BOOKWORM
. "$here/lib/service-helper.sh"
start_stop_checks
status_loaded() { new_machine && boot_with_onboot_yes && run_helper status; }
check "helper status: loaded exits 0" status_loaded
status_not_loaded_is_3() { run_helper stop && ! loaded nv_peer_mem || return 1; run_helper status; [ $? = 3 ]; }
check "helper status: not loaded exits 3" status_not_loaded_is_3
check "unit file installed and enabled" sh -c "test -f /lib/systemd/system/nv_peer_mem.service -o -f /usr/lib/systemd/system/nv_peer_mem.service && test -L /etc/systemd/system/multi-user.target.wants/nv_peer_mem.service"

echo "== purge"
check "dpkg -P of both debs" dpkg -P "${packages[@]}"
left=$(nv_peer_mem_leftovers "${packages[@]}")
check "nothing left under /usr/src, /var/lib/dkms, /var/cache (the DKMS builds' core cache), /lib/modules/*/updates, /etc (the apt guard's configuration too), dpkg's database${left:+: $left}" test -z "$left"
while read -r kver; do
    check "$kver: stand-ins removed" bash "$here/prereq-standin.sh" remove "$kver"
done <"$work/standin-kernels"
rm -f "$work/standin-kernels"

finish
