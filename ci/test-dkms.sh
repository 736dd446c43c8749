#!/usr/bin/env bash
# End-to-end test of `cargo xtask build-dkms` (docs/packaging.md), for real, as
# root on a Debian 12 machine prepared by ci/setup-host.sh:
#   the xtask unit tests pass; build-dkms writes the .deb and the noarch .rpm,
#   also with dpkg-buildpackage, dpkg-deb and rpmbuild hidden from PATH, and
#   twice gives the same sha256; bad input exits 2 and writes nothing;
#   dpkg-deb --info/--contents, lintian (0 errors) on the deb; rpm -K,
#   rpm -qpl --scripts, rpmlint (0 errors, rpm/rpmlint.toml) on the rpm;
#   the rpm installs into a scratch root with the expected files;
#   the route comparison: both packages against the -dkms packages that
#   dpkg-buildpackage (build-deb's source) and rpmbuild --rebuild
#   (build-srpm's source rpm) make: same files, modes, owners, digests,
#   control fields / header tags, dependencies and scripts; the same for
#   Ubuntu 26.04's -dkms deb, with lintian on its source and debs;
#   dpkg -i of the deb makes DKMS build the module for every kernel with
#   headers; an update of a provider package (the MLNX_OFED stand-in, a
#   file under /usr/src) fires its file trigger, which rebuilds them;
#   dpkg -P leaves nothing.
# The host install is serialised with other users of this machine
# (flock /var/lock/nv-peer-mem-host-packages.lock) and undone on exit.
# Last line: "N passed, M failed"; exit status 1 when anything failed,
# 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-dkms}
package=nvidia-peer-memory-dkms
standin=mlnx-ofed-kernel-modules   # satisfies mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules

# lintian warnings accepted on the deb, each with its reason (as in
# ci/test-deb.sh for the deb dpkg-buildpackage makes):
accepted_warnings=(
    # Not uploaded to Debian, so there is no ITP bug to close.
    initial-upload-closes-no-bugs
)

. "$here/checks.sh"
. "$here/lib/host-packages.sh"
. "$here/lib/routes.sh"

require_root_and_tools test-dkms.sh cargo git dpkg-deb dpkg-buildpackage lintian rpm rpmbuild rpmlint equivs-build dkms sha256sum flock

rm -rf "$work"
mkdir -p "$work/a" "$work/b" "$work/hidden" "$work/deb-route" "$work/rpm-route" "$work/equivs"
: >"$work/log"
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
upstream=${version/-/\~}
release=1
# debian12's version_suffix (packaging/distros.yaml): the deb's version is
# <upstream>-<release><suffix>, as debian/changelog gives it.
suffix=$(sed -n '/^  - id: debian12$/,/^  - id:/s/^    version_suffix: "\(.*\)"$/\1/p' "$root/packaging/distros.yaml")
deb_name=${package}_${upstream}-${release}${suffix}_all.deb
# An rpm distro entry's dist (packaging/distros.yaml: the distribution's
# %dist macro, "" for SUSE): rpmbuild there appends it to the release, and
# build-dkms names its rpm the same way.
# --format both with a deb --distro builds the rpm for the rpm family's
# default on a Debian host, rhel9.
rpm_name=nvidia_peer_memory-dkms-$version-$release$(dist_of rhel9).noarch.rpm
fedora_dist=$(dist_of fedora)
fedora_rpm_name=nvidia_peer_memory-dkms-$version-$release$fedora_dist.noarch.rpm

echo "== build-dkms"
check "xtask unit tests (dkms_package::, pipeline::)" cargo test --quiet --release --manifest-path "$root/Cargo.toml" -p xtask -- dkms_package:: pipeline::
check "cargo build of xtask" cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask
xtask=$root/target/release/xtask
check "build-dkms prints Built: <path> for both packages" sh -c \
    "'$xtask' build-dkms --out '$work/a' --distro debian12 --format both >'$work/built.txt' && grep -qx 'Built: $work/a/$deb_name' '$work/built.txt' && grep -qx 'Built: $work/a/$rpm_name' '$work/built.txt'"
