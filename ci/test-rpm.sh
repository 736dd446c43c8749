#!/usr/bin/env bash
# End-to-end test of `cargo xtask build-srpm` (docs/packaging.md), for real, as root
# on a Debian 12 machine prepared by ci/setup-host.sh (rpm, rpmbuild, rpmlint,
# Debian kernel headers, rustc-web):
#   the xtask writer/spec unit and golden tests pass; build-srpm twice gives
#   the same sha256; bad input exits 2 and writes nothing; rpm -K passes;
#   rpm -qpi / -qpl show the fields and files; every rpm distro entry builds;
#   rpmbuild --rebuild --nodeps --define "KVERSION <Debian headers>" yields
#   both binary rpms with the right files, dependencies and a .ko that
#   modinfo accepts; rpmlint (with rpm/rpmlint.toml's justified filters)
#   reports 0 errors and 0 warnings on the source and binary rpms;
#   every family's packages install with dnf (a real resolver) from a
#   repository beside stand-ins for MLNX_OFED's and NVIDIA's packages
#   (ci/rpm-providers.sh, ci/rpm-resolver.sh) and are refused without them;
#   Mellanox's 1.3 rpm (ci/mellanox13-rpm.sh) installed into a scratch root
#   is replaced by rhel9's -common and kmod through Obsoletes, keeping its
#   conf; the kmod's kABI tracking through its own scriptlets; the dnf
#   plugin's kernel guard, provider watch and -dkms route's kernel check,
#   run by real dnf; Fedora's dnf5 guard, run by real dnf5 in a sid chroot
#   (ci/chroot.sh).
# Everything is built under $NVPM_TEST_DIR (default /var/tmp/nv-peer-mem-
# test-rpm); nothing is installed. Last line: "N passed, M failed"; exit
# status 1 when anything failed, 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-rpm}

. "$here/checks.sh"
. "$here/lib/routes.sh"
. "$here/softhsm.sh"

require_root_and_tools test-rpm.sh cargo rpm rpmbuild rpm2cpio rpmlint cpio modinfo sha256sum dnf createrepo_c softhsm2-util

# The kernel to build for: Debian's current bookworm kernel (ci/kernels.sh)
# when its headers are installed, else the newest kernel with headers.
kver=${NVPM_KVER:-}
if [ -z "$kver" ] && . "$here/kernels.sh" 2>/dev/null && [ -d "/lib/modules/$KVER_BOOKWORM/build/" ]; then
    kver=$KVER_BOOKWORM
fi
if [ -z "$kver" ]; then
    kver=$(for build in /lib/modules/*/build; do [ -d "$build/" ] && basename "$(dirname "$build")"; done | sort -V | tail -n 1)
fi
if [ -z "$kver" ] || [ ! -d "/lib/modules/$kver/build/" ]; then
    echo "test-rpm.sh: no kernel headers installed; run: sudo bash ci/setup-host.sh" >&2
    exit 2
fi

rm -rf "$work"
mkdir -p "$work/a" "$work/b" "$work/distros"
: >"$work/log"
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
release=1
srpm_name=nvidia_peer_memory-$version-$release.src.rpm
kmod_rpm_name=nvidia_peer_memory-$version-$release.x86_64.rpm
dkms_rpm_name=nvidia_peer_memory-dkms-$version-$release.noarch.rpm

echo "== build-srpm (kernel for rpmbuild: $kver)"
check "xtask writer, spec and golden tests" cargo test --quiet --release --manifest-path "$root/Cargo.toml" -p xtask -- srpm::
check "cargo build of xtask" cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask
xtask=$root/target/release/xtask
check "build-srpm prints Built: <path> and the rpmbuild step" sh -c \
    "'$xtask' build-srpm --out '$work/a' --distro rhel9 >'$work/built.txt' && grep -qx 'Built: $work/a/$srpm_name' '$work/built.txt' && grep -q 'rpmbuild --rebuild $work/a/$srpm_name' '$work/built.txt'"
"$xtask" build-srpm --out "$work/b" --distro rhel9 >>"$work/log" 2>&1
srpm=$work/a/$srpm_name
sum_a=$(sha256sum <"$srpm" 2>/dev/null | cut -d' ' -f1)
sum_b=$(sha256sum <"$work/b/$srpm_name" 2>/dev/null | cut -d' ' -f1)
check "two build-srpm runs give the same sha256 (${sum_a:-none})" test -n "$sum_a" -a "$sum_a" = "$sum_b"
[ -f "$srpm" ] || finish

# Bad input: exit status 2, a message naming the fix, no file written.
check "unknown --distro: exit 2, lists the known ones, nothing written" bad_input build-srpm "rhel9, rhel10" --out "$work/bad" --distro plan9
check "deb --distro: exit 2, nothing written" bad_input build-srpm "build-deb" --out "$work/bad" --distro debian12
check "--release 0: exit 2, nothing written" bad_input build-srpm "release" --out "$work/bad" --release 0
check "missing --out: exit 2" bad_input build-srpm "no such directory" --out "$work/bad/no/such/dir"
check "unwritable --out: exit 2" bad_input build-srpm "not writable" --out /proc

echo "== the source rpm"
check "rpm -K: digests OK" sh -c "rpm -K '$srpm' | grep -q 'digests OK'"
check "lead says source package (type 1)" sh -c "test \"\$(od -An -tx1 -j6 -N2 '$srpm' | tr -d ' ')\" = 0001"
rpm -qpi "$srpm" >"$work/qpi.txt" 2>>"$work/log"
sed 's/^/  /' "$work/qpi.txt"
for field in "Name        : nvidia_peer_memory" "Version     : $version" "Release     : $release" \
    "Source RPM  : (none)" "Build Host  : reproducible" "Group       : System Environment/Kernel"; do
    check "rpm -qpi shows '$field'" grep -qxF "$field" "$work/qpi.txt"
done
# No home page until distros.yaml has one (docs/packaging.md, "Package
# metadata"): no URL tag, never another project's page.
check "rpm -qpi shows no URL" sh -c "! grep -q '^URL' '$work/qpi.txt'"
check "rpm -qpl lists the spec, the tarball, the kmod preamble and file list" sh -c \
    "test \"\$(rpm -qpl '$srpm' | tr '\n' ' ')\" = 'nvidia_peer_memory-$version.tar.gz nvidia_peer_memory-kmod.files nvidia_peer_memory-kmod.preamble nvidia_peer_memory.spec '"
check "the spec is flagged as the spec file" sh -c \
    "rpm -qp --qf '[%{FILEFLAGS} %{FILENAMES}\n]' '$srpm' | grep -qx '32 nvidia_peer_memory.spec'"
check "BuildRequires are the source package's requires" sh -c "rpm -qp --requires '$srpm' | grep -qx 'kernel-devel'"
mkdir -p "$work/srpm-files"
(cd "$work/srpm-files" && rpm2cpio "$srpm" | cpio -idm --quiet) 2>>"$work/log"
tar tzf "$work/srpm-files/nvidia_peer_memory-$version.tar.gz" >"$work/tarball.txt" 2>>"$work/log"
for path in dkms.conf kmod/Makefile kmod/VERSION packaging/nv_peer_mem.service packaging/nv_peer_mem.conf packaging/nv_peer_mem-service; do
    check "tarball has nvidia_peer_memory-$version/$path" grep -qx "nvidia_peer_memory-$version/$path" "$work/tarball.txt"
done
check "tarball has no kmod/tests/" sh -c "! grep -q '/kmod/tests/' '$work/tarball.txt'"
check "tarball has gpudirect-rdma-check's sources, not its tests" sh -c \
    "grep -qx 'nvidia_peer_memory-$version/readiness/src/main.rs' '$work/tarball.txt' && ! grep -q '/readiness/tests/' '$work/tarball.txt'"
rpm_ids=$(sed -n '/^distros:/,$ { /^  - id: /{ s/^  - id: //; h }; /^    family: rpm$/{ g; p } }' "$root/packaging/distros.yaml")
check "packaging/distros.yaml lists the rpm distros ($(echo $rpm_ids))" test "$(echo "$rpm_ids" | wc -w)" -ge 7
for id in $rpm_ids; do
    mkdir -p "$work/distros/$id"
    check "build-srpm --distro $id: rpm -K OK" sh -c \
        "'$xtask' build-srpm --out '$work/distros/$id' --distro $id && rpm -K '$work/distros/$id/$srpm_name' | grep -q 'digests OK'"
done

echo "== rpmbuild --rebuild per family, with the real kernel module macros"
# The macros and scripts come from $NVPM_FIXTURES (kernel-srpm-macros/,
# suse-kmp/); ci/rpm-family-env.sh lays out the kernel build trees where
# each family's macros look, in a private mount namespace.
fixtures=${NVPM_FIXTURES:-$root/../shared/fixtures}
read -r rhel_krel rhel_krel2 suse_krel <<<"$("$here/rpm-family-env.sh" releases "$kver")"
# Debian's other installed kernel of another kABI, if any: the kABI checks'
# incompatible kernel. Another release is not another kABI: bookworm's
# 6.1.0-56 and 6.1.0-57 (6.1.192-2 and -3) have one Module.symvers, and
# weak-modules rightly lets the kmod fit both; so the first whose
# Module.symvers differs.
other=$(symvers=$(readlink -f "/lib/modules/$kver/build")/Module.symvers
    for build in /lib/modules/*/build; do
        [ -f "$build/Module.symvers" ] && ! cmp -s "$build/Module.symvers" "$symvers" &&
            basename "$(dirname "$build")"
    done | head -n 1)
# The kmod route's macros: brp-kmod-set-exec-bit is not among the
# fixtures; it only marks modules executable for debuginfo extraction,
# which the spec turns off.
kmod_macros=(--load "$fixtures/kernel-srpm-macros/macros.kmp"
    --define '__brp_kmod_set_exec_bit %{nil}'
    --define "kernel_version $rhel_krel")
# The dist tag each family's build hosts define: the entry's `dist` in
# packaging/distros.yaml ("" for SUSE, which defines none).
# kabi_compatible <kmod requires> <Module.symvers>: every kernel(sym) = crc
# requirement is in the symvers with the same CRC (weak-modules' rule), and
# there is at least one.
kabi_compatible() {
    local wanted have
    wanted=$(sed -n 's/^kernel(\(.*\)) = 0x0*\([0-9a-f]*\)$/\1 \2/p' "$1" | sort)
    [ -n "$wanted" ] || return 1
    have=$(awk '{ sub(/^0x0*/, "", $1); print $2, $1 }' "$2" | sort)
    [ -z "$(comm -23 <(echo "$wanted") <(echo "$have"))" ]
}
export -f kabi_compatible
# Rebuilds compile Rust's core once per kernel configuration only.
export NVPM_RUST_CACHE=$work/rust-cache
lint_rpms=("$srpm")
if [ ! -f "$fixtures/kernel-srpm-macros/macros.kmp" ] || [ ! -f "$fixtures/suse-kmp/macros.kernel-source" ]; then
    skip "rpmbuild --rebuild per family: the kernel module macros are not in $fixtures (set NVPM_FIXTURES to the fixtures directory)"
    rpm_ids=
fi
# find-requires.ksyms runs `awk --non-decimal-data` (gawk, RHEL's awk):
# the host's gawk, else Debian's gawk package downloaded and unpacked here
# (never installed), run through a wrapper that rpm-family-env.sh mounts
# over awk inside its namespace.
if command -v gawk >/dev/null; then
    export NVPM_GAWK=$(command -v gawk)
else
    mkdir -p "$work/gawk"
    (cd "$work/gawk" && apt-get download gawk libsigsegv2 && for deb in *.deb; do dpkg-deb -x "$deb" root; done) >>"$work/log" 2>&1
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$work/gawk/root/usr/lib/$(gcc -print-multiarch)" "$work/gawk/root/usr/bin/gawk" >"$work/gawk/awk"
    chmod +x "$work/gawk/awk"
    export NVPM_GAWK=$work/gawk/awk
fi
check "gawk for the ksym scripts: $NVPM_GAWK" sh -c "'$NVPM_GAWK' --non-decimal-data 'BEGIN { exit !(0x10 == 16) }'"
. "$here/rpm-resolver.sh"
# installs_with_providers <root> <repo> <package>: dnf installs <package>,
# and -common, one MLNX_OFED and one NVIDIA provider come with it.
installs_with_providers() {
    resolver_dnf "$1" "$2" install "$3" || return 1
    resolver_installed "$1" >"$1.installed"
    grep -qx nvidia_peer_memory-common "$1.installed" &&
        grep -Eqx 'kmod-mlnx-ofa_kernel|mlnx-ofa_kernel-(kmp-default|modules|dkms)' "$1.installed" &&
        grep -Eqx 'kmod-nvidia-.*|nvidia-open-driver-.*' "$1.installed"
}
# removes_cleanly <root> <repo> <our files> <package>...: dnf removes them;
# no package of ours and none of the listed files is left.
removes_cleanly() {
    local root=$1 repo=$2 list=$3 file
    shift 3
    resolver_dnf "$root" "$repo" remove "$@" || return 1
    [ -z "$(rpm -qa --root "$root" 'nvidia_peer_memory*' 'kmod-nvidia_peer_memory*')" ] || return 1
    while read -r file; do
        if [ -e "$root$file" ] && [ ! -d "$root$file" ]; then echo "left: $file"; return 1; fi
    done <"$list"
}
providers=$work/providers
if [ -n "$rpm_ids" ]; then
    check "the providers' stand-ins build (MLNX_OFED, NVIDIA, kernel-core, tools: ci/rpm-providers.sh)" \
        "$here/rpm-family-env.sh" kmod "$work/env-providers" "$kver" -- "$here/rpm-providers.sh" "$providers" \
        "$rhel_krel" "$suse_krel" "$(readlink -f "/lib/modules/$kver/build")/Module.symvers"
