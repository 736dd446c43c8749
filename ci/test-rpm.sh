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
#   reports 0 errors and 0 warnings on the source and binary rpms.
# Everything is built under $NVPM_TEST_DIR (default /var/tmp/nv-peer-mem-
# test-rpm); nothing is installed. Last line: "N passed, M failed"; exit
# status 1 when anything failed, 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-rpm}

. "$here/checks.sh"

require_root_and_tools test-rpm.sh cargo rpm rpmbuild rpm2cpio rpmlint cpio modinfo sha256sum

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
bad_input() {
    local expected=$1; shift
    local dir=$work/bad
    rm -rf "$dir"; mkdir -p "$dir"
    "$xtask" build-srpm "$@" >"$work/bad.out" 2>&1
    local status=$?
    cat "$work/bad.out"
    [ "$status" = 2 ] && grep -q -- "$expected" "$work/bad.out" && [ -z "$(ls -A "$dir")" ]
}
check "unknown --distro: exit 2, lists the known ones, nothing written" bad_input "rhel9, rhel10" --out "$work/bad" --distro plan9
check "deb --distro: exit 2, nothing written" bad_input "build-deb" --out "$work/bad" --distro debian12
check "--release 0: exit 2, nothing written" bad_input "release" --out "$work/bad" --release 0
check "missing --out: exit 2" bad_input "no such directory" --out "$work/bad/no/such/dir"
check "unwritable --out: exit 2" bad_input "not writable" --out /proc

echo "== the source rpm"
check "rpm -K: digests OK" sh -c "rpm -K '$srpm' | grep -q 'digests OK'"
check "lead says source package (type 1)" sh -c "test \"\$(od -An -tx1 -j6 -N2 '$srpm' | tr -d ' ')\" = 0001"
rpm -qpi "$srpm" >"$work/qpi.txt" 2>>"$work/log"
sed 's/^/  /' "$work/qpi.txt"
for field in "Name        : nvidia_peer_memory" "Version     : $version" "Release     : $release" \
    "Source RPM  : (none)" "Build Host  : reproducible" "Group       : System Environment/Kernel" \
    "URL         : https://github.com/Mellanox/nv_peer_memory"; do
    check "rpm -qpi shows '$field'" grep -qxF "$field" "$work/qpi.txt"
done
check "rpm -qpl lists the spec and the tarball" sh -c \
    "test \"\$(rpm -qpl '$srpm' | tr '\n' ' ')\" = 'nvidia_peer_memory-$version.tar.gz nvidia_peer_memory.spec '"
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
rpm_ids=$(sed -n '/^distros:/,$ { /^  - id: /{ s/^  - id: //; h }; /^    family: rpm$/{ g; p } }' "$root/packaging/distros.yaml")
check "packaging/distros.yaml lists the rpm distros ($(echo $rpm_ids))" test "$(echo "$rpm_ids" | wc -w)" -ge 7
for id in $rpm_ids; do
    mkdir -p "$work/distros/$id"
    check "build-srpm --distro $id: rpm -K OK" sh -c \
        "'$xtask' build-srpm --out '$work/distros/$id' --distro $id && rpm -K '$work/distros/$id/$srpm_name' | grep -q 'digests OK'"
done

echo "== rpmbuild --rebuild"
top=$work/rpmbuild
mkdir -p "$top"
check "rpmbuild --rebuild --nodeps --define 'KVERSION $kver'" \
    rpmbuild --rebuild --nodeps --define "_topdir $top" --define "_tmppath $work/tmp" --define "KVERSION $kver" "$srpm"
kmod_rpm=$top/RPMS/x86_64/$kmod_rpm_name
dkms_rpm=$top/RPMS/noarch/$dkms_rpm_name
check "$kmod_rpm_name built" test -f "$kmod_rpm"
check "$dkms_rpm_name built" test -f "$dkms_rpm"
[ -f "$kmod_rpm" ] && [ -f "$dkms_rpm" ] || finish

rpm -qpl "$kmod_rpm" >"$work/kmod-files.txt" 2>>"$work/log"
sed 's/^/  /' "$work/kmod-files.txt"
for path in "/lib/modules/$kver/extra/nv_peer_mem.ko" /etc/infiniband/nv_peer_mem.conf \
    /usr/lib/systemd/system/nv_peer_mem.service /usr/libexec/nv_peer_mem/nv_peer_mem-service; do
    check "$kmod_rpm_name has $path" grep -qxF "$path" "$work/kmod-files.txt"
done
check "$kmod_rpm_name owns no kernel directory" sh -c \
    "! grep -qxE '/lib/modules(/$kver(/extra)?)?' '$work/kmod-files.txt'"
check "nv_peer_mem.conf is %config(noreplace)" sh -c \
    "rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$kmod_rpm' | grep -qx 'cn /etc/infiniband/nv_peer_mem.conf'"
check "$kmod_rpm_name requires the kernel $kver" sh -c \
    "rpm -qp --requires '$kmod_rpm' | grep -qxE 'kernel-uname-r = $kver|/lib/modules/$kver/kernel'"