# The install hint names the family's own tool: zypper for SLES's rpm, dnf
# for the Red Hat family's, never one family's rpm with the other's tool.
install_hint() { # <distro id> <tool named> <tool not named>
    rm -rf "$work/hint" && mkdir -p "$work/hint"
    "$xtask" build-dkms --out "$work/hint" --distro "$1" --format rpm >"$work/hint.txt" 2>&1 || return 1
    cat "$work/hint.txt"
    grep -Eq "^    $2 install $work/hint/nvidia_peer_memory-dkms-[^ ]*\.noarch\.rpm\$" "$work/hint.txt" && ! grep -q "$3" "$work/hint.txt"
}
check "build-dkms --distro sles15 --format rpm: the hint is zypper install of that rpm" install_hint sles15 zypper dnf
check "build-dkms --distro rhel9 --format rpm: the hint is dnf install of that rpm" install_hint rhel9 dnf zypper
"$xtask" build-dkms --out "$work/b" --distro debian12 --format both >>"$work/log" 2>&1
deb=$work/a/$deb_name
rpm_file=$work/a/$rpm_name
for name in "$deb_name" "$rpm_name"; do
    sum_a=$(sha256sum <"$work/a/$name" 2>/dev/null | cut -d' ' -f1)
    sum_b=$(sha256sum <"$work/b/$name" 2>/dev/null | cut -d' ' -f1)
    check "two build-dkms runs give the same sha256 for $name (${sum_a:-none})" test -n "$sum_a" -a "$sum_a" = "$sum_b"
done
[ -f "$deb" ] && [ -f "$rpm_file" ] || finish

# No packaging tool on PATH: only git (the module sources are git's list).
mkdir -p "$work/bin"
ln -sf "$(command -v git)" "$work/bin/git"
hidden_run() {
    local tool
    for tool in dpkg-buildpackage dpkg-deb dpkg debhelper dh rpmbuild rpm gzip xz tar; do
        if env PATH="$work/bin" /bin/sh -c "command -v $tool"; then
            echo "$tool is still on PATH"
            return 1
        fi
    done
    env PATH="$work/bin" "$xtask" build-dkms --out "$work/hidden" --distro debian12 --format both &&
        cmp "$work/hidden/$deb_name" "$deb" && cmp "$work/hidden/$rpm_name" "$rpm_file"
}
check "build-dkms with only git on PATH (no dpkg-*, rpm*, tar, gzip, xz): the same two files" hidden_run

# Bad input: exit status 2, a message naming the fix, no file written.
check "unknown --distro: exit 2, nothing written" bad_input build-dkms "unknown distro" --out "$work/bad" --distro plan9
check "--format deb with an rpm --distro: exit 2, nothing written" bad_input build-dkms "rpm distribution" --out "$work/bad" --format deb --distro rhel9
check "--format both, unknown --distro: exit 2, no deb or rpm written" bad_input build-dkms "unknown distro" --out "$work/bad" --format both --distro plan9
check "--format zip: exit 2, nothing written" bad_input build-dkms "invalid value" --out "$work/bad" --format zip
check "--release 0: exit 2, nothing written" bad_input build-dkms "release" --out "$work/bad" --release 0
check "missing --out: exit 2" bad_input build-dkms "no such directory" --out "$work/bad/no/such/dir"

echo "== the deb"
check "dpkg-deb --info" dpkg-deb --info "$deb"
check "dpkg-deb --contents lists dkms.conf and the module sources" sh -c \
    "dpkg-deb --contents '$deb' | grep -q ' ./usr/src/nv_peer_mem-$upstream/dkms.conf\$' && dpkg-deb --contents '$deb' | grep -q ' ./usr/src/nv_peer_mem-$upstream/kmod/Makefile\$'"
