#!/usr/bin/env bash
# Real builds on the newer Debian suites (issue 12 item 6), as root on the
# Debian 12 CI host, each in a chroot of that suite (ci/chroot.sh: mmdebstrap,
# cached under /var/cache/nv-peer-mem-ci/chroots):
#   - the module, with the suite's own linux-headers-amd64, gcc and rustc
#     (strict: warnings are errors), against kmod/compat and against the
#     nv-p2p.h of NVIDIA 535 (bookworm), 550 (trixie/sid contrib) and 555
#     (experimental contrib);
#   - the Debian route: `cargo xtask build-deb --distro debian13` on the host
#     (sid uses the debian13 data too), then in the chroot
#     `dpkg-buildpackage -us -uc`, lintian (0 errors), `dpkg -i` of both debs
#     with DKMS building the module for the chroot's kernel headers, purge,
#     and nothing left under /usr/src, /var/lib/dkms, /lib/modules/*/updates.
#
#   sudo bash ci/test-suites.sh [SUITE...]     (default: trixie sid)
#
# Trixie's rustc (1.85) is the oldest default toolchain of a supported suite
# and the module's declared minimum (kmod/Cargo.toml rust-version), so its
# build here is the minimum-rustc check (docs/toolchains.md).
# Each suite gets a fresh copy of its cached chroot under $NVPM_TEST_DIR
# (default /var/tmp/nv-peer-mem-test-suites), removed when its checks pass.
# Last line: "N passed, M failed"; exit status 1 when anything failed,
# 2 when the machine is not set up.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-suites}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(trixie sid)
standin=mlnx-ofed-kernel-modules   # satisfies mlnx-ofed-kernel-dkms | mlnx-ofed-kernel-modules

. "$here/checks.sh"
require_root_and_tools test-suites.sh cargo git mmdebstrap unshare equivs-build dpkg-deb apt-get

mkdir -p "$work"
: >"$work/log"
start_all=$SECONDS
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
upstream=${version/-/\~}

echo "== on the host: build-deb, MLNX_OFED stand-in, NVIDIA headers"
check "cargo build of xtask" cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask
rm -rf "$work/deb" "$work/equivs"; mkdir -p "$work/deb" "$work/equivs"
tarball=nvidia-peer-memory_${upstream}.orig.tar.gz
check "build-deb --distro debian13" "$root/target/release/xtask" build-deb --out "$work/deb" --distro debian13
check "equivs stand-in for MLNX_OFED" bash "$here/mofed-standin.sh" "$work/equivs" "$standin" \
    "Installed by ci/test-suites.sh in its chroots only."
standin_deb=$work/equivs/${standin}_0-test_all.deb
# NVIDIA driver sources, by major version; 550 is each suite's own (below).
declare -A nv_src
nv_src[535]=$(bash "$here/fetch-nvidia-src.sh" 2>>"$work/log") || true
nv_src[555]=$(bash "$here/fetch-nvidia-p2p.sh" experimental 2>>"$work/log") || true
check "NVIDIA 535 sources (bookworm contrib) at hand" test -f "${nv_src[535]}/nvidia/nv-p2p.h"
check "NVIDIA 555 sources (experimental contrib) at hand" test -f "${nv_src[555]}/nvidia/nv-p2p.h"
[ -f "$work/deb/$tarball" ] && [ -f "$standin_deb" ] || finish