check "$kmod_rpm_name runs depmod for $kver" sh -c "rpm -qp --scripts '$kmod_rpm' | grep -q 'depmod -a $kver'"
check "$kmod_rpm_name conflicts with the -dkms package" sh -c \
    "rpm -qp --conflicts '$kmod_rpm' | grep -qx nvidia_peer_memory-dkms"
check "$dkms_rpm_name conflicts with the kmod package" sh -c \
    "rpm -qp --conflicts '$dkms_rpm' | grep -qx nvidia_peer_memory"
rpm -qpl "$dkms_rpm" >"$work/dkms-files.txt" 2>>"$work/log"
for path in dkms.conf kmod/Makefile kmod/VERSION; do
    check "$dkms_rpm_name has /usr/src/nv_peer_mem-$version/$path" grep -qxF "/usr/src/nv_peer_mem-$version/$path" "$work/dkms-files.txt"
done
check "$dkms_rpm_name holds no build output" sh -c "! grep -qE '\\.(o|ko|a|cmd)\$|/kmod/build' '$work/dkms-files.txt'"
check "$dkms_rpm_name runs dkms add/install and remove" sh -c \
    "rpm -qp --scripts '$dkms_rpm' | grep -q 'dkms add' && rpm -qp --scripts '$dkms_rpm' | grep -q 'dkms install' && rpm -qp --scripts '$dkms_rpm' | grep -q 'dkms remove'"

# The -dkms scriptlets with a stand-in dkms (the real one would change this
# machine): every kernel's outcome is reported and the scriptlet exits 0
# whatever dkms says, so a kernel it cannot build for never fails rpm.
mkdir -p "$work/fake-dkms"
cat >"$work/fake-dkms/dkms" <<EOF
#!/bin/sh
echo "dkms \$*" >>"$work/fake-dkms/calls"
case "\$1" in install) exit "\${FAKE_DKMS_INSTALL_STATUS:-0}" ;; remove) exit 3 ;; esac
exit 0
EOF
chmod +x "$work/fake-dkms/dkms"
rpm -qp --qf '%{POSTIN}' "$dkms_rpm" >"$work/dkms-post.sh" 2>>"$work/log"
rpm -qp --qf '%{PREUN}' "$dkms_rpm" >"$work/dkms-preun.sh" 2>>"$work/log"
dkms_post_reports() { # <dkms install status> <expected message>
    : >"$work/fake-dkms/calls"
    PATH="$work/fake-dkms:$PATH" FAKE_DKMS_INSTALL_STATUS=$1 sh "$work/dkms-post.sh" 1 >"$work/dkms-post.out" 2>&1 || return 1
    cat "$work/dkms-post.out"
    grep -q "dkms add -m nv_peer_mem -v $version" "$work/fake-dkms/calls" &&
        grep -q "dkms install -m nv_peer_mem -v $version -k $kver" "$work/fake-dkms/calls" &&
        grep -E "kernel $kver( |$)" "$work/dkms-post.out" | grep -q "$2"
}
check "-dkms %post: a kernel DKMS builds for is reported installed" dkms_post_reports 0 "built and installed"
check "-dkms %post: an unsupported kernel (dkms 77) is skipped, exit 0" dkms_post_reports 77 "not a kernel the module supports"
check "-dkms %post: a failed build is skipped naming make.log, exit 0" dkms_post_reports 10 "make.log"
check "-dkms %preun: exit 0 even when dkms remove fails" sh -c \
    "PATH='$work/fake-dkms:$PATH' sh '$work/dkms-preun.sh' 0 && grep -q 'dkms remove -m nv_peer_mem -v $version --all' '$work/fake-dkms/calls'"

mkdir -p "$work/kmod-root"
(cd "$work/kmod-root" && rpm2cpio "$kmod_rpm" | cpio -idm --quiet) 2>>"$work/log"
ko=$work/kmod-root/lib/modules/$kver/extra/nv_peer_mem.ko
modinfo "$ko" >"$work/modinfo.txt" 2>>"$work/log"
sed 's/^/  /' "$work/modinfo.txt"
check "modinfo accepts the packaged .ko" sh -c "modinfo -F name '$ko' | grep -qx nv_peer_mem"
check "the .ko is version $version" sh -c "modinfo -F version '$ko' | grep -qx '$version'"
check "the .ko is built for $kver" sh -c "modinfo -F vermagic '$ko' | grep -q '^$kver '"

echo "== rpmlint"
rpmlint -c "$root/rpm/rpmlint.toml" "$srpm" "$kmod_rpm" "$dkms_rpm" >"$work/rpmlint.txt" 2>&1
sed 's/^/  /' "$work/rpmlint.txt"
summary=$(grep -E 'packages and [0-9]+ specfiles checked' "$work/rpmlint.txt")
check "rpmlint: 0 errors on the source and binary rpms" sh -c "echo '$summary' | grep -q ' 0 errors,'"
check "rpmlint: no warning outside rpm/rpmlint.toml's accepted list" sh -c "echo '$summary' | grep -q ' 0 warnings,'"

echo "== bench-srpm (figures only)"
"$xtask" bench-srpm --runs 20 --distro rhel9 2>&1 | sed 's/^/  /'

finish