lintian --fail-on none --no-tag-display-limit "$deb" >"$work/lintian.txt" 2>>"$work/log"
sed 's/^/  /' "$work/lintian.txt"
errors=$(grep -c '^E: ' "$work/lintian.txt")
check "lintian: 0 errors on the deb ($errors)" test "$errors" = 0
unexpected=$(sed -n 's/^W: [^:]*: \([^ ]*\).*/\1/p' "$work/lintian.txt" | sort -u | grep -vxF -f <(printf '%s\n' "${accepted_warnings[@]}") || true)
check "lintian: only accepted warnings${unexpected:+ (not accepted: $unexpected)}" test -z "$unexpected"

echo "== the rpm"
check "rpm -K: digests OK" sh -c "rpm -K '$rpm_file' | grep -q 'digests OK'"
rpm -qpl --scripts "$rpm_file" >"$work/rpm-qpl.txt" 2>>"$work/log"
check "rpm -qpl lists dkms.conf and the module sources" sh -c \
    "grep -qx '/usr/src/nv_peer_mem-$version/dkms.conf' '$work/rpm-qpl.txt' && grep -qx '/usr/src/nv_peer_mem-$version/kmod/Makefile' '$work/rpm-qpl.txt'"
check "rpm --scripts: dkms add/install in %post, dkms remove in %preun" sh -c \
    "grep -q 'dkms add' '$work/rpm-qpl.txt' && grep -q 'dkms install' '$work/rpm-qpl.txt' && grep -q 'dkms remove' '$work/rpm-qpl.txt'"
rpmlint -c "$root/rpm/rpmlint.toml" "$rpm_file" >"$work/rpmlint.txt" 2>&1
sed 's/^/  /' "$work/rpmlint.txt"
summary=$(grep -E 'packages and [0-9]+ specfiles checked' "$work/rpmlint.txt")
check "rpmlint: 0 errors" sh -c "echo '$summary' | grep -q ' 0 errors,'"
check "rpmlint: no warning outside rpm/rpmlint.toml's accepted list" sh -c "echo '$summary' | grep -q ' 0 warnings,'"
scratch=$work/rpm-root
rm -rf "$scratch"; mkdir -p "$scratch"
# --nodeps: what is checked here is the payload (files, rpm -V); the same
# -dkms package's relations are resolved with dnf in ci/test-rpm.sh.
check "rpm -i --root (scratch) --nodeps --noscripts" rpm -i --root "$scratch" --nodeps --noscripts "$rpm_file"
check "scratch root has /usr/src/nv_peer_mem-$version/{dkms.conf,kmod/Makefile,kmod/VERSION}" sh -c \
    "test -f '$scratch/usr/src/nv_peer_mem-$version/dkms.conf' && test -f '$scratch/usr/src/nv_peer_mem-$version/kmod/Makefile' && grep -qx '$version' '$scratch/usr/src/nv_peer_mem-$version/kmod/VERSION'"
check "rpm --root -V --nodeps: the installed files match the package" rpm --root "$scratch" -V --nodeps nvidia_peer_memory-dkms

echo "== route comparison: dpkg-buildpackage of build-deb's source"
"$xtask" build-deb --out "$work/deb-route" --distro debian12 >>"$work/log" 2>&1
check "dpkg-buildpackage -us -uc of build-deb's source" sh -c \
    "cd '$work/deb-route' && tar xzf nvidia-peer-memory_$upstream.orig.tar.gz && cd nvidia-peer-memory-$upstream && dpkg-buildpackage -us -uc"
