#!/usr/bin/env bash
# The fleet route for arm64 (issue 21 item 1): build-modules cross-builds
# the module package for Debian's arm64 bookworm kernel on this amd64 build
# host, and the module from that package passes the booted-kernel scenarios
# in qemu-system-aarch64 (`cargo xtask test-vm --arch arm64 --prebuilt`).
# Its MLNX_OFED and NVIDIA builds are the ones test-vm made for that kernel
# (target/test-vm/<release>/ofa_kernel and nvidia_src: MLNX_OFED's own
# peer_mem.c and the NVIDIA double, cross-built), so ci/test.sh runs this
# after `cargo xtask test-vm --arch arm64`; without them it says skipped.
# No flavour metapackage: this host's apt has no arm64 lists (fleet.md).
# Last line: "N passed, M failed"; exit 1 when anything failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-fleet-arm64}

. "$here/checks.sh"
. "$here/lib/routes.sh"

require_root_and_tools test-fleet-arm64.sh cargo dpkg-deb lintian readelf modinfo aarch64-linux-gnu-gcc qemu-system-aarch64
. "$here/kernels.sh" || exit 2
k=${KVER_BOOKWORM%-amd64}-arm64
built=$root/target/test-vm/$k
if [ ! -f "$built/ofa_kernel/Module.symvers" ] || [ ! -f "$built/nvidia_src/Module.symvers" ]; then
    skip_suite "the arm64 fleet route: no MLNX_OFED and NVIDIA builds for $k in $built (run: cargo xtask test-vm --arch arm64 --kernel 6.1); nothing was tested"
fi
rm -rf "$work" && mkdir -p "$work/out" "$work/x" "$work/prebuilt/$k" "$work/ofa/aarch64" "$work/modules/$k"
: >"$work/log"
xtask=$root/target/release/xtask
check "xtask builds" cargo build --release --locked -q -p xtask
kroot=$(bash "$here/fetch-arm64-kernel.sh" "$KVER_BOOKWORM" 2>>"$work/log")
check "Debian's arm64 headers for $k unpacked" test -f "$kroot/usr/src/linux-headers-$k/Makefile"
# The build host's layout: <modules root>/<release>/build, MLNX_OFED's
# <root>/<uname -m>/<release>.
ln -sfn "$kroot/usr/src/linux-headers-$k" "$work/modules/$k/build"
ln -sfn "$built/ofa_kernel" "$work/ofa/aarch64/$k"
check "build-modules --kernel $k (cross-built on amd64)" "$xtask" build-modules --kernel "$k" --out "$work/out" \
    --modules-root "$work/modules" --ofed-root "$work/ofa" --nvidia-src "$built/nvidia_src" \
    --ofed-package mlnx-ofed-kernel-modules=25.10-test --no-metapackage
deb=$(ls "$work"/out/nvidia-peer-memory-modules-"$k"_*_arm64.deb 2>/dev/null)
check "the package is nvidia-peer-memory-modules-${k}_<version>_arm64.deb" test -f "$deb"
dpkg-deb -x "$deb" "$work/x" 2>>"$work/log"
ko=$work/x/lib/modules/$k/updates/nv_peer_mem.ko
check "its module is an AArch64 object for $k (readelf, vermagic)" sh -c "
    readelf -h '$ko' | grep -q 'Machine: *AArch64' && modinfo -F vermagic '$ko' | grep -q '^$k '"
check "Architecture: arm64, depends on linux-image-$k" sh -c "
    [ \"\$(dpkg-deb -f '$deb' Architecture)\" = arm64 ] && dpkg-deb -f '$deb' Depends | grep -q '^linux-image-$k | linux-image-$k-unsigned, '"
check "lintian: no tags" lintian_quiet "$deb"
cp "$ko" "$work/prebuilt/$k/nv_peer_mem.ko"
# The packaged module, booted: test-vm's whole scenario list against it.
vm_passes() {
    NVPM_STRICT=1 cargo xtask test-vm --arch arm64 --kernel 6.1 --prebuilt "$work/prebuilt" >"$work/vm.out" 2>&1
    local rc=$?
    tail -n 3 "$work/vm.out"
    [ "$rc" = 0 ] && grep -q '^==> test-vm: .*: [0-9]* passed, 0 failed' "$work/vm.out"
}
check "the packaged arm64 module passes the booted-kernel scenarios (qemu-system-aarch64)" vm_passes
finish