for suite in "${suites[@]}"; do
    echo "== $suite"
    t0=$SECONDS
    chroot_dir=$work/$suite
    if ! bash "$here/chroot.sh" new "$suite" "$chroot_dir" 2>&1 | tee -a "$work/log"; then
        fail "$suite: chroot (see above)"; continue
    fi
    echo "  chroot ready in $((SECONDS - t0)) s"
    in_chroot() { bash "$here/chroot.sh" run "$chroot_dir" "$@"; }
    # The kernel the suite's linux-headers-amd64 names (the only one inside).
    kver=$(ls "$chroot_dir/lib/modules" | sort -V | tail -n 1)
    rustc_v=$(in_chroot rustc --version | cut -d' ' -f2)
    gcc_v=$(in_chroot sh -c 'gcc -dumpfullversion')
    echo "  kernel headers $kver, rustc $rustc_v, gcc $gcc_v"

    # The module's sources as the packages ship them (git-tracked kmod/
    # without its host tests), plus the workspace Cargo.toml for the version.
    mkdir -p "$chroot_dir/build/src" "$chroot_dir/build/deb"
    (cd "$root" && git ls-files -z kmod Cargo.toml | grep -zv '^kmod/tests/' | tar --null -cf - -T -) | tar -C "$chroot_dir/build/src" -xf -
    nv550=$(bash "$here/fetch-nvidia-p2p.sh" "$suite" 2>>"$work/log") || nv550=
    for v in 535 550 555; do
        src=${nv_src[$v]:-}; [ "$v" = 550 ] && src=$nv550
        [ -f "$src/nvidia/nv-p2p.h" ] || continue
        mkdir -p "$chroot_dir/build/nvidia-$v/nvidia"
        cp "$src/nvidia/nv-p2p.h" "$chroot_dir/build/nvidia-$v/nvidia/"
    done

    build() {  # build [make args]: strict clean build in the chroot, output in $work/build
        in_chroot sh -c "cd /build/src && make -s -C kmod clean >/dev/null 2>&1; make -C kmod KVER='$kver' NVPM_STRICT=1 NVPM_RUST_CACHE=/build/rust-cache $*" >"$work/build" 2>&1
        local rc=$?; cat "$work/build"; return $rc
    }
    vermagic_ok() {
        local vm; vm=$(in_chroot modinfo -F vermagic /build/src/kmod/nv_peer_mem.ko)
        echo "vermagic: $vm"; case "$vm" in "$kver "*) ;; *) return 1 ;; esac
    }
    nc_compiled() { in_chroot sh -c 'nm /build/src/kmod/nv_peer_mem.ko | grep -q " U nvidia_p2p_get_pages_persistent$"'; }
    verified() { grep -q 'verified .*no GOTPCREL, no SSE/AVX, objtool silent' "$work/build"; }
    t1=$SECONDS
    check "$suite: module builds for $kver (rustc $rustc_v, gcc $gcc_v, strict)" build
    check "$suite: object verified (GOTPCREL, SSE, objtool)" verified
    check "$suite: vermagic is $kver" vermagic_ok
    for v in 535 550 555; do
        if [ ! -f "$chroot_dir/build/nvidia-$v/nvidia/nv-p2p.h" ]; then
            fail "$suite: no NVIDIA $v nv-p2p.h (ci/fetch-nvidia-p2p.sh failed, see $work/log)"; continue
        fi
        check "$suite: builds with NVIDIA $v's nv-p2p.h" build NV_SRC=/build/nvidia-$v
        check "$suite: nv_mem_nc client compiled in with NVIDIA $v" nc_compiled
    done
    in_chroot make -s -C /build/src/kmod clean >/dev/null 2>&1
    echo "  module builds: $((SECONDS - t1)) s"

    t1=$SECONDS
    cp "$work/deb/$tarball" "$standin_deb" "$chroot_dir/build/deb/"
    check "$suite: dpkg-buildpackage -us -uc" in_chroot sh -c \
        "cd /build/deb && tar xzf $tarball && cd nvidia-peer-memory-$upstream && dpkg-buildpackage -us -uc"
    debver=$(in_chroot dpkg-parsechangelog -l "/build/deb/nvidia-peer-memory-$upstream/debian/changelog" -S Version)
    deb=/build/deb/nvidia-peer-memory_${debver}_all.deb
    dkms_deb=/build/deb/nvidia-peer-memory-dkms_${debver}_all.deb
    check "$suite: both debs built" test -f "$chroot_dir$deb" -a -f "$chroot_dir$dkms_deb"
    : >"$work/lintian-$suite.txt"
    [ -f "$chroot_dir$dkms_deb" ] && in_chroot lintian --fail-on none --no-tag-display-limit \
        "/build/deb/nvidia-peer-memory_${debver}_amd64.changes" >"$work/lintian-$suite.txt" 2>>"$work/log"
    sed 's/^/  /' "$work/lintian-$suite.txt"
    errors=$(grep -c '^E: ' "$work/lintian-$suite.txt")
    check "$suite: lintian $(in_chroot lintian --print-version): 0 errors ($errors)" test -f "$chroot_dir/build/deb/nvidia-peer-memory_${debver}_amd64.changes" -a "$errors" = 0

    # A machine with this kernel installed has its modules.dep (linux-image's
    # postinst runs depmod); the chroot has only the headers, and dkms 3.2
    # skips depmod for a kernel without modules.dep, so modinfo -k would not
    # find the module (sid: 7.2's headers ship none). Make it look installed.
    in_chroot depmod -a "$kver" >>"$work/log" 2>&1
    check "$suite: dpkg -i of the MLNX_OFED stand-in" in_chroot dpkg -i "/build/deb/$(basename "$standin_deb")"
    check "$suite: dpkg -i of both debs" in_chroot dpkg -i "$deb" "$dkms_deb"
    for p in nvidia-peer-memory nvidia-peer-memory-dkms; do
        check "$suite: $p is installed and configured" in_chroot sh -c "dpkg-query -W -f='\${Status}' $p | grep -qx 'install ok installed'"
    done
    check "$suite: dkms status: nv_peer_mem installed for $kver" in_chroot sh -c \
        "dkms status -m nv_peer_mem -v '$upstream' -k '$kver'; dkms status -m nv_peer_mem -v '$upstream' -k '$kver' | grep -q ': installed'"
    check "$suite: modinfo -k $kver nv_peer_mem finds version $version" in_chroot sh -c \
        "modinfo -k '$kver' -F version nv_peer_mem | grep -qx '$version'"
    check "$suite: dpkg -P of both debs and the stand-in" in_chroot dpkg -P nvidia-peer-memory nvidia-peer-memory-dkms "$standin"
    leftovers() {
        local left
        left=$(cd "$chroot_dir" && ls -d usr/src/nv_peer_mem-* var/lib/dkms/nv_peer_mem lib/modules/*/updates/dkms/nv_peer_mem.ko* \
            etc/infiniband/nv_peer_mem.conf 2>/dev/null)
        [ -z "$left" ] || { echo "left behind: $left"; return 1; }
    }
    check "$suite: nothing left under /usr/src, /var/lib/dkms, /lib/modules/*/updates, /etc" leftovers
    echo "  deb route: $((SECONDS - t1)) s"
    echo "  $suite: $((SECONDS - t0)) s in all"
    if [ "$failed" = 0 ]; then rm -rf "$chroot_dir"; else echo "  (chroot kept for inspection: $chroot_dir)"; fi
done

echo "== test-suites.sh: $((SECONDS - start_all)) s"
finish