route_deb=$work/deb-route/$deb_name
# What must be equal: file modes, owners and paths (not mtimes); the md5
# of every file but the gzip'd changelog, whose compressed bytes depend
# on the compressor (its text is compared); control fields; the triggers
# file; scripts with
# debhelper's "Automatically added by <tool/version>" lines left out.
deb_facts() {
    local deb=$1 out=$2 x
    mkdir -p "$out/x"
    dpkg-deb --contents "$deb" | awk '{print $1, $2, $6}' >"$out/contents"
    dpkg-deb --field "$deb" >"$out/control"
    dpkg-deb --control "$deb" "$out/x"
    ls "$out/x" >"$out/members"
    grep -v changelog.Debian.gz "$out/x/md5sums" >"$out/md5sums"
    for x in preinst postinst prerm postrm triggers; do
        [ -f "$out/x/$x" ] && grep -v '^# Automatically added by ' "$out/x/$x" >"$out/$x"
    done
    dpkg-deb --fsys-tarfile "$deb" | tar xO ./usr/share/doc/$package/changelog.Debian.gz | gunzip >"$out/changelog"
    rm -rf "$out/x"
}
compare_debs() {  # compare_debs DISTRO_BUILT_DEB XTASK_DEB
    rm -rf "$work/cmp-deb"
    deb_facts "$1" "$work/cmp-deb/route" && deb_facts "$2" "$work/cmp-deb/xtask" &&
        diff -r "$work/cmp-deb/route" "$work/cmp-deb/xtask"
}
# differs COMPARE A B: B exists and COMPARE finds a difference.
differs() { [ -f "$3" ] && ! "$1" "$2" "$3"; }
# The comparison must see a difference: build-dkms --release 2 differs
# (Version, Release), so comparing it has to fail.
"$xtask" build-dkms --out "$work/b" --format both --distro debian12 --release 2 >>"$work/log" 2>&1
release2_deb=$work/b/${package}_${upstream}-2${suffix}_all.deb
if [ -f "$route_deb" ]; then
    check "build-dkms's deb = dpkg-buildpackage's $deb_name (files, modes, owners, md5sums, control, scripts)" compare_debs "$route_deb" "$deb"
    check "the deb comparison fails on a different package (--release 2)" differs compare_debs "$route_deb" "$release2_deb"
else
    fail "dpkg-buildpackage made no $deb_name"
fi

# Ubuntu 26.04 (issue 43): the source and -dkms deb dpkg-buildpackage makes
# from build-deb --distro ubuntu2604 (--build=source,all: the -dkms deb and
# the source, not the host's compile of gpudirect-rdma-check; -d: its
# Build-Depends name resolute's rustc, which this bookworm host has as
# rustc-web, which find-rustc.sh finds) against build-dkms's, and lintian
# (Ubuntu's profile) on both. This host's lintian is bookworm's 2.116, older
# than resolute; accepted for this source only, each exactly as printed:
u_accepted_lines=(
    # Its Ubuntu known-dists end at lunar (23.04): /usr/share/lintian/
    # vendors/ubuntu/main/data/changes-file/known-dists.
    'E: nvidia-peer-memory changes: bad-distribution-in-changes-file resolute'
    # It knows Policy up to 4.6.2; resolute's lintian 2.129 knows 4.7.3
    # (packaging/distros.yaml, ubuntu2604's standards_version).
    'W: nvidia-peer-memory source: newer-standards-version 4.7.3 (current is 4.6.2)'
    # Its Fields/Version.pm takes a revision with two dots for a binNMU
    # unless more follows "ubuntuN.N": the ~ubuntuYY.MM.N suffix every Ubuntu
    # entry has (packaging/distros.yaml, version_suffix) trips it.
    "W: nvidia-peer-memory source: binary-nmu-debian-revision-in-source ${upstream}-${release}~ubuntu26.04.1"
)
# and, as in ci/test-deb.sh, these tags with their reasons there:
u_accepted_tags=(initial-upload-closes-no-bugs no-debian-changes)
u_deb_name=${package}_${upstream}-${release}~ubuntu26.04.1_all.deb
mkdir -p "$work/deb-route-2604" "$work/dkms-2604"
"$xtask" build-deb --out "$work/deb-route-2604" --distro ubuntu2604 >>"$work/log" 2>&1
"$xtask" build-dkms --out "$work/dkms-2604" --distro ubuntu2604 --format deb >>"$work/log" 2>&1
check "ubuntu2604: dpkg-buildpackage --build=source,all -us -uc -d of build-deb's source" sh -c \
    "cd '$work/deb-route-2604' && tar xzf nvidia-peer-memory_$upstream.orig.tar.gz && cd nvidia-peer-memory-$upstream && dpkg-buildpackage --build=source,all -us -uc -d"