fi
for id in $rpm_ids; do
    srpm_id=$work/distros/$id/$srpm_name
    spec_id=$work/distros/$id/spec
    mkdir -p "$spec_id"
    (cd "$spec_id" && rpm2cpio "$srpm_id" | cpio -idm --quiet nvidia_peer_memory.spec) 2>>"$work/log"
    if grep -q '^%kernel_module_package ' "$spec_id/nvidia_peer_memory.spec"; then
        route=kmod
        load=("${kmod_macros[@]}")
    elif grep -q '^%suse_kernel_module_package ' "$spec_id/nvidia_peer_memory.spec"; then
        route=kmp
        # The fixtures' two SUSE files come from different kernel-source
        # versions: their macros.kernel-source is an old one that passes
        # `-n <name>-kmp` to the subpackage template, while their
        # kernel-module-subpackage is a current one that appends `-kmp-<flavor>`
        # itself; together they name the package <name>-kmp-kmp-default.
        # The macros.kernel-source SLES 15 ships with that template passes
        # `-n %{-n*}%{!-n:%name}` (openSUSE/kernel-source rpm/macros.kernel-source
        # @ af4117bf, read 2026-11-23), giving <name>-kmp-default. Build with
        # the fixture's macros with that one argument as SLES 15 has it (a
        # copy under $work, never in the repository); the sed must change
        # exactly one line, or the fixture changed and this needs a look.
        sed 's/-n %{-n\*}%{!-n:%name}-kmp -v/-n %{-n*}%{!-n:%name} -v/' \
            "$fixtures/suse-kmp/macros.kernel-source" >"$work/macros.kernel-source.sles15"
        check "$id: the fixture's macros.kernel-source differs from SLES 15's in the subpackage's -n only" sh -c \
            "test \"\$(diff '$fixtures/suse-kmp/macros.kernel-source' '$work/macros.kernel-source.sles15' | grep -c '^[<>]')\" = 2"
        load=(--load "$work/macros.kernel-source.sles15")
    else
        route=dkms
        load=()
    fi
    # rhel8's rebuild also signs (--with modsign), with a throwaway key in
    # a SoftHSM token (ci/softhsm.sh): modsign_key is its pkcs11: URI,
    # whose ';' the spec's quoting must keep in one argument.
    sign=() softhsm_env=()
    if [ "$id" = rhel8 ]; then
        check "$id: a throwaway module signing key in a SoftHSM token" softhsm_key "$work/softhsm" nvpm-rpm "nv_peer_mem throwaway test key"
        sign=(--with modsign --define "modsign_key ${modsign_uri:-pkcs11:no-token}" --define "modsign_cert $work/softhsm/nvpm-rpm.pem")
    fi
    dist=$(dist_of "$id")
    check "$id: packaging/distros.yaml has its dist ('$dist')" grep -q "^    dist: " <(sed -n "/^  - id: $id\$/,/^  - id:/p" "$root/packaging/distros.yaml")
    # rpm 4.18 refuses an empty macro body; %{nil} is how a macro is
    # defined to nothing, so `%{?dist}` expands to "" as where it is unset.
    dist_body=$dist
    [ -n "$dist_body" ] || dist_body='%{nil}'
    dist_define=(--define "dist $dist_body")
    top=$work/rpmbuild-$id
    echo "-- $id (route $route, dist '${dist}')"
    start=$SECONDS
    # The first module-building family rebuilds as an admin would, with no
    # NVPM_RUST_CACHE, as root and with the DKMS core cache moved aside: it
    # must write nothing outside its build tree. The others share one core
    # cache of this test's, named in rpmbuild's environment.
    if [ "$route" != dkms ] && [ -z "${first_module_build:-}" ]; then
        first_module_build=$id
        rm -rf "$work/system-core-cache"
        [ ! -e /var/cache/nv_peer_mem ] || mv /var/cache/nv_peer_mem "$work/system-core-cache"
        cache_env=(env -u NVPM_RUST_CACHE)
    else
        cache_env=(env NVPM_RUST_CACHE="$work/core-cache")
    fi
    # --nodeps: the BuildRequires name the target family's packages, which
    # this Debian host's rpm database does not list; ci/setup-host.sh
    # installs the tools they stand for.
    check "$id: rpmbuild --rebuild with the $route macros" \
        "${cache_env[@]}" "${softhsm_env[@]}" "$here/rpm-family-env.sh" "$route" "$work/env-$id" "$kver" -- \
        rpmbuild --rebuild --nodeps --define "_topdir $top" --define "_tmppath $work/tmp" \
        "${dist_define[@]}" "${load[@]}" "${sign[@]}" --define 'ofa_kernel none' "$srpm_id"
    echo "   ($((SECONDS - start)) s)"
    if [ "${first_module_build:-}" = "$id" ]; then
        check "$id: the rebuild wrote no /var/cache/nv_peer_mem (the core stays in its build tree)" test ! -e /var/cache/nv_peer_mem
        rm -rf /var/cache/nv_peer_mem
        [ ! -e "$work/system-core-cache" ] || mv "$work/system-core-cache" /var/cache/nv_peer_mem
    fi
    common=$top/RPMS/x86_64/nvidia_peer_memory-common-$version-$release$dist.x86_64.rpm
    dkms=$top/RPMS/noarch/nvidia_peer_memory-dkms-$version-$release$dist.noarch.rpm
    suse_kver_tag=$(echo "${suse_krel%-default}" | tr - _)
    case $route in
    kmod) module=$top/RPMS/x86_64/kmod-nvidia_peer_memory-$version-$release$dist.x86_64.rpm ;;
    # SUSE's KMP name and version: <name>-kmp-<flavor>-<ver>_k<kernel>-<rel>
    # (kernel-module-subpackage), no dist.
    kmp) module=$top/RPMS/x86_64/nvidia_peer_memory-kmp-default-"$version"_k"$suse_kver_tag"-$release$dist.x86_64.rpm ;;
    dkms) module= ;;
    esac
    built=$(cd "$top/RPMS" 2>/dev/null && find . -name '*.rpm' -printf '%f\n' | sort | tr '\n' ' ')
    expected=$( (basename "$common"; basename "$dkms"; [ -z "$module" ] || basename "$module") | sort | tr '\n' ' ')
    check "$id: the binary packages are exactly: $expected" test "$built" = "$expected"
    [ -f "$common" ] && [ -f "$dkms" ] || continue
    lint_rpms+=("$srpm_id" "$common" "$dkms")

    # -common: the service, its helper, the conf, the preset; replaces 1.3.
    rpm -qpl "$common" >"$work/$id-common.txt" 2>>"$work/log"
    for path in /etc/infiniband/nv_peer_mem.conf /usr/lib/systemd/system/nv_peer_mem.service \
        /usr/libexec/nv_peer_mem/nv_peer_mem-service /usr/lib/systemd/system-preset/50-nv_peer_mem.preset \
        /usr/sbin/gpudirect-rdma-check /usr/share/man/man8/gpudirect-rdma-check.8.gz \
        /usr/lib/systemd/system/gpudirect-rdma-check.service /usr/lib/systemd/system/gpudirect-rdma-check.timer \
        /etc/sysconfig/gpudirect-rdma-check /etc/nhc/scripts/nvpm_gpudirect.nhc \
        /usr/lib/kernel/install.d/95-nv-peer-mem.install; do
        check "$id: -common has $path" grep -qxF "$path" "$work/$id-common.txt"
    done
    # The timer is off until the administrator enables it (docs/monitoring.md):
    # no preset names it; its options and the NHC check are the admin's.
    check "$id: no preset enables gpudirect-rdma-check; its options and NHC check are %config(noreplace)" sh -c \
        "! rpm2cpio '$common' | cpio -i --quiet --to-stdout ./usr/lib/systemd/system-preset/50-nv_peer_mem.preset | grep -q gpudirect &&
         rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$common' | grep -qx 'cn /etc/sysconfig/gpudirect-rdma-check' &&
         rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$common' | grep -qx 'cn /etc/nhc/scripts/nvpm_gpudirect.nhc'"
    check "$id: -common's preset enables nv_peer_mem.service" sh -c \
        "rpm2cpio '$common' | cpio -i --quiet --to-stdout ./usr/lib/systemd/system-preset/50-nv_peer_mem.preset | grep -qx 'enable nv_peer_mem.service'"
    check "$id: nv_peer_mem.conf is %config(noreplace)" sh -c \
        "rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$common' | grep -qx 'cn /etc/infiniband/nv_peer_mem.conf'"
    check "$id: -common obsoletes and provides nvidia_peer_memory (1.3's package name)" sh -c \
        "rpm -qp --obsoletes '$common' | grep -qx 'nvidia_peer_memory < $version-$release$dist' && rpm -qp --provides '$common' | grep -qx 'nvidia_peer_memory = $version-$release$dist'"
    check "$id: -common requires the module (nvidia_peer_memory-kmod)" sh -c "rpm -qp --requires '$common' | grep -qx 'nvidia_peer_memory-kmod'"
    check "$id: -common's %post presets the unit" sh -c "rpm -qp --scripts '$common' | grep -q 'preset nv_peer_mem.service'"
    # A restart on upgrade runs ExecStop, which unloads the module.
    check "$id: -common's scriptlets never restart the service" sh -c \
        "rpm -qp --scripts '$common' >'$work/$id-common-scripts.txt' && ! grep -Eq 'try-restart|mark-restart|restart nv_peer_mem' '$work/$id-common-scripts.txt'"

    # -dkms: the sources, the module's virtual name, -common for boot.
    rpm -qpl "$dkms" >"$work/$id-dkms.txt" 2>>"$work/log"
    check "$id: -dkms has /usr/src/nv_peer_mem-$version/dkms.conf and no build output" sh -c \
        "grep -qxF '/usr/src/nv_peer_mem-$version/dkms.conf' '$work/$id-dkms.txt' && ! grep -qE '\\.(o|ko|a|cmd)\$' '$work/$id-dkms.txt'"
    check "$id: -dkms's %postun removes the DKMS builds' core cache on erase only" sh -c \
        "rpm -qp --scripts '$dkms' | sed -n '/^postuninstall scriptlet/,\$p' | tr '\\n' ' ' | grep -q 'if \\[ \\\$1 -eq 0 \\]; then *rm -rf /var/cache/nv_peer_mem'"
    check "$id: -dkms provides nvidia_peer_memory-kmod and requires -common" sh -c \
        "rpm -qp --provides '$dkms' | grep -qx 'nvidia_peer_memory-kmod = $version-$release$dist' && rpm -qp --requires '$dkms' | grep -qx 'nvidia_peer_memory-common = $version'"
    check "$id: -dkms conflicts with the prebuilt module packages by name only" sh -c \
        "test \"\$(rpm -qp --conflicts '$dkms' | sort | tr '\\n' ' ')\" = 'kmod-nvidia_peer_memory nvidia_peer_memory-kmp-default '"
    if [ "$id" = sles15 ] || [ "$id" = sles16 ]; then
        # SUSE's library sources are rust1.NN-src; no package is rust-src
        # (packaging/distros.yaml, sles15's rust_toolchains).
        check "$id: -dkms requires rust at the module's minimum, and no rust-src (SUSE has none)" sh -c \
            "rpm -qp --requires '$dkms' | grep -qx 'rust >= 1.85' && ! rpm -qp --requires '$dkms' | grep -q '^rust-src'"
    else
        check "$id: -dkms requires rust and rust-src at the module's minimum" sh -c \
            "rpm -qp --requires '$dkms' | grep -qx 'rust >= 1.85' && rpm -qp --requires '$dkms' | grep -qx 'rust-src >= 1.85'"
    fi

    if [ -n "$module" ] && [ -f "$module" ]; then
        lint_rpms+=("$module")
        rpm -qp --provides "$module" >"$work/$id-provides.txt" 2>>"$work/log"
        rpm -qp --requires "$module" >"$work/$id-requires.txt" 2>>"$work/log"
        rpm -qp --scripts "$module" >"$work/$id-scripts.txt" 2>>"$work/log"
        rpm -qpl "$module" >"$work/$id-module.txt" 2>>"$work/log"
        check "$id: the module package provides nvidia_peer_memory-kmod, requires -common from $version below the next major, conflicts -dkms" sh -c \
            "grep -qx 'nvidia_peer_memory-kmod = $version-$release$dist' '$work/$id-provides.txt' && grep -qx 'nvidia_peer_memory-common >= $version' '$work/$id-requires.txt' && grep -qx 'nvidia_peer_memory-common < $((${version%%.*} + 1))' '$work/$id-requires.txt' && rpm -qp --conflicts '$module' | grep -qx nvidia_peer_memory-dkms"
        if [ $route = kmod ]; then
            ko=/lib/modules/$rhel_krel/extra/nvidia_peer_memory/nv_peer_mem.ko.xz
            check "$id: kmod has $ko (xz, as RHEL compresses)" grep -qxF "$ko" "$work/$id-module.txt"
            check "$id: kmod requires kernel(<symbol>) = <CRC> (kABI, from Module.symvers), not one kernel" sh -c \
                "grep -qE '^kernel\\([a-z_0-9]+\\) = 0x[0-9a-f]{8}\$' '$work/$id-requires.txt' && ! grep -q '^kernel-uname-r' '$work/$id-requires.txt'"
            check "$id: kmod provides kmod(nv_peer_mem.ko) and kernel-modules >= $rhel_krel" sh -c \
                "grep -qx 'kmod(nv_peer_mem.ko)' '$work/$id-provides.txt' && grep -qx 'kernel-modules >= $rhel_krel' '$work/$id-provides.txt'"
            check "$id: kmod's %post/%postun run depmod and weak-modules --add/--remove-modules" sh -c \
                "grep -q 'depmod -aeF' '$work/$id-scripts.txt' && grep -q 'weak-modules --add-modules' '$work/$id-scripts.txt' && grep -q 'weak-modules --remove-modules' '$work/$id-scripts.txt'"
            # The Requires the macros generated, against the rule weak-modules
            # applies (every kernel(<symbol>) = <crc> in the kernel's
            # Module.symvers with that CRC): the second RHEL-style kernel
            # (same headers, another release) must qualify; Debian's other
            # installed kernel (another kABI) must not. The link itself is
            # made by the kmod's own %post below ("kABI tracking").
            check "$id: kABI rule: the kmod fits the second kernel $rhel_krel2 (same Module.symvers)" \
                kabi_compatible "$work/$id-requires.txt" "$(readlink -f "/lib/modules/$kver/build")/Module.symvers"
            if [ -n "$other" ]; then
                check "$id: kABI rule: the kmod does not fit $other (another kABI)" bash -c \
                    "! kabi_compatible '$work/$id-requires.txt' '$(readlink -f "/lib/modules/$other/build")/Module.symvers'"
            else
                skip "$id: kABI rule against another kABI: no installed kernel headers have a Module.symvers other than $kver's (ci/setup-host.sh installs bookworm-backports' linux-headers-amd64)"
            fi
        else
            # SLES 15 compresses its modules with xz, SLES 16 with zstd
            # (packaging/distros.yaml, rpm.compression, with the source).
            compression=$(sed -n "/^  - id: $id\$/,/^  - id:/s/^      compression: //p" "$root/packaging/distros.yaml")
            case $compression in xz) suffix=.xz ;; zstd) suffix=.zst ;; *) suffix=none ;; esac
            ko=/lib/modules/$suse_krel/updates/nv_peer_mem.ko$suffix
            check "$id: KMP has $ko ($compression, as packaging/distros.yaml says the distro compresses)" grep -qxF "$ko" "$work/$id-module.txt"
            check "$id: KMP provides multiversion(kernel) and its name with the kernel" sh -c \
                "grep -qx 'multiversion(kernel)' '$work/$id-provides.txt' && grep -qx -- 'nvidia_peer_memory-kmp-default-k$suse_kver_tag' '$work/$id-provides.txt'"
            check "$id: KMP scriptlets are SUSE's kmp-post/kmp-preun/kmp-postun" sh -c \
                "grep -q 'kernel-scriptlets/kmp-post ' '$work/$id-scripts.txt' && grep -q 'kernel-scriptlets/kmp-preun ' '$work/$id-scripts.txt' && grep -q 'kernel-scriptlets/kmp-postun ' '$work/$id-scripts.txt'"
        fi
        mkdir -p "$work/$id-module-root"
        (cd "$work/$id-module-root" && rpm2cpio "$module" | cpio -idm --quiet) 2>>"$work/log"
        module_krel=$(echo "$ko" | cut -d/ -f4)
        case $ko in
        *.zst)
            check "$id: the module is a zstd frame, modinfo names nv_peer_mem, vermagic $module_krel" sh -c \
                "zstd -t -q '$work/$id-module-root$ko' && zstd -dc '$work/$id-module-root$ko' >'$work/$id-module.ko' && modinfo -F name '$work/$id-module.ko' | grep -qx nv_peer_mem && modinfo -F vermagic '$work/$id-module.ko' | grep -q '^$module_krel '" ;;
        *)
            check "$id: the module is xz with CRC32, modinfo names nv_peer_mem, vermagic $module_krel" sh -c \
                "xz -lvv '$work/$id-module-root$ko' | grep -q CRC32 && modinfo -F name '$work/$id-module-root$ko' | grep -qx nv_peer_mem && modinfo -F vermagic '$work/$id-module-root$ko' | grep -q '^$module_krel '" ;;
        esac
        if [ ${#sign[@]} -gt 0 ]; then
            # The kernel checks a PKCS#7 signature appended before the magic
            # string; modinfo reads the signer from it.
            check "$id --with modsign: modinfo shows signer 'nv_peer_mem throwaway test key', PKCS#7, sha256" sh -c \
                "modinfo -F signer '$work/$id-module-root$ko' | grep -qx 'nv_peer_mem throwaway test key' && modinfo -F sig_id '$work/$id-module-root$ko' | grep -qx PKCS#7 && modinfo -F sig_hashalgo '$work/$id-module-root$ko' | grep -qx sha256"
            check "$id --with modsign: the decompressed module ends with the kernel's signature magic" sh -c \
                "xz -dc '$work/$id-module-root$ko' | tail -c 28 | grep -aq '~Module signature appended~'"
        else
            # modinfo reads xz itself; a zstd module is read decompressed.
            modfile=$work/$id-module-root$ko
            case $ko in *.zst) modfile=$work/$id-module.ko ;; esac
            check "$id: without --with modsign the module is unsigned" sh -c "test -f '$modfile' && modinfo -F name '$modfile' >/dev/null && test -z \"\$(modinfo -F signer '$modfile')\""
        fi
    fi

    # The relations, with a real resolver: -common, -dkms and the module
    # package in a repository with the providers' stand-ins
    # (ci/rpm-providers.sh); dnf installs the module package (-dkms where
    # there is none) into a scratch root and must pull in -common, one
    # MLNX_OFED and one NVIDIA provider; `dnf remove` then leaves none of
    # our files.
    ours=("$common" "$dkms")
    [ -z "$module" ] || ours+=("$module")
    target=$(rpm -qp --qf '%{NAME}' "${ours[-1]}" 2>/dev/null)
    sroot=$work/root-$id
    rm -rf "$sroot"
    resolver_repo "$work/repo-$id" "${ours[@]}" "$providers"/rpms/*.rpm >>"$work/log" 2>&1
    check "$id: dnf install $target resolves: -common, an MLNX_OFED and an NVIDIA provider come with it" \
        installs_with_providers "$sroot" "$work/repo-$id" "$target"
    rpm -qpl "${ours[@]}" 2>/dev/null | grep -v '^(contains no files)$' >"$work/$id-our-files.txt"
    check "$id: dnf remove $target nvidia_peer_memory-common leaves none of our files" \
        removes_cleanly "$sroot" "$work/repo-$id" "$work/$id-our-files.txt" "$target" nvidia_peer_memory-common
    if [ "$id" = rhel9 ]; then dkms_rpm=$dkms rhel9_common=$common rhel9_module=$module; fi
done

echo "== build inputs are named, not searched for (rhel9's source rpm)"
# fails_without_ofa <topdir>: rhel9's rebuild with no ofa_kernel fails,
# naming the package and the path it looked at, and writes no rpm.
fails_without_ofa() {
    ! "$here/rpm-family-env.sh" kmod "$work/env-rhel9-no-ofa" "$kver" -- \
        rpmbuild --rebuild --nodeps --define "_topdir $1" --define "_tmppath $work/tmp" \
        --define "dist $(dist_of rhel9)" "${kmod_macros[@]}" "$work/distros/rhel9/$srpm_name" >"$work/no-ofa.txt" 2>&1 || return 1
    grep -A2 '^error: no MLNX_OFED' "$work/no-ofa.txt"
    grep -q 'Install mlnx-ofa_kernel-devel for that kernel' "$work/no-ofa.txt" &&
        grep -qF "/usr/src/ofa_kernel/$(uname -m)/$rhel_krel" "$work/no-ofa.txt" &&
        [ -z "$(find "$1/RPMS" -name '*.rpm' 2>/dev/null)" ]
}
# Without --define 'ofa_kernel ...' the kmod builds against the tree
# mlnx-ofa_kernel-devel installs for the kernel; where there is none, the
# build stops at %build naming the fix, and no package is written.
if [ -z "$rpm_ids" ]; then
    skip "build inputs: no rpmbuild ran (see above)"
else
    top=$work/rpmbuild-rhel9-no-ofa
    rm -rf "$top"
    check "rhel9: the source rpm BuildRequires mlnx-ofa_kernel-devel" sh -c \
        "rpm -qp --requires '$work/distros/rhel9/$srpm_name' | grep -qx mlnx-ofa_kernel-devel"
    # --nodeps: BuildRequires of another family, as above.
    check "rhel9: with no MLNX_OFED tree for $rhel_krel and no ofa_kernel, rpmbuild fails naming mlnx-ofa_kernel-devel; no rpm written" \
        fails_without_ofa "$top"
fi

echo "== a build host without the kernel module macros"
# rpmbuild would stop at "Unknown tag: %kernel_module_package"; the spec
# names the package that defines the macro, and the DKMS alternative.
# (This Debian host has neither macro file unless rpm-family-env.sh adds it.)
# no_macros_names <distro id> <package named>
no_macros_names() {
    ! rpmbuild --rebuild --nodeps --define "_topdir $work/no-macros-$1" --define "_tmppath $work/tmp" \
        "$work/distros/$1/$srpm_name" >"$work/no-macros-$1.txt" 2>&1 || return 1
    grep '^error: %' "$work/no-macros-$1.txt"
    grep -q "^error: %.*kernel_module_package is not defined: install .*$2.*cargo xtask build-dkms --distro $1" "$work/no-macros-$1.txt" &&
        ! grep -q 'Unknown tag' "$work/no-macros-$1.txt"
}
check "rhel9 without kernel-rpm-macros: rpmbuild stops naming kernel-rpm-macros and build-dkms" no_macros_names rhel9 kernel-rpm-macros
check "sles15 without SUSE's kernel macros: rpmbuild stops naming kernel-syms and build-dkms" no_macros_names sles15 kernel-syms
check "sles16 without SUSE's kernel macros: rpmbuild stops naming kernel-macros and build-dkms" no_macros_names sles16 kernel-macros

echo "== relations a real resolver accepts (rhel9's packages, dnf: ci/rpm-resolver.sh)"
# refuses_without <label> <providers to leave out (ERE on file names)> <text dnf must print>:
# with those providers missing from the repository, dnf refuses the kmod,
# says what is missing, and installs nothing.
refuses_without() {
    local root=$work/root-without-$1 repo=$work/repo-without-$1
    rm -rf "$root"
    resolver_repo "$repo" "$rhel9_common" "$rhel9_module" \
        $(ls "$providers"/rpms/*.rpm | grep -Ev "/($2)[^/]*\.rpm\$") || return 1
    ! resolver_dnf "$root" "$repo" install kmod-nvidia_peer_memory &&
        grep -q -- "$3" "$root.log" && [ -z "$(resolver_installed "$root")" ]
}
# beside_dkms_providers: MLNX_OFED's and NVIDIA's DKMS packages installed
# first; the kmod installs beside them and brings no other provider.
beside_dkms_providers() {
    local root=$work/root-beside-dkms
    rm -rf "$root"
    resolver_dnf "$root" "$work/repo-rhel9" install mlnx-ofa_kernel-dkms kmod-nvidia-open-dkms &&
        resolver_dnf "$root" "$work/repo-rhel9" install kmod-nvidia_peer_memory || return 1
    resolver_installed "$root" >"$root.installed"
    cat "$root.installed"
    grep -qx kmod-nvidia_peer_memory "$root.installed" &&
        [ "$(grep -Ec '^(kmod-mlnx-ofa_kernel|mlnx-ofa_kernel-(kmp-default|modules|dkms))$' "$root.installed")" = 1 ] &&
        [ "$(grep -Ec '^(kmod-nvidia-.*|nvidia-open-driver-.*)$' "$root.installed")" = 1 ]
}
# swaps <from> <to>: in the root of beside_dkms_providers, `dnf install <to>`
# is refused while <from> is installed (Conflicts); with --allowerasing it
# replaces <from>, and -common stays.
swaps() {
    local root=$work/root-beside-dkms
    ! resolver_dnf "$root" "$work/repo-rhel9" install "$2" && rpm -q --root "$root" "$1" &&
        resolver_dnf "$root" "$work/repo-rhel9" install --allowerasing "$2" &&
        rpm -q --root "$root" "$2" nvidia_peer_memory-common && ! rpm -q --root "$root" "$1"
}
if [ -z "$rpm_ids" ]; then
    skip "relations: no rpmbuild ran (see above)"
elif [ -z "${rhel9_module:-}" ] || [ ! -f "$rhel9_module" ] || [ ! -d "$providers/rpms" ]; then
    fail "relations: rhel9's kmod or the providers' stand-ins were not built (see above)"
else
    rpm -qp --requires "$rhel9_module" >"$work/rhel9-kmod-requires.txt" 2>>"$work/log"
    check "rhel9's kmod requires MLNX_OFED and the NVIDIA driver by package relation" sh -c \
        "grep -qxF '(kmod-mlnx-ofa_kernel or mlnx-ofa_kernel-modules)' '$work/rhel9-kmod-requires.txt' && grep -qxF '(nvidia-kmod or kmod(nvidia.ko))' '$work/rhel9-kmod-requires.txt'"
    check "without MLNX_OFED's packages dnf refuses the kmod, naming them; nothing is installed" \
        refuses_without mofed 'kmod-mlnx-ofa_kernel|mlnx-ofa_kernel-' 'nothing provides (kmod-mlnx-ofa_kernel or mlnx-ofa_kernel-modules)'
    check "without the NVIDIA driver's packages dnf refuses the kmod, naming nvidia-kmod; nothing is installed" \
        refuses_without nvidia 'kmod-nvidia-|nvidia-open-driver-' 'nothing provides (nvidia-kmod or kmod(nvidia.ko))'
    check "beside mlnx-ofa_kernel-dkms and kmod-nvidia-open-dkms the kmod installs, with no other MLNX_OFED or NVIDIA package" \
        beside_dkms_providers
    check "kmod -> -dkms: refused while the kmod is installed (Conflicts); dnf --allowerasing swaps them, -common stays" \
        swaps kmod-nvidia_peer_memory nvidia_peer_memory-dkms
    check "-dkms -> kmod: the same the other way" swaps nvidia_peer_memory-dkms kmod-nvidia_peer_memory
fi

echo "== upgrade from Mellanox's nvidia_peer_memory 1.3 rpm (rhel9's packages)"
# 1.3's binary rpm, built from the fixture tarball with its own spec for
# this kernel (ci/mellanox13-rpm.sh: MLNX_OFED and NVIDIA stand-ins with the
# real symbol names), installed into a scratch root, its conf edited by the
# administrator, then `rpm -U` of rhel9's -common and kmod. Without
# scriptlets (1.3's run depmod, modprobe, perl and chkconfig, ours
# systemctl and weak-modules: none exist in the scratch root); what rpm
# itself does on the upgrade is what is checked: Obsoletes, file removal,
# %config(noreplace).
fixture13=$fixtures/nv_peer_memory-1.3.tar.gz
if [ ! -f "$fixture13" ]; then
    skip "upgrade from 1.3: no fixture at $fixture13 (set NVPM_FIXTURES)"
elif [ -z "${rhel9_common:-}" ] || [ ! -f "${rhel9_module:-}" ]; then
    fail "upgrade from 1.3: rhel9's -common and kmod were not built (see above)"
else
    start=$SECONDS
    rpm13=$("$here/mellanox13-rpm.sh" "$fixture13" "$kver" "$work/mellanox13" 2>>"$work/log")
    check "Mellanox 1.3's binary rpm builds from the fixture with its own spec ($(basename "${rpm13:-none}"))" \
        test -f "${rpm13:-/nonexistent}"
    echo "   ($((SECONDS - start)) s)"
    sroot=$work/root-upgrade13
    rm -rf "$sroot"
    conf=$sroot/etc/infiniband/nv_peer_mem.conf
    # With dnf from one repository: 1.3, rhel9's packages, the providers'
    # stand-ins (1.3 itself needs only /bin/sh and /bin/bash).
    resolver_repo "$work/repo-upgrade13" "$rpm13" "$rhel9_common" "$rhel9_module" "$providers"/rpms/*.rpm >>"$work/log" 2>&1
    check "dnf install 1.3 into a scratch root: its init script, conf and module in place" sh -c \
        "$(declare -f resolver_dnf); resolver_dnf '$sroot' '$work/repo-upgrade13' install nvidia_peer_memory-1.3 && test -f '$sroot/etc/init.d/nv_peer_mem' -a -f '$conf' -a -f '$sroot/lib/modules/$kver/extra/nv_peer_mem.ko'"
    # The administrator's settings, which the upgrade must keep.
    sed -i 's/^ONBOOT=.*/ONBOOT=no/' "$conf" 2>>"$work/log" && echo '# site setting' >>"$conf"
    check "dnf install rhel9's -common and kmod over 1.3 (an upgrade through Obsoletes)" \
        resolver_dnf "$sroot" "$work/repo-upgrade13" install nvidia_peer_memory-common kmod-nvidia_peer_memory
    check "1.3's nvidia_peer_memory is gone (Obsoletes); -common and kmod are installed" sh -c \
        "! rpm -q --root '$sroot' --qf '%{VERSION}\n' nvidia_peer_memory | grep -qx 1.3 && rpm -q --root '$sroot' nvidia_peer_memory-common kmod-nvidia_peer_memory"
    check "1.3's /etc/init.d/nv_peer_mem and its module are gone" sh -c \
        "test ! -e '$sroot/etc/init.d/nv_peer_mem' -a ! -e '$sroot/lib/modules/$kver/extra/nv_peer_mem.ko'"
    check "the administrator's nv_peer_mem.conf is kept (ONBOOT=no, the added line)" sh -c \
        "grep -qx 'ONBOOT=no' '$conf' && grep -qx '# site setting' '$conf'"
    # 1.3 shipped the conf as a plain file, ours is %config(noreplace): rpm
    # leaves the modified file and writes the new default beside it.
    check "ours is beside it as nv_peer_mem.conf.rpmnew (%config(noreplace)), not .rpmsave" sh -c \
        "grep -q '^ONBOOT=yes' '$conf.rpmnew' && test ! -e '$conf.rpmsave'"
fi

# -common's kernel hook, which the module packages' scriptlets ask.
hook_path=/usr/lib/kernel/install.d/95-nv-peer-mem.install
echo "== kABI tracking: rhel9's kmod linked into a second compatible kernel by weak-modules"
# A RHEL host in a scratch root: the kernel the kmod was built for ($rhel_krel),
# a second one with the same kABI ($rhel_krel2, Debian's same headers) and
# one with another kABI (Debian's other kernel, RHEL-style name), each with
# /boot/symvers-<k>.gz and the MLNX_OFED and NVIDIA stand-ins of the 1.3
# test in extra/ (the kmods an admin has for each kernel). The kmod is
# installed with `rpm -i` and its own %post and %postun run, with /lib/modules,
# /boot, /run and rpm's database bound to the scratch host, /bin/sh as bash
# and ci/weak-modules-standin.sh as /usr/sbin/weak-modules (its fidelity is
# in its header), in a private mount namespace: nothing outside $work changes.
# Two kmods: one built as on a RHEL build host with MLNX_OFED's and NVIDIA's
# Module.symvers (OFA_KERNEL, NV_SYMVERS: the stand-ins'), so the module
# records their symbols' CRCs; and rhel9's from above, built without them.
standins=$work/mellanox13/standin
# scratch_host <dir>: a fresh scratch RHEL host with the three kernels.
scratch_host() {
    local host=$1 k krel debian
    rm -rf "$host"
    mkdir -p "$host/boot" "$host/run" "$host/sbin/upper" "$host/sbin/work" "$host/rpmdb"
    for k in "$rhel_krel:$kver" "$rhel_krel2:$kver" "$other_krel:$other"; do
        krel=${k%%:*} debian=${k#*:}
        mkdir -p "$host/root/lib/modules/$krel/extra/standins"
        cp "$standins/nvidia.ko" "$standins/ib_core_standin.ko" "$host/root/lib/modules/$krel/extra/standins/"
        gzip -9n <"$(readlink -f "/lib/modules/$debian/build")/Module.symvers" >"$host/boot/symvers-$krel.gz"
    done
    install -m 755 "$here/weak-modules-standin.sh" "$host/sbin/upper/weak-modules"
}
# on_host <dir> <command>...: runs the command on scratch host <dir>.
on_host() {
    unshare --mount --propagation private -- bash -c '
        set -e; h=$1; shift
        mount --bind "$h/root/lib/modules" /lib/modules
        mount --bind "$h/boot" /boot
        mount --bind "$h/run" /run
        mount --bind "$h/rpmdb" "$(rpm --eval "%{_dbpath}")"
        mount -t overlay overlay -o "lowerdir=/usr/sbin,upperdir=$h/sbin/upper,workdir=$h/sbin/work" /usr/sbin
        mount --bind /bin/bash "$(readlink -f /bin/sh)"
        exec "$@"' on-host "$@"
}
# install_on <dir> <rpm>: rpm -i with its scriptlets; their output (the
# stand-in's decisions) in <dir>/post.txt. --nodeps: the scratch host's rpm
# database is empty (its kernels and stand-ins are files, not packages);
# what is tested here is the scriptlets, the relations are tested with dnf
# above.
install_on() {
    local rc=0
    on_host "$1" rpm -i --nodeps "$2" >"$1/post.txt" 2>&1 || rc=$?
    cat "$1/post.txt"
    return $rc
}
if [ ! -f "$fixtures/kernel-srpm-macros/macros.kmp" ] || [ ! -f "$fixture13" ]; then
    skip "kABI tracking: needs kernel-srpm-macros/ and nv_peer_memory-1.3.tar.gz (its stand-ins) in $fixtures (set NVPM_FIXTURES)"
elif [ -z "${rhel9_module:-}" ] || [ ! -f "$rhel9_module" ] || [ ! -f "$standins/nvidia.ko" ]; then
    fail "kABI tracking: rhel9's kmod or the 1.3 test's stand-ins were not built (see above)"
elif [ -z "$other" ]; then
    fail "kABI tracking: a second Debian kernel's headers are needed for the incompatible kernel (bash ci/setup-host.sh installs them)"
else
    # RHEL-style name for Debian's other kernel (its own version, release 1).
    other_krel=$(make -s -C "/lib/modules/$other/build" kernelversion)-1.el.$(uname -m)
    # rpm's default database must exist to be mounted over (Debian's rpm
    # makes it on first use anyway).
    mkdir -p "$(rpm --eval '%{_dbpath}')"
    top=$work/rpmbuild-rhel9-symvers
    # The NVIDIA stand-in's exports only (the 1.3 test's ofa/ has ib_core's).
    grep -P '\tnvidia_p2p_' "$standins/Module.symvers" >"$work/nvidia.symvers"
    # --nodeps: as for the rebuilds above (BuildRequires of another family).
    check "rhel9's kmod rebuilt with MLNX_OFED's and NVIDIA's Module.symvers (OFA_KERNEL, NV_SYMVERS)" \
        "$here/rpm-family-env.sh" kmod "$work/env-rhel9" "$kver" -- \
        rpmbuild --rebuild --nodeps --define "_topdir $top" --define "_tmppath $work/tmp" \
        --define "dist $(dist_of rhel9)" "${kmod_macros[@]}" \
        --define "ofa_kernel $work/mellanox13/ofa" --define "nvidia_symvers $work/nvidia.symvers" \
        "$work/distros/rhel9/$srpm_name"
    symvers_module=$top/RPMS/x86_64/$(basename "$rhel9_module")
    # Its MLNX_OFED and NVIDIA symbols now carry CRCs, which the ksym
    # generator would turn into ksym() requirements no package provides.
    rpm -qp --requires "$symvers_module" >"$work/symvers-requires.txt" 2>>"$work/log"
    check "that kmod requires kernel(<symbol>) = <CRC> and no ksym(): MLNX_OFED's and NVIDIA's are package relations" sh -c \
        "grep -q '^kernel(' '$work/symvers-requires.txt' && ! grep '^ksym(' '$work/symvers-requires.txt'"
    rm -rf "$work/root-symvers"
    resolver_repo "$work/repo-symvers" "$symvers_module" "$rhel9_common" "$providers"/rpms/*.rpm >>"$work/log" 2>&1
    check "dnf installs it with the providers: kernel-core's symvers meets its kABI requirements" \
        installs_with_providers "$work/root-symvers" "$work/repo-symvers" kmod-nvidia_peer_memory
    weak=nvidia_peer_memory/nv_peer_mem.ko.xz
    installed=/lib/modules/$rhel_krel/extra/$weak
    host=$work/weak-host
    scratch_host "$host"
    check "rpm -i of that kmod on a scratch RHEL host: its %post runs" install_on "$host" "$symvers_module"
    check "weak-modules linked it for $rhel_krel2: weak-updates/$weak -> $installed" \
        test "$(readlink "$host/root/lib/modules/$rhel_krel2/weak-updates/$weak" 2>/dev/null)" = "$installed"
    check "modprobe on $rhel_krel2 resolves nv_peer_mem to the weak-updates link, after the stand-ins" sh -c \
        "modprobe -d '$host/root' -S '$rhel_krel2' --show-depends nv_peer_mem >'$work/weak-depends.txt' 2>&1; cat '$work/weak-depends.txt'; tail -n 1 '$work/weak-depends.txt' | grep -q 'weak-updates/$weak' && grep -q ib_core_standin '$work/weak-depends.txt' && grep -q 'standins/nvidia.ko' '$work/weak-depends.txt'"
    # -common's trigger on the kmod: the kernel hook (a stand-in recording
    # its calls) is asked about each kernel where modprobe now finds the
    # module (the one it was built for and the weak-modules link), not the
    # other kABI's.
    trigger_asks_hook() {
        local calls=$host/hook-calls
        rpm -qp --triggers "$rhel9_common" 2>/dev/null | sed '1d' >"$host/trigger.sh"
        grep -qF "$hook_path module" "$host/trigger.sh" || { cat "$host/trigger.sh"; return 1; }
        printf '#!/bin/sh\necho "$*" >>"%s"\n' "$calls" >"$host/hook"
        chmod +x "$host/hook"
        sed -i "s|$hook_path|$host/hook|" "$host/trigger.sh"
        # kmodtool's %post runs depmod for the kmod's own kernel only where
        # /boot/System.map-<kernel> exists, as on every RHEL host; the
        # scratch host has none, so run it as that %post would have.
        on_host "$host" depmod -a "$rhel_krel" || return 1
        : >"$calls"
        on_host "$host" sh "$host/trigger.sh" || return 1
        cat "$calls"
        grep -qx "module $rhel_krel" "$calls" && grep -qx "module $rhel_krel2" "$calls" &&
            ! grep -q "$other_krel" "$calls"
    }
    check "-common's trigger on kmod-nvidia_peer_memory asks the kernel hook about $rhel_krel and $rhel_krel2 (weak link), not $other_krel" trigger_asks_hook
    check "weak-modules did not link it for $other_krel (another kABI): depmod names a version disagreement" sh -c \
        "test ! -e '$host/root/lib/modules/$other_krel/weak-updates/nvidia_peer_memory' && grep -q 'not compatible with $other_krel: disagrees about version of symbol' '$host/post.txt'"
    # --nodeps: as for install_on.
    check "rpm -e of the kmod on the scratch RHEL host: its %preun and %postun run" \
        on_host "$host" rpm -e --nodeps kmod-nvidia_peer_memory
    # (/run/mount is util-linux's, from the namespace's mounts.)
    check "after rpm -e: no weak-updates link, no module, %preun's list gone from /run" sh -c \
        "test -z \"\$(find '$host/root/lib/modules' -path '*nvidia_peer_memory*')\" && test -z \"\$(find '$host/run' -name 'rpm-kmod-*')\""
    # Built without the providers' CRCs, the module needs nvidia_p2p_* at
    # version 0, which depmod's check refuses against a driver that exports
    # them with CRCs: weak-modules would not carry this kmod to the next
    # kernel (docs/packaging.md "kABI tracking on RHEL").
    host=$work/weak-host-nocrc
    scratch_host "$host"
    install_on "$host" "$rhel9_module" >>"$work/log" 2>&1 || fail "rpm -i of rhel9's kmod (no providers' CRCs) on a scratch RHEL host"
    check "a kmod built without the providers' Module.symvers is not linked for $rhel_krel2: depmod's disagreement is on nvidia_p2p_* or ib_*" sh -c \
        "test ! -e '$host/root/lib/modules/$rhel_krel2/weak-updates/$weak' && grep -qE 'not compatible with $rhel_krel2: disagrees about version of symbol (nvidia_p2p_|ib_)' '$host/post.txt'"
    # A kernel update with the NVIDIA driver from DKMS: when weak-modules
    # decides for the new kernel (the kernel's %posttrans, --add-kernel),
    # DKMS has not built nvidia for it yet, so nv_peer_mem's nvidia_p2p_*
    # are unknown there and it is not linked; nothing runs weak-modules for
    # it again once DKMS has built nvidia. Here: $rhel_krel2 without the
    # NVIDIA stand-in when the kmod's weak-modules runs, then the stand-in
    # placed as DKMS would, then the command docs/packaging.md gives
    # ("A kernel update with a DKMS-built NVIDIA driver").
    host=$work/weak-host-dkms-nvidia
    scratch_host "$host"
    rm -f "$host/root/lib/modules/$rhel_krel2/extra/standins/nvidia.ko"
    install_on "$host" "$symvers_module" >>"$work/log" 2>&1 || fail "rpm -i of the kmod on a scratch RHEL host without nvidia for $rhel_krel2"
    check "before DKMS builds nvidia for $rhel_krel2, weak-modules does not link the kmod there: nvidia_p2p_* unknown" sh -c \
        "test ! -e '$host/root/lib/modules/$rhel_krel2/weak-updates/$weak' && grep -q 'not compatible with $rhel_krel2: needs unknown symbol nvidia_p2p_' '$host/post.txt'"
    cp "$standins/nvidia.ko" "$host/root/lib/modules/$rhel_krel2/extra/standins/nvidia.ko"
    on_host "$host" depmod -a "$rhel_krel2" >>"$work/log" 2>&1
    relink() {
        on_host "$host" bash -c "rpm -ql kmod-nvidia_peer_memory | grep '\\.ko' | weak-modules --add-modules" &&
            test "$(readlink "$host/root/lib/modules/$rhel_krel2/weak-updates/$weak")" = "$installed"
    }
    check "once nvidia is built: rpm -ql kmod-nvidia_peer_memory | grep '\\.ko' | weak-modules --add-modules links it" relink

    # dnf's kernel guard (issue 40 item 6; docs/fleet.md, "The dnf
    # guard"): the plugin as -common installed it in root-symvers, run by
    # real dnf (dnf 4, as on RHEL 8-10) over kernel-core stand-ins of two
    # more kernels (ci/rpm-providers.sh, kabi.sh's kernel(<symbol>)
    # provides): $rhel_krel2 of the same kABI and $other_krel of another
    # (the other Debian kernel's Module.symvers).
    plugin=$(rpm -ql --root "$work/root-symvers" nvidia_peer_memory-common 2>/dev/null | grep '/dnf-plugins/nv_peer_mem\.py$')
    check "rhel9's -common installs the dnf guard in dnf 4's plugin directory of RHEL 9 ($plugin)" \
        test "$plugin" = /usr/lib/python3.9/site-packages/dnf-plugins/nv_peer_mem.py -a -f "$work/root-symvers$plugin"
    for pair in "compat $rhel_krel2 $(readlink -f "/lib/modules/$kver/build")/Module.symvers" \
        "other $other_krel $(readlink -f "/lib/modules/$other/build")/Module.symvers"; do
        read -r name krel symvers <<<"$pair"
        "$here/rpm-family-env.sh" kmod "$work/env-kernel-$name" "$kver" -- \
            "$here/rpm-providers.sh" "$work/kernel-$name" "$krel" "$suse_krel" "$symvers" >>"$work/log" 2>&1 ||
            fail "the kernel-core stand-in for $krel (ci/rpm-providers.sh)"
    done
    # A kmod for $other_krel arriving with it: a stand-in of a newer
    # version whose kernel(<symbol>) requirements are the installed kmod's
    # symbols at $other_krel's CRCs (the plugin reads only those), and
    # which provides what -common requires of a kmod, as the real one does
    # (nvidia_peer_memory-kmod).
    rpm -qp --provides "$work"/kernel-other/rpms/kernel-core-*.rpm 2>/dev/null | grep '^kernel(' | sort >"$work/other-provides.txt"
    sed -n 's/^\(kernel([^)]*)\) = .*/\1/p' "$work/symvers-requires.txt" | while read -r sym; do
        grep -F "$sym = " "$work/other-provides.txt"
    done | sed 's/^/Requires: /' >"$work/other-kmod-requires.txt"
    mkdir -p "$work/kmod-other/SPECS"
    printf 'Name: kmod-nvidia_peer_memory\nVersion: 9.9\nRelease: 1\nSummary: stand-in: the kmod built for %s\nLicense: GPL-2.0-only\nProvides: nvidia_peer_memory-kmod = 9.9-1\n%s\n%%description\nstand-in\n%%files\n' \
        "$other_krel" "$(cat "$work/other-kmod-requires.txt")" >"$work/kmod-other/SPECS/kmod.spec"
    rpmbuild -bb --quiet --define "_topdir $work/kmod-other" "$work/kmod-other/SPECS/kmod.spec" >>"$work/log" 2>&1 ||
        fail "the stand-in kmod for $other_krel"
    resolver_repo "$work/repo-guard" "$symvers_module" "$rhel9_common" "$providers"/rpms/*.rpm \
        "$work"/kernel-compat/rpms/kernel-core-*.rpm "$work"/kernel-other/rpms/kernel-core-*.rpm \
        "$work"/kmod-other/RPMS/*/kmod-nvidia_peer_memory-9.9-1.*.rpm >>"$work/log" 2>&1
    other_nvr=kernel-core-${other_krel%.*}
    # `dnf upgrade` as a node runs it: a repository that has the new kernel
    # but no kmod for it yet.
    resolver_repo "$work/repo-guard-nokmod" "$symvers_module" "$rhel9_common" "$providers"/rpms/*.rpm \
        "$work"/kernel-other/rpms/kernel-core-*.rpm >>"$work/log" 2>&1
    # guard_dnf <name> <repo> <dnf args>...: dnf in a copy of root-symvers,
    # the guard on its plugin path; its log in $work/root-guard-<name>.log
    guard_dnf() {
        local name=$1 repo=$2
        shift 2
        rm -rf "$work/root-guard-$name"
        cp -a "$work/root-symvers" "$work/root-guard-$name"
        resolver_dnf "$work/root-guard-$name" "$repo" \
            --setopt=pluginpath="$work/root-symvers${plugin%/*}" "$@"
    }
    # dnf_guard_refuses <name> <repo> <dnf args>...: dnf fails with the guard's
    # message about $other_nvr, which is not installed
    dnf_guard_refuses() {
        local log=$work/root-guard-$1.log root=$work/root-guard-$1
        ! guard_dnf "$@" &&
            grep -qF "nv_peer_mem: dnf would install $other_nvr" "$log" &&
            grep -qF "no kmod-nvidia_peer_memory fits it" "$log" &&
            grep -qF "Nothing was changed" "$log" &&
            ! rpm -q --root "$root" "$other_nvr" >/dev/null
    }
    # guard_installs <name> <dnf option or ""> <package>...: dnf installs
    # the packages from repo-guard, and they are there
    guard_installs() {
        local name=$1 option=$2
        shift 2
        guard_dnf "$name" "$work/repo-guard" $option install "$@" &&
            rpm -q --root "$work/root-guard-$name" "$@"
    }
    check "dnf install $other_nvr (another kABI) with the guard: refused before anything changes, naming the kernel and the kmod build that fixes it" \
        dnf_guard_refuses other "$work/repo-guard" install "$other_nvr"
    check "dnf upgrade with the new kernel published and its kmod not: refused, naming the kernel" \
        dnf_guard_refuses upgrade "$work/repo-guard-nokmod" upgrade
    check "the same with dnf --disableplugin=nv_peer_mem: installed (the documented way past it)" \
        guard_installs disabled --disableplugin=nv_peer_mem "$other_nvr"
    check "dnf install kernel-core of $rhel_krel2 (the same kABI: weak-modules links the kmod) with the guard: installed" \
        guard_installs compat "" "kernel-core-${rhel_krel2%.*}"
    check "dnf install $other_nvr with the kmod built for it in the same transaction: installed" \
        guard_installs with-kmod "" "$other_nvr" kmod-nvidia_peer_memory-9.9

    # The provider watch (issue 40 item 12; docs/fleet.md, "A provider
    # updated alone"): the same plugin, in a root where dnf installed the
    # kmod built with the providers' CRCs and an NVIDIA driver package, the
    # driver then updated alone. Not a resolver matter: the kmod's Requires
    # name the providers by package (the spec drops their ksym()), so no
    # relation ties it to nvidia_p2p_*'s CRCs.
    check "the kmod's Requires name no nvidia_p2p_* or ib_*_peer_memory_client symbol: dnf's resolver cannot refuse a provider update by CRC" sh -c \
        "! grep -E 'nvidia_p2p_|_peer_memory_client' '$work/symvers-requires.txt'"
    # The providers as packages that ship the module: a stand-in of NVIDIA's
    # kmod-nvidia-latest-dkms with the nvidia.ko.xz its %post's DKMS build
    # would install (RHEL's dkms puts it in extra/, xz as RHEL compresses),
    # and of MLNX_OFED's kmod-mlnx-ofa_kernel with its ib_core.ko.xz where
    # that kmod has it. 580.142 and 25.10 are the 1.3 test's stand-ins,
    # which the kmod was built against (ib_core's source under its real
    # name); 580.159 and 25.11 the same exports with a struct in their
    # prototypes, for which genksyms gives other CRCs, as 580's struct
    # nvidia_p2p_page_table and MLNX_OFED's struct peer_memory_client
    # changes did (docs/contracts.md); 580.160 the same exports as 580.142
    # in another file (a MODULE_VERSION more).
    watch=$work/watch
    rm -rf "$watch"
    mkdir -p "$watch/580.142" "$watch/580.159" "$watch/580.160" "$watch/25.10" "$watch/25.11" "$watch/top/SPECS"
    cp "$standins/nvidia.c" "$watch/580.142/nvidia.c"
    sed 's|^#define STANDIN(name) .*|struct nvidia_p2p_page_table { unsigned int version; unsigned int flags; };\n#define STANDIN(name) int name(struct nvidia_p2p_page_table *t) { return -EINVAL; } EXPORT_SYMBOL(name)|' \
        "$standins/nvidia.c" >"$watch/580.159/nvidia.c"
    sed 's|^MODULE_LICENSE.*|&\nMODULE_VERSION("580.160");|' "$standins/nvidia.c" >"$watch/580.160/nvidia.c"
    cp "$standins/ib_core_standin.c" "$watch/25.10/ib_core.c"
    sed 's|^#define STANDIN(name) .*|struct peer_memory_client { char name[64]; unsigned int flags; };\n#define STANDIN(name) int name(const struct peer_memory_client *c) { return -EINVAL; } EXPORT_SYMBOL(name)|' \
        "$standins/ib_core_standin.c" >"$watch/25.11/ib_core.c"
    # standin_rpm <name> <epoch> <version> <module> <path> <provides>
    standin_rpm() {
        local dir=$watch/$3 ko=${4%.c}.ko
        echo "obj-m := ${4%.c}.o" >"$dir/Kbuild"
        make -s -C "/lib/modules/$kver/build" M="$dir" modules >>"$work/log" 2>&1 &&
            xz -9 --check=crc32 -c "$dir/$ko" >"$dir/$ko.xz" || return 1
        printf '%s\n' "Name: $1" "Epoch: $2" "Version: $3" "Release: 1" \
            "Summary: stand-in: $1 with the module it installs" "License: MIT" "Provides: $6" "AutoReqProv: no" \
            "%global __os_install_post %{nil}" "%global debug_package %{nil}" "%description" "stand-in" \
            "%install" "install -D -m 0644 $dir/$ko.xz %{buildroot}$5" "%files" "$5" >"$watch/top/SPECS/$1-$3.spec"
        rpmbuild -bb --quiet --define "_topdir $watch/top" "$watch/top/SPECS/$1-$3.spec" >>"$work/log" 2>&1
    }
    nvidia_ko=/lib/modules/$rhel_krel/extra/nvidia.ko.xz
    ib_core_ko=/lib/modules/$rhel_krel/extra/mlnx-ofa_kernel/drivers/infiniband/core/ib_core.ko.xz
    for driver in 580.142 580.159 580.160; do
        standin_rpm kmod-nvidia-latest-dkms 3 "$driver" nvidia.c "$nvidia_ko" "nvidia-kmod = 3:$driver" ||
            fail "the NVIDIA driver stand-in $driver"
    done
    for ofed in 25.10 25.11; do
        standin_rpm kmod-mlnx-ofa_kernel 0 "$ofed" ib_core.c "$ib_core_ko" "mlnx-ofa_kernel-kmod = $ofed" ||
            fail "the MLNX_OFED stand-in $ofed"
    done
    grep -hP '\t(nvidia_p2p_get_pages|ib_register_peer_memory_client)\t' "$standins/Module.symvers" "$watch"/*/Module.symvers | sed 's/^/    /'
    resolver_repo "$work/repo-watch" "$symvers_module" "$rhel9_common" \
        $(ls "$providers"/rpms/*.rpm | grep -Ev '/kmod-(nvidia-latest-dkms|mlnx-ofa_kernel)-') "$watch"/top/RPMS/*/*.rpm >>"$work/log" 2>&1
    wroot=$work/root-watch
    rm -rf "$wroot"
    resolver_dnf "$wroot" "$work/repo-watch" install kmod-nvidia_peer_memory kmod-nvidia-latest-dkms-580.142 kmod-mlnx-ofa_kernel-25.10 >>"$work/log" 2>&1 ||
        fail "dnf install of the kmod with the NVIDIA driver 580.142 and MLNX_OFED 25.10 stand-ins"
    # Then depmod for the kernel, as the kmod's %post and DKMS's install
    # do: resolver_dnf runs no scriptlets (the root has no shell), and the
    # check reads depmod's modules.dep and modules.symbols. Running none
    # after the updates below is faithful because each provider keeps its
    # path and exports the same names: a check below shows depmod would
    # write the same files.
    depmod -b "$wroot" "$rhel_krel" >>"$work/log" 2>&1
    # The check -common installed, through a wrapper that records what it
    # is asked (NV_PEER_MEM_CHECK, as for apt's watch); the plugin reads
    # dnf's --installroot as the check's root.
    printf '#!/bin/sh\necho "$*" >>"%s"\nexec "%s" "$@"\n' "$watch/asked" "$wroot/usr/sbin/gpudirect-rdma-check" >"$watch/check"
    chmod +x "$watch/check"
    # verdict_is <exit status>: gpudirect-rdma-check --kernel on the root.
    verdict_is() {
        NV_PEER_MEM_ROOT=$wroot "$wroot/usr/sbin/gpudirect-rdma-check" --kernel "$rhel_krel" --json >"$watch/verdict.json" 2>&1
        local status=$?
        cat "$watch/verdict.json"
        [ "$status" = "$1" ]
    }
    check "before: the check says nv_peer_mem loads on $rhel_krel (exit 0)" verdict_is 0
    # watch_dnf <dnf args>...: dnf in the root with the plugin -common
    # installed there; what the check was asked in $watch/asked.
    watch_dnf() {
        : >"$watch/asked"
        NV_PEER_MEM_CHECK=$watch/check resolver_dnf "$wroot" "$work/repo-watch" \
            --setopt=pluginpath="$wroot${plugin%/*}" "$@"
    }
    # watch_silent <dnf args>...: dnf exits 0 and the plugin says nothing
    watch_silent() {
        watch_dnf "$@" && ! grep -q 'nv_peer_mem:' "$wroot.log"
    }
    # stale_update <package-version> <module> <its path> <symbol ERE> <what the fix builds against>:
    # dnf upgrade to it installs it and exits 1, naming the kernel, the
    # provider's file and symbol, and the kmod to build again.
    stale_update() {
        local status=0
        watch_dnf upgrade "$1" || status=$?
        [ "$status" = 1 ] &&
            grep -qF "nv_peer_mem: after this transaction nv_peer_mem will not load on kernel $rhel_krel" "$wroot.log" &&
            grep -qE "FAIL symbols $2 \($3\) exports another version of $4" "$wroot.log" &&
            grep -qF "fix: build kmod-nvidia_peer_memory again against $5 installed for $rhel_krel" "$wroot.log" &&
            rpm -q --root "$wroot" "$1"
    }
    # stale_verdict <symbol ERE> <provider>: the check's verdict is LOST,
    # stale_symbol naming them.
    stale_verdict() {
        verdict_is 4 && grep -qE "\"stale_symbol\":\\{\"symbol\":\"$1\",\"provider\":\"$2\"" "$watch/verdict.json"
    }
    check "dnf upgrade of the NVIDIA driver alone to other nvidia_p2p_* CRCs: the upgrade is done and dnf exits 1, naming $rhel_krel, the symbol and the kmod to build again" \
        stale_update kmod-nvidia-latest-dkms-580.159 nvidia "$nvidia_ko" 'nvidia_p2p_' "the NVIDIA driver"
    check "the verdict is LOST with stale_symbol nvidia_p2p_* from nvidia (exit 4)" stale_verdict 'nvidia_p2p_[a-z_]+' nvidia
    same_depmod() {
        rm -rf "$watch/depmod" && mkdir -p "$watch/depmod/lib/modules" &&
            cp -a "$wroot/lib/modules/$rhel_krel" "$watch/depmod/lib/modules/" &&
            depmod -b "$watch/depmod" "$rhel_krel" &&
            cmp "$wroot/lib/modules/$rhel_krel/modules.dep" "$watch/depmod/lib/modules/$rhel_krel/modules.dep" &&
            cmp "$wroot/lib/modules/$rhel_krel/modules.symbols" "$watch/depmod/lib/modules/$rhel_krel/modules.symbols"
    }
    check "depmod after that update writes the same modules.dep and modules.symbols (so running none in the transaction is faithful)" same_depmod
    # silent_with <driver> <dnf args>...: dnf exits 0, the plugin says
    # nothing, the driver is the one installed and the check was asked
    # about the kernel.
    silent_with() {
        local driver=$1
        shift
        watch_silent "$@" && rpm -q --root "$wroot" "kmod-nvidia-latest-dkms-$driver" &&
            grep -q -- "--kernel $rhel_krel --json" "$watch/asked"
    }
    check "dnf downgrade to the driver the kmod was built against: exits 0, nothing said, the check asked about $rhel_krel" \
        silent_with 580.142 downgrade kmod-nvidia-latest-dkms-580.142
    check "...and the verdict is OK again (exit 0)" verdict_is 0
    check "dnf upgrade to a driver with the same nvidia_p2p_* CRCs in another file: exits 0, nothing said, the check asked" \
        silent_with 580.160 upgrade kmod-nvidia-latest-dkms-580.160
    check "dnf upgrade of MLNX_OFED alone to another ib_register_peer_memory_client CRC: dnf exits 1 the same way" \
        stale_update kmod-mlnx-ofa_kernel-25.11 ib_core "$ib_core_ko" 'ib_(un)?register_peer_memory_client' "MLNX_OFED's modules"
    check "the verdict is LOST with stale_symbol ib_*register_peer_memory_client from ib_core (exit 4)" \
        stale_verdict 'ib_(un)?register_peer_memory_client' ib_core
    ofed_back() {
        watch_silent downgrade kmod-mlnx-ofa_kernel-25.10 && rpm -q --root "$wroot" kmod-mlnx-ofa_kernel-25.10 && verdict_is 0
    }
    check "dnf downgrade of MLNX_OFED back: exits 0, nothing said, the verdict OK" ofed_back
    # 580.160 -> 580.159 (other CRCs) with the documented way past it.
    disabled_watch() {
        watch_dnf --disableplugin=nv_peer_mem downgrade kmod-nvidia-latest-dkms-580.159 &&
            ! grep -q 'nv_peer_mem:' "$wroot.log" && [ ! -s "$watch/asked" ] &&
            rpm -q --root "$wroot" kmod-nvidia-latest-dkms-580.159
    }
    check "a driver of other CRCs with dnf --disableplugin=nv_peer_mem: installed, exits 0, the check not asked" disabled_watch
    unchanged() {
        watch_silent install make && rpm -q --root "$wroot" make && [ ! -s "$watch/asked" ]
    }
    check "a transaction that changes no provider module (dnf install make): exits 0, the check not asked" unchanged
fi

echo "== -dkms scriptlets (rhel9's package)"
if [ -z "${dkms_rpm:-}" ]; then
    # No rpmbuild ran (no fixtures): build-dkms writes the same -dkms
    # package, as ci/test-dkms.sh's comparison shows.
    mkdir -p "$work/build-dkms"
    "$xtask" build-dkms --distro rhel9 --format rpm --out "$work/build-dkms" >>"$work/log" 2>&1 || true
    dkms_rpm=$(ls "$work"/build-dkms/nvidia_peer_memory-dkms-*.noarch.rpm 2>/dev/null | head -n 1)
    echo "   (no rpmbuild ran: the scriptlets of build-dkms's ${dkms_rpm##*/})"
fi
dkms_rpm=${dkms_rpm:-/nonexistent}
# The -dkms scriptlets with a stand-in dkms (the real one would change this
# machine): every kernel's outcome is reported and the scriptlet exits 0
# whatever dkms says, so a kernel it cannot build for never fails rpm.
mkdir -p "$work/fake-dkms"
cat >"$work/fake-dkms/dkms" <<FAKE
#!/bin/sh
echo "dkms \$*" >>"$work/fake-dkms/calls"
case "\$1" in install) echo "\${FAKE_DKMS_OUTPUT:-}"; exit "\${FAKE_DKMS_INSTALL_STATUS:-0}" ;; remove) exit 3 ;; esac
exit 0
FAKE
chmod +x "$work/fake-dkms/dkms"
rpm -qp --qf '%{POSTIN}' "$dkms_rpm" >"$work/dkms-post.sh" 2>>"$work/log"
rpm -qp --qf '%{PREUN}' "$dkms_rpm" >"$work/dkms-preun.sh" 2>>"$work/log"
# The kernel hook (-common's) as a stand-in that records its calls: %post
# asks it about each kernel DKMS installed the module for.
printf '#!/bin/sh\necho "hook $*" >>"%s"\n' "$work/fake-dkms/calls" >"$work/fake-dkms/hook"
chmod +x "$work/fake-dkms/hook"
check "-dkms %post asks the kernel hook ($hook_path module KERNEL)" grep -qF "$hook_path" "$work/dkms-post.sh"
sed -i "s|$hook_path|$work/fake-dkms/hook|" "$work/dkms-post.sh"
dkms_post_reports() { # <dkms install status> <expected message> [<what dkms prints>]
    : >"$work/fake-dkms/calls"
    PATH="$work/fake-dkms:$PATH" FAKE_DKMS_INSTALL_STATUS=$1 FAKE_DKMS_OUTPUT=${3:-} sh "$work/dkms-post.sh" 1 >"$work/dkms-post.out" 2>&1 || return 1
    cat "$work/dkms-post.out"
    grep -q "dkms add -m nv_peer_mem -v $version" "$work/fake-dkms/calls" &&
        grep -q "dkms install -m nv_peer_mem -v $version -k $kver" "$work/fake-dkms/calls" &&
        grep -E "kernel $kver( |$)" "$work/dkms-post.out" | grep -q "$2" || return 1
    # The hook is asked about a kernel only once the module is installed there.
    if [ "$2" = "built and installed" ]; then
        grep -qx "hook module $kver" "$work/fake-dkms/calls"
    else
        ! grep -q "^hook " "$work/fake-dkms/calls"
    fi
}
check "-dkms %post: a kernel DKMS builds for is reported installed" dkms_post_reports 0 "built and installed"
check "-dkms %post: an unsupported kernel (dkms 77) is skipped, exit 0" dkms_post_reports 77 "not a kernel the module supports"
check "-dkms %post: a failed build is skipped naming make.log, exit 0" dkms_post_reports 10 "make.log"
# dkms before 3.0.11 exits 9 for a BUILD_EXCLUSIVE skip (dkms-project/dkms
# cac9132), with this message; 9 for another reason is a failure.
check "-dkms %post: dkms < 3.0.11's exit 9 with the BUILD_EXCLUSIVE message is a skip, exit 0" dkms_post_reports 9 \
    "not a kernel the module supports" "Error! The dkms.conf for this module includes a BUILD_EXCLUSIVE directive which does not match this kernel/arch."
check "-dkms %post: exit 9 for another reason is a failed build, naming make.log" dkms_post_reports 9 \
    "make.log" "Error! Missing write permissions for /x."
check "-dkms %preun: exit 0 even when dkms remove fails" sh -c \
    "PATH='$work/fake-dkms:$PATH' sh '$work/dkms-preun.sh' 0 && grep -q 'dkms remove -m nv_peer_mem -v $version --all' '$work/fake-dkms/calls'"

# -dkms's file triggers (docs/next-boot.md, "Provider updates"): rpm runs
# each %transfiletriggerin script once a transaction installed files under
# its path; both run the rebuild script of the package's DKMS tree. Here
# the scripts as the package holds them, pointed at that script as the
# package ships it (rpm2cpio), with the stand-in dkms above, a stand-in
# gpudirect-rdma-check saying what it is told to, and a DKMS tree with a
# build of nv_peer_mem for $kver.
trigger_paths=$(rpm -qp --qf '[%{TRANSFILETRIGGERNAME}\n]' "$dkms_rpm" 2>>"$work/log" | sort | tr '\n' ' ')
check "-dkms has %transfiletriggerin on /lib/modules and /usr/src ($trigger_paths)" test "$trigger_paths" = "/lib/modules /usr/src "
rm -rf "$work/trigger" && mkdir -p "$work/trigger/x" "$work/trigger/dkms-tree/nv_peer_mem/$version/$kver/x86_64"
(cd "$work/trigger/x" && rpm2cpio "$dkms_rpm" | cpio -idm --quiet "./usr/src/nv_peer_mem-$version/nv_peer_mem-dkms-rebuild") 2>>"$work/log"
rpm -qp --qf '[%{TRANSFILETRIGGERSCRIPTS}\n--\n]' "$dkms_rpm" 2>>"$work/log" | awk -v RS='\n--\n' 'NR == 1' >"$work/trigger/script.sh"
sed -i "s|/usr/src/nv_peer_mem-$version/|$work/trigger/x/usr/src/nv_peer_mem-$version/|" "$work/trigger/script.sh"
# check_says EXIT JSON: the stand-in gpudirect-rdma-check's answer to
# --kernel RELEASE --json (the shape readiness's next_boot tests assert).
check_says() {
    { printf '#!/bin/sh\ncase "$*" in *--json*) ;; *) echo "not asked for --json: $*"; exit 2 ;; esac\ncat <<"JSON"\n'
      printf '{"schema":"gpudirect-rdma-check-next-boot/1","kernel":"%s","chosen":"--kernel","loads":%s,"exit_status":%s,"stale_symbol":%s,"facts":[]}\n' "$kver" "$([ "$1" = 0 ] && echo true || echo false)" "$1" "$2"
      printf 'JSON\nexit %s\n' "$1"; } >"$work/trigger/check" && chmod +x "$work/trigger/check"
}
trigger_runs() {  # trigger_runs WANT-DKMS-CALLS(yes|no)
    : >"$work/fake-dkms/calls"
    PATH="$work/fake-dkms:$PATH" NV_PEER_MEM_CHECK="$work/trigger/check" NV_PEER_MEM_DKMS_TREE="$work/trigger/dkms-tree" \
        sh "$work/trigger/script.sh" </dev/null >"$work/trigger/out" 2>&1 || return 1
    cat "$work/trigger/out" "$work/fake-dkms/calls"
    if [ "$1" = yes ]; then
        grep -qx "dkms uninstall -m nv_peer_mem -v $version -k $kver" "$work/fake-dkms/calls" &&
            grep -qx "dkms build --force -m nv_peer_mem -v $version -k $kver" "$work/fake-dkms/calls" &&
            grep -qx "dkms install -m nv_peer_mem -v $version -k $kver" "$work/fake-dkms/calls" &&
            grep -q "changed for kernel $kver: rebuilding nv_peer_mem $version with DKMS" "$work/trigger/out"
    else
        [ ! -s "$work/fake-dkms/calls" ] && [ ! -s "$work/trigger/out" ]
    fi
}
if [ -s "$work/trigger/script.sh" ] && [ -x "$work/trigger/x/usr/src/nv_peer_mem-$version/nv_peer_mem-dkms-rebuild" ]; then
    check_says 4 '{"symbol":"ib_register_peer_memory_client","provider":"ib_core","exported":"0x00000002","built_against":"0x00000001"}'
    check "-dkms's trigger: a build whose provider exports another symbol version is rebuilt (dkms uninstall, build --force, install)" trigger_runs yes
    check_says 4 null
    check "-dkms's trigger: a build LOST for another reason (no MLNX_OFED) is left alone, nothing printed" trigger_runs no
    check_says 0 null
    check "-dkms's trigger: a build that will load is left alone, nothing printed" trigger_runs no
else
    fail "-dkms's trigger script or its rebuild script not found in ${dkms_rpm##*/}"
fi

echo "== dnf5's guard (Fedora's -common; real dnf5 5.4 and its actions plugin, in a sid chroot)"
# docs/fleet.md, "The dnf5 guard". The node is a copy of ci/chroot.sh's sid
# chroot (its dnf5 and libdnf5's actions plugin are Debian's builds of
# upstream 5.4) with an rpm database: Fedora's -common and -dkms as
# rpmbuild made them above, installed by rpm (--nodeps: this node has
# no rpm for dkms, rust or MLNX_OFED; -dkms's %post runs Debian's dkms,
# which registers nv_peer_mem), and stand-in kernel-core rpms whose
# /lib/modules/<release> holds what depmod writes for a kernel with no
# modules and no build link, as a kernel arriving without its
# kernel-devel leaves it: kernel-install's 40-dkms.install (not run here:
# the stand-ins have no %posttrans) could build nothing for it.
fedora_top=$work/rpmbuild-fedora/RPMS
fedora_common=$fedora_top/x86_64/nvidia_peer_memory-common-$version-$release.x86_64.rpm
fedora_dkms=$fedora_top/noarch/nvidia_peer_memory-dkms-$version-$release.noarch.rpm
node=$work/dnf5-node
if [ ! -f "$fedora_common" ] || [ ! -f "$fedora_dkms" ]; then
    skip "dnf5's guard: no Fedora packages were built (rpmbuild --rebuild per family skipped)"
elif ! command -v mmdebstrap >/dev/null; then
    skip "dnf5's guard: no mmdebstrap for the sid chroot (ci/setup-host.sh installs it)"
else
    check "Fedora's -common installs dnf5's guard as %config" sh -c \
        "rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$fedora_common' | grep -qx 'cn /etc/dnf/libdnf5-plugins/actions.d/nv_peer_mem.actions' &&
         rpm -qp --requires '$fedora_common' | grep -qx libdnf5-plugin-actions"
    rhel9_common=$work/rpmbuild-rhel9/RPMS/x86_64/nvidia_peer_memory-common-$version-$release.el9.x86_64.rpm
    check "rhel9's -common (dnf 4) has no dnf5 guard" sh -c \
        "rpm -qpl '$rhel9_common' >'$work/rhel9-common-files.txt' && grep -q gpudirect-rdma-check '$work/rhel9-common-files.txt' && ! grep -q libdnf5 '$work/rhel9-common-files.txt'"
    check "a sid chroot with dnf5 (ci/chroot.sh)" bash "$here/chroot.sh" new sid "$node"
    # Stand-ins: kernel-core of three releases, a kernel-debug-core (a
    # flavour: its uname release ends in +debug), a kernel-modules-core
    # (matched by the guard's kernel*-core, but no kernel) and a package
    # that is no kernel.
    standin_spec() {  # NAME VERSION: a spec of an x86_64 stand-in
        local files="" install="" tags="" uname=%{version}-%{release}.%{_arch}
        case $1 in
        kernel-core | kernel-debug-core)
            [ "$1" = kernel-core ] || uname=$uname+debug
            files=/lib/modules/$uname
            install="mkdir -p %{buildroot}$files && touch %{buildroot}$files/modules.dep %{buildroot}$files/modules.symbols %{buildroot}$files/vmlinuz"
            # installonlypkg(kernel), one of libdnf5's default
            # installonlypkgs (include/libdnf5/conf/const.hpp): kernels
            # install side by side; kernel-uname-r, as kernel.spec's
            # kernel_reqprovconf gives every flavour's -core.
            tags="Provides: installonlypkg(kernel)
Provides: kernel-uname-r = $uname"
            ;;
        kernel-modules-core) tags="Provides: kernel-modules-core-uname-r = $uname" ;;
        esac
        cat <<SPEC