u_changes=$(ls "$work"/deb-route-2604/nvidia-peer-memory_*_source+all.changes "$work"/deb-route-2604/nvidia-peer-memory_*_all.changes 2>/dev/null | head -n 1)
if [ -f "$work/deb-route-2604/$u_deb_name" ] && [ -f "$work/dkms-2604/$u_deb_name" ] && [ -n "$u_changes" ]; then
    check "ubuntu2604: build-dkms's deb = dpkg-buildpackage's $u_deb_name (files, modes, owners, md5sums, control, scripts)" \
        compare_debs "$work/deb-route-2604/$u_deb_name" "$work/dkms-2604/$u_deb_name"
    lintian --profile ubuntu --fail-on none --tag-display-limit 0 "$u_changes" "$work/dkms-2604/$u_deb_name" 2>>"$work/log" |
        grep -v 'running with root' >"$work/lintian-2604.txt"
    sed 's/^/  /' "$work/lintian-2604.txt"
    grep -vxF -f <(printf '%s\n' "${u_accepted_lines[@]}") "$work/lintian-2604.txt" |
        grep -v -E "^[EW]: [^:]*: ($(IFS='|'; echo "${u_accepted_tags[*]}"))( |\$)" >"$work/lintian-2604-left.txt"
    check "ubuntu2604: lintian --profile ubuntu on the source and both -dkms debs: nothing but the accepted lines (left: $(tr '\n' ';' <"$work/lintian-2604-left.txt"))" \
        test ! -s "$work/lintian-2604-left.txt" -a -s "$work/lintian-2604.txt"
    check "ubuntu2604: the -dkms deb depends on Ubuntu's DOCA-OFED names beside MLNX_OFED's" sh -c \
        "dpkg-deb -f '$work/dkms-2604/$u_deb_name' Depends | grep -qF 'mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules | doca-ofed-26.01-dkms | doca-ofed-3.4-dkms | linux-modules-doca-ofed-26.01-generic | linux-modules-doca-ofed-3.4-generic'"
else
    fail "ubuntu2604: dpkg-buildpackage or build-dkms made no $u_deb_name (or no .changes)"
fi

echo "== route comparison: rpmbuild --rebuild of build-srpm's source rpm"
kver=$(for build in /lib/modules/*/build; do [ -d "$build/" ] && basename "$(dirname "$build")"; done | sort -V | tail -n 1)
# Fedora's spec (the DKMS route, packaging/distros.yaml) builds no module,
# so rpmbuild needs no kernel module macros here; its -dkms subpackage is
# the same template as every family's (ci/test-rpm.sh rebuilds those with
# the real macros).
mkdir -p "$work/rpm-route/xtask" "$work/rpm-route/xtask-2"
"$xtask" build-srpm --out "$work/rpm-route" --distro fedora >>"$work/log" 2>&1
"$xtask" build-dkms --out "$work/rpm-route/xtask" --distro fedora --format rpm >>"$work/log" 2>&1
"$xtask" build-dkms --out "$work/rpm-route/xtask-2" --distro fedora --format rpm --release 2 >>"$work/log" 2>&1
fedora_rpm=$work/rpm-route/xtask/$fedora_rpm_name
release2_rpm=$work/rpm-route/xtask-2/nvidia_peer_memory-dkms-$version-2$fedora_dist.noarch.rpm
check "fedora's entry in packaging/distros.yaml has a dist line ('$fedora_dist')" \
    grep -q '^    dist: ' <(sed -n '/^  - id: fedora$/,/^  - id:/p' "$root/packaging/distros.yaml")
# The entry's dist as the build host's %dist; rpm 4.18 refuses an empty
# macro body, %{nil} defines it to nothing.
# --nodeps: the BuildRequires are Fedora's packages, which this Debian
# host's rpm database does not list.
check "rpmbuild --rebuild --nodeps --define 'dist ${fedora_dist:-%{nil}}' of build-srpm's fedora source rpm" \
    rpmbuild --rebuild --nodeps --define "_topdir $work/rpm-route/top" --define "_tmppath $work/rpm-route/tmp" \
    --define "dist ${fedora_dist:-%{nil}}" "$work/rpm-route/nvidia_peer_memory-$version-$release.src.rpm"
route_rpm=$work/rpm-route/top/RPMS/noarch/$fedora_rpm_name
# What must be equal: files with modes, owners, digests and flags; the
# header tags a user sees; every dependency kind; the scriptlets with
# their interpreters and the file triggers; the changelog. Not the build host, build time or source rpm name.
rpm_facts() {
    local rpm=$1 out=$2 kind
    mkdir -p "$out"
    rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILEDIGESTS} %{FILENAMES}\n]' "$rpm" >"$out/files"
    rpm -qp --qf 'Name: %{NAME}\nVersion: %{VERSION}\nRelease: %{RELEASE}\nEpoch: %{EPOCH}\nArch: %{ARCH}\nLicense: %{LICENSE}\nGroup: %{GROUP}\nURL: %{URL}\nVendor: %{VENDOR}\nSummary: %{SUMMARY}\n%{DESCRIPTION}\n' "$rpm" >"$out/tags"
    for kind in requires provides conflicts obsoletes recommends suggests supplements enhances; do
        rpm -qp --"$kind" "$rpm" | sort -u >"$out/$kind"
    done
    rpm -qp --scripts "$rpm" >"$out/scripts"
    rpm -qp --filetriggers "$rpm" >"$out/filetriggers"
    rpm -qp --changelog "$rpm" >"$out/changelog"
}
compare_rpms() {  # compare_rpms DISTRO_BUILT_RPM XTASK_RPM
    rm -rf "$work/cmp-rpm"
    rpm_facts "$1" "$work/cmp-rpm/route" && rpm_facts "$2" "$work/cmp-rpm/xtask" &&
        diff -r "$work/cmp-rpm/route" "$work/cmp-rpm/xtask"
}
if [ -f "$route_rpm" ]; then
    check "build-dkms's rpm = rpmbuild's $fedora_rpm_name (files, modes, owners, digests, tags, dependencies, scriptlets, changelog)" compare_rpms "$route_rpm" "$fedora_rpm"
    check "the rpm comparison fails on a different package (--release 2)" differs compare_rpms "$route_rpm" "$release2_rpm"
else
    fail "rpmbuild made no $fedora_rpm_name"
fi

echo "== install on this host (waiting for the host package lock)"
hold_host_packages
# The package, the equivs stand-in and prereq-standin.sh's modules, this
# run's and those of any run (this suite's or ci/test-deb.sh's) stopped
# before its cleanup: ci/lib/host-packages.sh.
trap 'cleanup_host_packages' EXIT
trap 'echo "interrupted"; exit 130' INT TERM
cleanup_host_packages
our_standin=
if ! dpkg-query -W -f='${Status}' mlnx-ofed-kernel-dkms mlnx-ofed-kernel-modules 2>/dev/null | grep -q 'install ok installed'; then
    bash "$here/mofed-standin.sh" "$work/equivs" "$standin" \
        "Installed by ci/test-dkms.sh only, and purged by it." >>"$work/log" 2>&1
    check "equivs stand-in for MLNX_OFED installed" dpkg -i "$work/equivs/${standin}_0-test_all.deb"
    our_standin=1
fi
check "dpkg -i of build-dkms's deb" dpkg -i "$deb"
check "$package is installed and configured" sh -c "dpkg-query -W -f='\${Status}' $package | grep -qx 'install ok installed'"
kernels=()
for build in /lib/modules/*/build; do
    [ -e "$build/include" ] && kernels+=("$(basename "$(dirname "$build")")")
done
check "at least one kernel has headers (${kernels[*]:-none})" test "${#kernels[@]}" -gt 0
# Without MLNX_OFED's and NVIDIA's symbols DKMS skips each kernel
# (dkms.conf); ci/prereq-standin.sh places real modules exporting them, as
# ci/test-deb.sh does, and dkms autoinstall builds.
for kver in "${kernels[@]}"; do
    check "$kver: MLNX_OFED and NVIDIA stand-ins placed" bash "$here/prereq-standin.sh" install "$kver"
    check "$kver: dkms autoinstall -k $kver succeeds" dkms autoinstall -k "$kver"
    check "dkms status: nv_peer_mem installed for $kver" sh -c "dkms status -m nv_peer_mem -v '$upstream' -k '$kver' | grep -q ': installed'"
    check "modinfo -k $kver nv_peer_mem finds version $version" sh -c "modinfo -k '$kver' -F version nv_peer_mem | grep -qx '$version'"
done
# Issue 40 item 12 on this host: a provider package updated (the MLNX_OFED
# stand-in's next version, with a file under /usr/src/ofa_kernel/) fires
# the deb's file trigger; dpkg runs its postinst's triggered branch, whose
# script (packaging/nv_peer_mem-dkms-rebuild, from the DKMS source tree)
# rebuilds every DKMS build here: without the service package there is no
# gpudirect-rdma-check to tell a stale build from a good one. (The verdict
# deciding, and a real change of symbol versions, are in the booted image:
# ci/test-image.sh, next-boot-crc.)
provider_update_rebuilds() {
    local k before=() i=0 out
    for k in "${kernels[@]}"; do before+=("$(stat -c %Y /lib/modules/"$k"/updates/dkms/nv_peer_mem.ko* 2>/dev/null)"); done
    sleep 1
    dpkg -i "$work/equivs/${standin}_1-test_all.deb" >"$work/provider-update.out" 2>&1 || { cat "$work/provider-update.out"; return 1; }
    cat "$work/provider-update.out"
    grep -q "^Processing triggers for $package " "$work/provider-update.out" || return 1
    for k in "${kernels[@]}"; do
        grep -qF "nv_peer_mem: a package it is built against changed for kernel $k: rebuilding nv_peer_mem $upstream with DKMS" "$work/provider-update.out" &&
            dkms status -m nv_peer_mem -v "$upstream" -k "$k" | grep -q ': installed' &&
            [ "$(stat -c %Y /lib/modules/"$k"/updates/dkms/nv_peer_mem.ko* 2>/dev/null)" -gt "${before[$i]:-0}" ] ||
            { echo "$k: not rebuilt"; dkms status; return 1; }
        i=$((i + 1))
    done
}
if [ -n "$our_standin" ]; then
    bash "$here/mofed-standin.sh" "$work/equivs" "$standin" \
        "Installed by ci/test-dkms.sh only, and purged by it." update >>"$work/log" 2>&1
    check "a provider update (MLNX_OFED's stand-in, 99:1-test, a file under /usr/src) fires the trigger: DKMS's build redone for ${kernels[*]}, installed" \
        provider_update_rebuilds
else
    skip "the provider update trigger: a real MLNX_OFED package is installed here, which this test does not update"
fi
check "dpkg -P $package" dpkg -P "$package"
left=$(nv_peer_mem_leftovers "$package")
check "nothing left under /usr/src, /var/lib/dkms, /var/cache, /lib/modules/*/updates, /etc, dpkg's database${left:+: $left}" test -z "$left"

finish