Name: $1
Version: $2
Release: 100.fc99
$tags
Summary: stand-in of ci/test-rpm.sh
License: MIT
%description
Installed by ci/test-rpm.sh into its dnf5 node only.
%install
mkdir -p %{buildroot}/usr/share/doc/$1-$2
$install
%files
/usr/share/doc/$1-$2
$files
SPEC
    }
    mkdir -p "$work/dnf5-standins" "$node/srv/repo"
    for v in 6.99.1 6.99.2 6.99.3; do standin_spec kernel-core "$v" >"$work/dnf5-standins/kernel-core-$v.spec"; done
    standin_spec kernel-debug-core 6.99.4 >"$work/dnf5-standins/kernel-debug-core.spec"
    standin_spec kernel-modules-core 6.99.4 >"$work/dnf5-standins/kernel-modules-core.spec"
    standin_spec nvpm-unrelated 1 >"$work/dnf5-standins/nvpm-unrelated.spec"
    standins_build() {
        local spec
        for spec in "$work"/dnf5-standins/*.spec; do
            rpmbuild -bb --target x86_64 --define "_topdir $work/dnf5-standins/top" "$spec" >>"$work/log" 2>&1 || return 1
        done
        cp "$work"/dnf5-standins/top/RPMS/x86_64/*.rpm "$node/srv/repo/" && createrepo_c -q "$node/srv/repo"
    }
    check "stand-in kernel rpms (kernel-core of three releases, kernel-debug-core, kernel-modules-core) and one unrelated, in a repository" standins_build
    # The chroot's Debian kernel headers (for ci/test-suites.sh's builds)
    # leave /lib/modules/<sid kernel>/build, a kernel with no modules.dep
    # that the check cannot judge; this node's kernels are the rpm ones.
    rm -rf "$node"/lib/modules/*
    mkdir -p "$node/etc/yum.repos.d" "$node/etc/rpm"
    printf '[nvpm-test]\nname=ci/test-rpm.sh stand-ins\nbaseurl=file:///srv/repo\ngpgcheck=0\n' >"$node/etc/yum.repos.d/nvpm-test.repo"
    # Debian's rpm keeps its database in ~/.rpmdb (rpm --eval %_dbpath);
    # the node's rpm and dnf5 keep it where Fedora's do.
    echo '%_dbpath /usr/lib/sysimage/rpm' >"$node/etc/rpm/macros.dbpath"
    # Debian's libdnf5-2 also enables libdnf5's local plugin, which runs
    # createrepo_c after each transaction (none is installed here: it
    # fails, and dnf5 with it); the node runs without it.
    sed -i 's/^enabled = .*/enabled = 0/' "$node/etc/dnf/libdnf5-plugins/local.conf"
    cp "$fedora_common" "$fedora_dkms" "$node/tmp/"
    in_node() { bash "$here/chroot.sh" run "$node" "$@"; }
    # --nodeps: the sid chroot's rpm database holds none of Fedora's
    # packages the two require (dkms, kernel-devel are Debian's there);
    # their scriptlets run and DKMS registers for real.
    check "rpm installs Fedora's -common and -dkms on the node; DKMS registers nv_peer_mem" sh -c \
        "bash '$here/chroot.sh' run '$node' rpm -i --nodeps /tmp/${fedora_common##*/} /tmp/${fedora_dkms##*/} >>'$work/log' 2>&1 &&
         bash '$here/chroot.sh' run '$node' test -d /var/lib/dkms/nv_peer_mem/$version/source"
    # dnf5_install OUT PACKAGE: dnf5 installs PACKAGE from the stand-ins'
    # repository; its exit status and everything it printed go to OUT.
    dnf5_install() {
        local rc=0
        in_node dnf5 -y --releasever=99 --repo=nvpm-test install "$2" >"$1" 2>&1 || rc=$?
        echo "dnf5 exit $rc" >>"$1"
        cat "$1"
    }
    k1=6.99.1-100.fc99.x86_64
    guard_fails() {
        dnf5_install "$work/dnf5-k1.out" kernel-core-6.99.1
        grep -qx "dnf5 exit 1" "$work/dnf5-k1.out" &&
            grep -qF "WARNING: nv_peer_mem will NOT load on kernel $k1:" "$work/dnf5-k1.out" &&
            grep -qF "fix: install what $k1 lacks (its headers, kernel-devel-$k1 and MLNX_OFED (no ib_register_peer_memory_client) and the NVIDIA driver (no nvidia_p2p_get_pages)), then run: dkms autoinstall -k $k1" "$work/dnf5-k1.out" &&
            grep -qF "nv_peer_mem will not load on kernel $k1, which this transaction installed" "$work/dnf5-k1.out" &&
            in_node rpm -q kernel-core-6.99.1 >/dev/null
    }
    check "dnf5 install of a kernel nv_peer_mem will not load on: the guard names why and the fix (kernel-devel-$k1 first), dnf5 exits 1, rpm's changes kept" guard_fails
    # The fix as printed, applied: on this node the headers cannot come
    # (no kernel-devel stand-in builds anything), so what is checked is
    # that the check names the same fix once asked again, and that the
    # guard fails by raise_error=1 alone: with it at 0 (a mutation of the
    # installed file), the same kind of install exits 0.
    actions=$node/etc/dnf/libdnf5-plugins/actions.d/nv_peer_mem.actions
    guard_mutated() {
        cp "$actions" "$work/actions.saved" && sed -i 's/raise_error=1/raise_error=0/' "$actions" || return 1
        dnf5_install "$work/dnf5-k3.out" kernel-core-6.99.3
        cp "$work/actions.saved" "$actions"
        grep -qx "dnf5 exit 0" "$work/dnf5-k3.out" && grep -qF "WARNING: nv_peer_mem will NOT load on kernel 6.99.3-100.fc99.x86_64:" "$work/dnf5-k3.out"
    }
    check "mutation: with raise_error=0 the same install exits 0 (the warning alone): the failure above is the guard's" guard_mutated
    # A flavour: kernel-debug-core's kernel is 6.99.4-100.fc99.x86_64+debug
    # (its kernel-uname-r), not its package's version-release.arch.
    k4=6.99.4-100.fc99.x86_64+debug
    flavour_fails() {
        dnf5_install "$work/dnf5-k4.out" kernel-debug-core-6.99.4
        grep -qx "dnf5 exit 1" "$work/dnf5-k4.out" &&
            grep -qF "WARNING: nv_peer_mem will NOT load on kernel $k4:" "$work/dnf5-k4.out" &&
            grep -qF "fix: install what $k4 lacks (its headers, kernel-debug-devel-6.99.4-100.fc99.x86_64 and" "$work/dnf5-k4.out" &&
            in_node rpm -q kernel-debug-core-6.99.4 >/dev/null
    }
    check "dnf5 install of kernel-debug-core: the guard judges its kernel ($k4), dnf5 exits 1" flavour_fails
    unrelated_passes() {
        in_node dnf5 -y --releasever=99 --repo=nvpm-test install nvpm-unrelated kernel-modules-core-6.99.4 >"$work/dnf5-unrelated.out" 2>&1 &&
            in_node rpm -q nvpm-unrelated kernel-modules-core-6.99.4 >/dev/null && ! grep -q nv_peer_mem "$work/dnf5-unrelated.out"
    }
    check "a transaction without a kernel (kernel-modules-core matches the filter, provides no kernel-uname-r) does not fail: dnf5 exits 0, no nv_peer_mem line" unrelated_passes
    # A node that wants no peer memory client (-dkms and its registration
    # gone): a new kernel loses nothing, and dnf5 succeeds.
    no_client_passes() {
        # --nodeps: -common requires -dkms or a kmod; the node is to have
        # neither, as one whose admin removed the client.
        in_node rpm -e --nodeps nvidia_peer_memory-dkms >>"$work/log" 2>&1
        [ ! -e "$node/var/lib/dkms/nv_peer_mem" ] || return 1
        dnf5_install "$work/dnf5-k2.out" kernel-core-6.99.2
        grep -qx "dnf5 exit 0" "$work/dnf5-k2.out" && ! grep -q "WARNING" "$work/dnf5-k2.out" &&
            grep -qF "nv_peer_mem: GPUDirect RDMA: this node needs no peer memory client on 6.99.2-100.fc99.x86_64" "$work/dnf5-k2.out"
    }
    check "without -dkms (no client wanted) a new kernel installs, dnf5 exits 0, no warning: the node needs no peer memory client there" no_client_passes
    # dnf5's provider watch (docs/fleet.md, "A provider updated alone"):
    # the same actions file's pre_transaction and post_transaction lines
    # run the provider watch apt runs on Debian. On this node, the kernel
    # and modules of the dnf 4 watch above: rhel9's kmod built with the
    # providers' CRCs, the kernel-core stand-in it was built for, and the
    # NVIDIA driver and MLNX_OFED stand-ins it was built against (installed
    # by rpm, --noscripts: depmod then runs as their %post would); the
    # newer drivers in the node's repository.
    if [ -n "${symvers_module:-}" ] && [ -d "$watch/top/RPMS" ]; then
        watch_node_ready() {
            # The guard tests' kernels go first: dnf5 keeps installonly_limit
            # (3) kernels and would remove the oldest, this one, with what
            # requires it, in the next transaction. --nodeps on erase and
            # install: the stand-ins are index entries without the whole
            # RHEL dependency chain (kernel-core's own Requires), and
            # --noscripts: their scriptlets are RHEL's, which this node
            # cannot run; what is tested is dnf5's watch, after them.
            in_node rpm -e --nodeps kernel-core-6.99.1 kernel-core-6.99.2 kernel-core-6.99.3 kernel-debug-core kernel-modules-core >>"$work/log" 2>&1 &&
                cp "$symvers_module" "$providers"/rpms/kernel-core-*.rpm "$watch"/top/RPMS/*/kmod-nvidia-latest-dkms-580.142-*.rpm \
                "$watch"/top/RPMS/*/kmod-mlnx-ofa_kernel-25.10-*.rpm "$node/tmp/" &&
                in_node sh -c 'rpm -i --oldpackage --nodeps --noscripts /tmp/kmod-nvidia_peer_memory-*.rpm /tmp/kernel-core-*.rpm /tmp/kmod-nvidia-latest-dkms-*.rpm /tmp/kmod-mlnx-ofa_kernel-*.rpm' >>"$work/log" 2>&1 &&
                depmod -b "$node" "$rhel_krel" &&
                cp "$watch"/top/RPMS/*/kmod-nvidia-latest-dkms-580.1[56]*.rpm "$node/srv/repo/" && createrepo_c -q --update "$node/srv/repo" &&
                NV_PEER_MEM_ROOT=$node "$node/usr/sbin/gpudirect-rdma-check" --kernel "$rhel_krel" >"$work/dnf5-watch-ready.out" 2>&1 &&
                grep -qx "NEXT BOOT OK: nv_peer_mem will load on $rhel_krel" "$work/dnf5-watch-ready.out"
        }
        check "the node gets rhel9's kmod, its kernel and the providers it was built against: the check says nv_peer_mem will load on $rhel_krel" watch_node_ready
        # dnf5_upgrade OUT PACKAGE: as dnf5_install, for an upgrade; the
        # repository changed since dnf5 cached its metadata (--refresh)
        dnf5_upgrade() {
            local rc=0
            in_node dnf5 -y --refresh --releasever=99 --repo=nvpm-test upgrade "$2" >"$1" 2>&1 || rc=$?
            echo "dnf5 exit $rc" >>"$1"
            cat "$1"
        }
        dnf5_stale_update() {
            dnf5_upgrade "$work/dnf5-watch-159.out" kmod-nvidia-latest-dkms-580.159
            grep -qx "dnf5 exit 1" "$work/dnf5-watch-159.out" &&
                grep -qF "nv_peer_mem: after this run nv_peer_mem will not load on kernel $rhel_krel:" "$work/dnf5-watch-159.out" &&
                grep -qE "FAIL symbols +nvidia \($nvidia_ko\) exports another version of nvidia_p2p_" "$work/dnf5-watch-159.out" &&
                grep -qF "fix: build kmod-nvidia_peer_memory again against the NVIDIA driver installed for $rhel_krel" "$work/dnf5-watch-159.out" &&
                grep -qF "nv_peer_mem will not load on a kernel after this transaction changed a module it is built against" "$work/dnf5-watch-159.out" &&
                in_node rpm -q kmod-nvidia-latest-dkms-580.159 >/dev/null
        }
        check "dnf5 upgrade of the NVIDIA driver alone to other nvidia_p2p_* CRCs: the upgrade is done and dnf5 exits 1, naming $rhel_krel, the symbol and the kmod to build again" dnf5_stale_update
        dnf5_same_crcs() {
            dnf5_upgrade "$work/dnf5-watch-160.out" kmod-nvidia-latest-dkms-580.160
            grep -qx "dnf5 exit 0" "$work/dnf5-watch-160.out" && ! grep -q "nv_peer_mem" "$work/dnf5-watch-160.out" &&
                in_node rpm -q kmod-nvidia-latest-dkms-580.160 >/dev/null &&
                NV_PEER_MEM_ROOT=$node "$node/usr/sbin/gpudirect-rdma-check" --kernel "$rhel_krel" >>"$work/log" 2>&1
        }
        check "then to a driver with the same CRCs as the kmod's: dnf5 exits 0, nothing said, the check OK again" dnf5_same_crcs
        # The failure above is the watch's: without its two lines in the
        # installed actions file (a mutation), 580.160 -> 580.159 exits 0
        # and says nothing, and the verdict is LOST all the same.
        watch_mutated() {
            cp "$actions" "$work/actions.saved" && sed -i '/nv_peer_mem-provider-watch/d' "$actions" || return 1
            in_node dnf5 -y --refresh --releasever=99 --repo=nvpm-test downgrade kmod-nvidia-latest-dkms-580.159 >"$work/dnf5-watch-mutated.out" 2>&1
            local rc=$?
            cp "$work/actions.saved" "$actions"
            cat "$work/dnf5-watch-mutated.out"
            [ "$rc" = 0 ] && ! grep -q "nv_peer_mem" "$work/dnf5-watch-mutated.out" &&
                ! NV_PEER_MEM_ROOT=$node "$node/usr/sbin/gpudirect-rdma-check" --kernel "$rhel_krel" >>"$work/log" 2>&1
        }
        check "mutation: without the watch's lines the same kind of update exits 0, silent, though the verdict is LOST: the failure above is the watch's" watch_mutated
        # The transaction that removes -common removes the scripts its
        # actions run (the plugin read the file before): the actions'
        # /bin/sh wrapper then runs nothing, and dnf5 succeeds. Scriptlets
        # off (dnf5.conf(5) tsflags=noscripts): rhel9's kmod's and
        # -common's need a RHEL node's shell and systemd, not this chroot's.
        common_removed() {
            in_node dnf5 -y --setopt=tsflags=noscripts remove nvidia_peer_memory-common >"$work/dnf5-remove.out" 2>&1
            local rc=$?
            cat "$work/dnf5-remove.out"
            [ "$rc" = 0 ] && ! in_node rpm -q nvidia_peer_memory-common >/dev/null && ! grep -q "Cannot execute action" "$work/dnf5-remove.out"
        }
        check "dnf5 remove nvidia_peer_memory-common: its own actions do not fail the removal (exit 0)" common_removed
    else
        skip "dnf5's provider watch: rhel9's kmod or the providers' stand-ins were not built"
    fi
    rm -rf "$node"
fi

echo "== dnf 4 on the -dkms route: a kernel DKMS built nothing for fails dnf (rhel9's packages)"
# docs/fleet.md, "The dnf guard": the kernel guard is the kmod's; on a
# node where DKMS builds nv_peer_mem, the plugin asks the check after the
# transaction about each kernel it installed. rhel9's -common and -dkms
# installed by rpm into a scratch root (--nodeps --noscripts; DKMS's tree
# made as `dkms add` in -dkms's %post leaves it), the kernel-core
# stand-ins of the dnf5 test above (a kernel without headers or a build
# link, so DKMS could build nothing), real dnf 4 with the plugin -common
# installed.
rhel9_dkms=$work/rpmbuild-rhel9/RPMS/noarch/nvidia_peer_memory-dkms-$version-$release.el9.noarch.rpm
droot=$work/root-dkms-kernels
if [ -f "${rhel9_common:-/nonexistent}" ] && [ -f "$rhel9_dkms" ] && [ -d "$work/dnf5-standins/top/RPMS/x86_64" ]; then
    rm -rf "$droot" "$work/repo-dkms-kernels"
    mkdir -p "$droot" "$work/repo-dkms-kernels"
    cp "$work"/dnf5-standins/top/RPMS/x86_64/kernel-*core-*.rpm "$work/repo-dkms-kernels/"
    createrepo_c -q "$work/repo-dkms-kernels"
    check "rhel9's -common and -dkms in a scratch root, DKMS's tree as dkms add leaves it" sh -c \
        "rpm -i --root '$droot' --nodeps --noscripts '$rhel9_common' '$rhel9_dkms' && mkdir -p '$droot/var/lib/dkms/nv_peer_mem/$version/source'"
    dplugin=$(rpm -ql --root "$droot" nvidia_peer_memory-common 2>/dev/null | grep '/dnf-plugins/nv_peer_mem\.py$')
    dkms_kernel_dnf() {  # dkms_kernel_dnf <dnf args>...: the plugin on, the root's check
        NV_PEER_MEM_CHECK=$droot/usr/sbin/gpudirect-rdma-check resolver_dnf "$droot" "$work/repo-dkms-kernels" \
            --setopt=pluginpath="$droot${dplugin%/*}" "$@"
    }
    dkms_kernel_lost() {
        local status=0 k=6.99.1-100.fc99.x86_64
        dkms_kernel_dnf install kernel-core-6.99.1 || status=$?
        [ "$status" = 1 ] &&
            grep -qF "nv_peer_mem: this transaction installed kernel $k, and nv_peer_mem" "$droot.log" &&
            grep -qF "FAIL module no nv_peer_mem for $k: modprobe finds none" "$droot.log" &&
            grep -qF "fix: install what $k lacks (its headers" "$droot.log" &&
            grep -qF "then run: dkms autoinstall -k $k" "$droot.log" &&
            rpm -q --root "$droot" kernel-core-6.99.1 >/dev/null
    }
    check "dnf install of a kernel DKMS built nothing for: installed, dnf exits 1 naming the kernel, what it lacks and dkms autoinstall" dkms_kernel_lost
    dkms_flavour_lost() {
        local status=0 k=6.99.4-100.fc99.x86_64+debug
        dkms_kernel_dnf install kernel-debug-core-6.99.4 kernel-modules-core-6.99.4 || status=$?
        [ "$status" = 1 ] &&
            grep -qF "nv_peer_mem: this transaction installed kernel $k, and nv_peer_mem" "$droot.log" &&
            [ "$(grep -c 'nv_peer_mem: this transaction installed kernel' "$droot.log")" = 1 ]
    }
    check "the same for kernel-debug-core with its kernel-modules-core: the kernel judged is its kernel-uname-r (6.99.4-100.fc99.x86_64+debug), once" dkms_flavour_lost
    dkms_kernel_no_client() {
        rm -rf "$droot/var/lib/dkms/nv_peer_mem"
        dkms_kernel_dnf install kernel-core-6.99.2 && ! grep -q 'nv_peer_mem:' "$droot.log"
    }
    check "the same with no DKMS registration (no client wanted): dnf exits 0, nothing said" dkms_kernel_no_client
else
    skip "dnf 4 on the -dkms route: rhel9's packages or the kernel-core stand-ins were not built"
fi

echo "== rpmlint"
for rpm_file in $(printf '%s\n' "${lint_rpms[@]}" | sort -u); do
    rpmlint -c "$root/rpm/rpmlint.toml" "$rpm_file" >"$work/rpmlint.txt" 2>&1
    summary=$(grep -E 'packages and [0-9]+ specfiles checked' "$work/rpmlint.txt")
    grep -E ': [EW]: ' "$work/rpmlint.txt" | sed 's/^/  /'
    check "rpmlint $(basename "$rpm_file"): 0 errors, no warning outside rpm/rpmlint.toml" sh -c \
        "echo '$summary' | grep -q ' 0 errors, 0 warnings,'"
done

echo "== bench-srpm (figures only)"
"$xtask" bench-srpm --runs 20 --distro rhel9 2>&1 | sed 's/^/  /'

finish
