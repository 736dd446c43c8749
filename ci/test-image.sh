#!/usr/bin/env bash
# End to end in a booted Debian 12 system (issue 15 item 1): our debs
# (cargo xtask build-deb + dpkg-buildpackage) installed with apt into a
# bootable image (ci/image.sh) beside stand-in packages for MLNX_OFED's
# ib_core and the NVIDIA driver (the VM harness's modules, `cargo xtask
# vm-standins`), DKMS building the module there; then the image boots in
# QEMU (kernel and initrd from its /boot, root on a virtio disk made with
# mke2fs -d) and its test unit (kmod/tests/vm/image/run) checks each boot:
#   onboot     ONBOOT=yes: the service loaded DKMS's module; the VM
#              harness's scenarios pass against it
#   onboot-no  ONBOOT=no: not loaded, the journal says why; then, on the
#              running system, the kernel's own ib_core (no peer memory
#              API): the service fails and `systemctl status` says why;
#              an MLNX_OFED update with other ib_* symbol versions (dpkg
#              -i): -dkms's file trigger rebuilds nv_peer_mem, which loads;
#              the build from before it put back: the service fails and
#              `systemctl status` says why
#   peermem    nvidia_peermem loaded at boot: the service refuses, naming
#              the fix; then DKMS's build removed: status says there is no
#              module and how to build it
#   next-boot-skip  natively first: MLNX_OFED's stand-in updated to a build
#              for another kernel only, DKMS skips nv_peer_mem, the kernel
#              hook warns, --next-boot's verdict (LOST, DKMS's reason)
#              saved; booted: the saved verdict is what the boot shows;
#              then (natively) the stand-in and DKMS's build are put back
#   newkernel  MLNX_OFED and NVIDIA stand-ins that are DKMS packages
#              themselves (mlnx-ofed-kernel, nvidia-current) registered,
#              then bookworm-backports' kernel installed as unattended-
#              upgrades does (LC_ALL=C apt-get): the kernel's hook builds
#              both and then nv_peer_mem; natively, -dkms swapped for the
#              prebuilt package and back with dpkg; booted: the service
#              loaded the module over DKMS's ib_core and nvidia; then an
#              MLNX_OFED update with another ib_* CRC put in place, the
#              kernel hook's warning, --next-boot's verdict (LOST) saved
#   next-boot-crc  rebooted: the saved verdict is what the boot shows (not
#              loaded, status names the CRC); then MLNX_OFED's DKMS package
#              updated with dpkg -i (other ib_* CRCs, same kernel): -dkms's
#              file trigger rebuilds nv_peer_mem, the verdict is OK and
#              the module loads, built against the update; then apt-get
#              purge leaves nothing
# Last line: "N passed, M failed"; exit 1 on any failure, 2 when the host
# is not set up. Scratch: $NVPM_TEST_DIR (default /var/tmp/nv-peer-mem-test-image).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-image}
tree=$work/root
xtask=$root/target/release/xtask
debs=$work/debs
. "$here/checks.sh"
. "$here/lib/guest-image.sh"

require_root_and_tools test-image.sh cargo dpkg-buildpackage dpkg-deb mmdebstrap mke2fs qemu-system-x86_64 unshare
mkdir -p "$work"
: >"$work/log"
# ci/test-fleet-image.sh and ci/test.sh read this run's figure, never an older one.
rm -f "$work/kernel-update-seconds"
start=$SECONDS
lap() { echo "   ($1: $((SECONDS - lap_start)) s)"; lap_start=$SECONDS; }
lap_start=$SECONDS

fixture=${NVPM_FIXTURES:-$root/../shared/fixtures}/mlnx-ofa_kernel-25.10.1.7.1.1.tar.gz
if [ ! -f "$fixture" ]; then
    # The stand-in ib_core is MLNX_OFED's own peer_mem.c: nothing honest to run without it.
    skip_suite "test-image: fixture $fixture not found (set NVPM_FIXTURES); nothing was tested"
fi
. "$here/kernels.sh" || exit 2
k1=$KVER_BOOKWORM k2=$KVER_BACKPORTS
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
upstream=${version/-/\~}

# A leftover mount under the tree would make rm -rf reach into the host.
if grep -q " $(realpath -m "$tree")/" /proc/self/mounts; then
    echo "test-image: something is mounted under $tree; unmount it first" >&2; exit 2
fi

echo "== the image and the packages"
check "kernel debs of $k1 and $k2 cached" sh -c "bash '$here/image.sh' kernel-debs '$k1' >'$work/kdebs1' && bash '$here/image.sh' kernel-debs '$k2' >'$work/kdebs2'"
tarball=$(bash "$here/image.sh" tarball "$k1" 2>>"$work/log")
check "Debian 12 system tarball with $k1 ($(basename "${tarball:-none}"))" test -f "$tarball"
[ -f "$tarball" ] || finish
lap "image"

# Our debs, as test-deb.sh builds them (binary only: the source package is
# test-deb.sh's business).
build_our_debs() {
    cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p xtask || return 1
    rm -rf "$work/src" && mkdir -p "$work/src" || return 1
    "$root/target/release/xtask" build-deb --out "$work/src" --distro debian12 || return 1
    (cd "$work/src" && tar xzf "nvidia-peer-memory_${upstream}.orig.tar.gz" &&
        cd "nvidia-peer-memory-$upstream" && dpkg-buildpackage -us -uc -b) || return 1
}
rm -rf "$debs" && mkdir -p "$debs"
check "build-deb + dpkg-buildpackage -b" build_our_debs
# debian12's Debian version (its version_suffix in packaging/distros.yaml).
debver=$(dpkg-parsechangelog -l "$work/src/nvidia-peer-memory-$upstream/debian/changelog" -S Version 2>>"$work/log")
our_debs=("$work/src/nvidia-peer-memory_${debver}_$(dpkg --print-architecture).deb" "$work/src/nvidia-peer-memory-dkms_${debver}_all.deb")
check "our debs built (${debver:-no version})" test -f "${our_debs[0]}" -a -f "${our_debs[1]}"
lap "our debs"

# The VM harness's modules for both kernels, as the modules they stand in for.
for k in "$k1" "$k2"; do
    check "vm-standins for $k" "$root/target/release/xtask" vm-standins --kernel "$k" --out "$work/standins/$k"
done
lap "stand-in modules"
# One NVIDIA source tree serves both kernels (as /usr/src/nvidia-<ver> does
# for a real driver): its nvidia_p2p_* CRCs must not depend on the kernel.
nv_crcs() { awk '$2 ~ /^nvidia_p2p_/ { print $1, $2 }' "$work/standins/$1/nvidia/Module.symvers" | sort; }
nv_crcs_equal() { [ -n "$(nv_crcs "$k1")" ] && [ "$(nv_crcs "$k1")" = "$(nv_crcs "$k2")" ]; }
check "nvidia_p2p_* CRCs are the same for $k1 and $k2" nv_crcs_equal
nv_ver=$(basename "$(bash "$here/fetch-nvidia-src.sh" 2>/dev/null)" | sed 's/.*-//')
nv_ver=${nv_ver:-535}

# make_deb NAME ARCH DESCRIPTION [Provides]: dpkg-deb --build of the staged
# tree $debs/NAME (depmod for every kernel it ships modules for).
make_deb() {
    local name=$1 arch=$2 desc=$3 provides=${4:-} dir=$debs/$1
    mkdir -p "$dir/DEBIAN"
    {
        echo "Package: $name"
        echo "Version: 0-test"
        echo "Architecture: $arch"
        echo "Maintainer: nv_peer_mem tests <tests@invalid>"
        echo "Section: kernel"
        echo "Priority: optional"
        [ -n "$provides" ] && echo "Provides: $provides"
        echo "Description: $desc"
        echo " Built and installed by ci/test-image.sh in its test image only."
    } >"$dir/DEBIAN/control"
    local k script
    for k in $(cd "$dir" && ls lib/modules 2>/dev/null); do
        # As kernel module packages do: refresh modules.dep once the kernel is there.
        for script in postinst postrm; do
            printf '#!/bin/sh\nset -e\nif [ -e /lib/modules/%s/modules.order ]; then depmod -a %s; fi\n' "$k" "$k" >"$dir/DEBIAN/$script"
            chmod 0755 "$dir/DEBIAN/$script"
        done
    done
    dpkg-deb --root-owner-group --build "$dir" "$debs/${name}_0-test_$arch.deb" >/dev/null
}
stage_standins() {
    local k=$1 s=$work/standins/$1 d
    d=$debs/nvpm-standin-mofed-$k
    rm -rf "$d"
    install -D -m 0644 "$s/ib_core.ko" "$d/lib/modules/$k/updates/ib_core.ko" &&
    # Where MLNX_OFED keeps one kernel's build (kmod/Makefile looks here first).
    install -D -m 0644 "$s/ofa_kernel/Module.symvers" "$d/usr/src/ofa_kernel/x86_64/$k/Module.symvers" &&
    install -D -m 0644 "$s/ofa_kernel/include/rdma/peer_mem.h" "$d/usr/src/ofa_kernel/x86_64/$k/include/rdma/peer_mem.h" &&
    make_deb "nvpm-standin-mofed-$k" amd64 "stand-in for MLNX_OFED's kernel modules for $k: MLNX_OFED's peer_mem.c with a test HCA driver as ib_core.ko" mlnx-ofed-kernel-modules || return 1
    d=$debs/nvpm-standin-nvidia-$k
    rm -rf "$d"
    install -D -m 0644 "$s/nvidia.ko" "$d/lib/modules/$k/updates/nvidia.ko" &&
    install -D -m 0644 "$s/nvidia_peermem.ko" "$d/lib/modules/$k/updates/nvidia_peermem.ko" &&
    make_deb "nvpm-standin-nvidia-$k" amd64 "stand-in for the NVIDIA driver's modules for $k: the P2P double as nvidia.ko, and a module named nvidia_peermem"
}
stage_nvidia_source() {
    local s=$work/standins/$k1 d=$debs/nvpm-standin-nvidia-source
    rm -rf "$d"
    install -D -m 0644 "$s/nvidia/nvidia/nv-p2p.h" "$d/usr/src/nvidia-$nv_ver/nvidia/nv-p2p.h" &&
    install -D -m 0644 "$s/nvidia/Module.symvers" "$d/usr/src/nvidia-$nv_ver/Module.symvers" &&
    make_deb nvpm-standin-nvidia-source all "stand-in for the NVIDIA driver's source tree: NVIDIA $nv_ver's nv-p2p.h and the double's Module.symvers"
}
check "stand-in debs for $k1 built" stage_standins "$k1"
# The second kernel's prerequisites come as DKMS packages (issue 23):
# MLNX_OFED and the NVIDIA driver as many sites have them, DKMS modules
# themselves, under the package and DKMS names the real ones use on Debian
# (docs/packaging.md "Prerequisites that DKMS builds"): mlnx-ofed-kernel-dkms
# registers mlnx-ofed-kernel, nvidia-kernel-dkms registers nvidia-current.
# Their sources are the doubles vm-standins built for $k1 (MLNX_OFED's own
# peer_mem.c with the test HCA driver as ib_core, the P2P double as
# nvidia), so DKMS builds for the new kernel what the prebuilt stand-ins
# hold for $k1. As MLNX_OFED's DKMS package does (its dkms.conf's
# POST_BUILD), the MLNX_OFED stand-in keeps each kernel's Module.symvers and
# peer_mem.h under /usr/src/ofa_kernel/<arch>/<kernel>, where nv_peer_mem's
# build looks, and, as MLNX_OFED's debian/rules does, it lists its DKMS
# module in /usr/share/dkms/modules_to_force_install/ ("mostly needed for
# modules that do not have a version number info, as DKMS will compare
# their srcversion field"): without it dkms declines to install an ib_core
# that matches the kernel's own by (absent) version, and the kernel's
# ib_core, without the peer memory API, is the one that loads.
# What differs, and why: their postinst only registers them
# (`dkms add`), where dh_dkms's would also build for the installed kernel
# ($k1 keeps the prebuilt stand-ins its boots use); the real MLNX_OFED
# copies to /usr/src/ofa_kernel-dkms/ and links /usr/src/ofa_kernel/ to it.
dkms_standin_version=99.0
copy_sources() { # FROM TO: the C sources, headers and Kbuild files of FROM
    mkdir -p "$2" && (cd "$1" && find . \( -name '*.c' -o -name '*.h' -o -name Kbuild \) -print0 | cpio -0pdm --quiet "$2")
}
# dkms_deb PACKAGE DKMS-NAME DESCRIPTION: the staged $debs/PACKAGE as a deb
# that registers DKMS-NAME on installation and removes it on removal.
dkms_deb() {
    local name=$1 module=$2 desc=$3 dir=$debs/$1
    mkdir -p "$dir/DEBIAN"
    printf 'Package: %s\nVersion: %s-test\nArchitecture: all\nMaintainer: nv_peer_mem tests <tests@invalid>\nSection: kernel\nPriority: optional\nDepends: dkms\nDescription: %s\n Built and installed by ci/test-image.sh in its test image only.\n' \
        "$name" "$dkms_standin_version" "$desc" >"$dir/DEBIAN/control"
    printf '#!/bin/sh\nset -e\n[ "$1" != configure ] || dkms add -m %s -v %s\n' "$module" "$dkms_standin_version" >"$dir/DEBIAN/postinst"
    printf '#!/bin/sh\ndkms remove -m %s -v %s --all >/dev/null 2>&1 || true\n' "$module" "$dkms_standin_version" >"$dir/DEBIAN/prerm"
    chmod 0755 "$dir/DEBIAN/postinst" "$dir/DEBIAN/prerm"
    dpkg-deb --root-owner-group --build "$dir" "$debs/${name}_${dkms_standin_version}-test_all.deb" >/dev/null
}
stage_dkms_standins() {
    # vm-standins' work tree for this --out (xtask/src/vm/standins.rs: the
    # absolute --out, slashes as underscores).
    local s=$work/standins/$k1 src doubles key
    key=$(realpath -ms "$s") && key=${key#/} && doubles=$root/target/test-image/$k1/${key//\//_}/doubles
    src=$debs/mlnx-ofed-kernel-dkms/usr/src/mlnx-ofed-kernel-$dkms_standin_version
    rm -rf "$debs/mlnx-ofed-kernel-dkms"
    copy_sources "$doubles/peer_core" "$src/peer_core" && copy_sources "$doubles/include" "$src/include" &&
        install -D -m 0644 "$s/ofa_kernel/include/rdma/peer_mem.h" "$src/ofa/include/rdma/peer_mem.h" || return 1
    cat >"$src/post-build.sh" <<'SH'
#!/bin/sh
# Keeps this kernel's build where modules built against MLNX_OFED look, as
# MLNX_OFED's DKMS POST_BUILD does: post-build.sh KERNEL ARCH.
set -e
dest=/usr/src/ofa_kernel/$2/$1
mkdir -p "$dest/include/rdma"
cp peer_core/Module.symvers "$dest/Module.symvers"
cp ofa/include/rdma/peer_mem.h "$dest/include/rdma/peer_mem.h"
SH
    chmod 0755 "$src/post-build.sh"
    # As MLNX_OFED's DKMS build runs its configure for each kernel: the
    # core's mofed_config.h (vm-standins' decisions for $k1) gets the one
    # switch that differs between the test's kernels redone for the kernel
    # being built, by LB_CHECK_SYMBOL_EXPORT's rule (mm_kobj in that
    # kernel's Module.symvers; docs/testing.md, "The core's backport and
    # its switches": the compiled tests agree on both kernels).
    cat >"$src/configure.sh" <<'SH'
#!/bin/sh
# configure.sh KERNEL_BUILD_DIR: HAVE_MM_KOBJ_EXPORTED for that kernel.
set -e
cfg=peer_core/mofed_config.h
if grep -qE '[[:space:]]mm_kobj[[:space:]]' "$1/Module.symvers"; then
	sed -i 's|^/\* #undef HAVE_MM_KOBJ_EXPORTED \*/$|#define HAVE_MM_KOBJ_EXPORTED 1|' $cfg
else
	sed -i 's|^#define HAVE_MM_KOBJ_EXPORTED 1$|/* #undef HAVE_MM_KOBJ_EXPORTED */|' $cfg
fi
grep -q 'HAVE_MM_KOBJ_EXPORTED' $cfg
SH
    chmod 0755 "$src/configure.sh"
    cat >"$src/dkms.conf" <<'CONF'
# ci/test-image.sh: stand-in for MLNX_OFED's mlnx-ofed-kernel DKMS module.
PACKAGE_NAME="mlnx-ofed-kernel"
PACKAGE_VERSION="99.0"
AUTOINSTALL="yes"
MAKE[0]="sh configure.sh ${kernel_source_dir} && make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build/peer_core NVPM_OFA_INC=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build/ofa/include NVPM_CORE_NAME=ib_core modules"
CLEAN="true"
BUILT_MODULE_NAME[0]="ib_core"
BUILT_MODULE_LOCATION[0]="peer_core/"
DEST_MODULE_LOCATION[0]="/updates/dkms"
POST_BUILD="post-build.sh ${kernelver} ${arch}"
CONF
    install -D -m 0644 /dev/null "$debs/mlnx-ofed-kernel-dkms/usr/share/dkms/modules_to_force_install/mlnx-ofed-kernel.force" &&
        echo mlnx-ofed-kernel >"$debs/mlnx-ofed-kernel-dkms/usr/share/dkms/modules_to_force_install/mlnx-ofed-kernel.force" || return 1
    dkms_deb mlnx-ofed-kernel-dkms mlnx-ofed-kernel "stand-in for MLNX_OFED's DKMS package: MLNX_OFED's peer_mem.c with a test HCA driver as ib_core" || return 1
    src=$debs/nvidia-kernel-dkms/usr/src/nvidia-current-$dkms_standin_version
    rm -rf "$debs/nvidia-kernel-dkms"
    copy_sources "$doubles/nv_p2p_double" "$src/nv_p2p_double" && copy_sources "$doubles/include" "$src/include" &&
        install -D -m 0644 "$s/nvidia/nvidia/nv-p2p.h" "$src/nvidia/nv-p2p.h" || return 1
    cat >"$src/dkms.conf" <<'CONF'
# ci/test-image.sh: stand-in for Debian's nvidia-current DKMS module.
PACKAGE_NAME="nvidia-current"
PACKAGE_VERSION="99.0"
AUTOINSTALL="yes"
MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build/nv_p2p_double NVPM_NV_INC=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build/nvidia NVPM_NV_NAME=nvidia modules"
CLEAN="true"
BUILT_MODULE_NAME[0]="nvidia"
BUILT_MODULE_LOCATION[0]="nv_p2p_double/"
DEST_MODULE_LOCATION[0]="/updates/dkms"
CONF
    dkms_deb nvidia-kernel-dkms nvidia-current "stand-in for Debian's nvidia-kernel-dkms: the P2P double as nvidia"
}
check "DKMS stand-in debs (mlnx-ofed-kernel-dkms, nvidia-kernel-dkms) built" stage_dkms_standins
# MLNX_OFED's DKMS package updated on the same kernel (issue 40 item 12,
# the next-boot-crc scenario): 99.1, the same sources built with
# vm-standins' abi_variant switch (struct peer_memory_client renamed, so
# ib_register_peer_memory_client gets another CRC, as an update that
# changes that struct does), installed with dh_dkms's own postinst
# (dkms/debhelper/postinst-dkms: dkms's common.postinst builds and
# installs it for the running kernel) while the old version's prerm
# removes 99.0's builds. Its file under /usr/src fires nv_peer_mem's file
# trigger.
dkms_standin_update=99.1
stage_dkms_standin_update() {
    local d=$work/mlnx-ofed-kernel-dkms-update src
    src=$d/usr/src/mlnx-ofed-kernel-$dkms_standin_update
    rm -rf "$d" && cp -a "$debs/mlnx-ofed-kernel-dkms" "$d" &&
        mv "$d/usr/src/mlnx-ofed-kernel-$dkms_standin_version" "$src" || return 1
    sed -i -e "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$dkms_standin_update\"/" \
        -e 's/ NVPM_CORE_NAME=ib_core modules"$/ NVPM_CORE_NAME=ib_core NVPM_CORE_ABI_CFLAGS=-Dpeer_memory_client=nvpm_peer_memory_client_abi_variant modules"/' "$src/dkms.conf" &&
        grep -q "^PACKAGE_VERSION=\"$dkms_standin_update\"$" "$src/dkms.conf" && grep -q 'NVPM_CORE_ABI_CFLAGS=' "$src/dkms.conf" || return 1
    sed -i "s/^Version: .*/Version: $dkms_standin_update-test/" "$d/DEBIAN/control" &&
        { echo '#!/bin/sh'; echo 'set -e'
          sed -e 's/#MODULE_NAME#/mlnx-ofed-kernel/' -e "s/#MODULE_VERSION#/$dkms_standin_update/" "$root/dkms/debhelper/postinst-dkms"; } >"$d/DEBIAN/postinst" &&
        printf '#!/bin/sh\ndkms remove -m mlnx-ofed-kernel -v %s --all >/dev/null 2>&1 || true\n' "$dkms_standin_update" >"$d/DEBIAN/prerm" &&
        chmod 0755 "$d/DEBIAN/postinst" "$d/DEBIAN/prerm" &&
        mkdir -p "$debs/update" &&
        dpkg-deb --root-owner-group --build "$d" "$debs/update/mlnx-ofed-kernel-dkms_${dkms_standin_update}-test_all.deb" >/dev/null
}
check "stand-in MLNX_OFED DKMS update ($dkms_standin_update-test: other ib_* CRCs, dh_dkms's postinst) built" stage_dkms_standin_update
check "stand-in NVIDIA source deb built" stage_nvidia_source
# An MLNX_OFED update for $k1 whose ib_* symbol versions differ (vm-standins'
# abi_variant/): the same package at a newer version, so the guest
# upgrades to it with dpkg -i as an admin updating MLNX_OFED would.
abi_crc() {  # abi_crc SYMVERS: ib_register_peer_memory_client's CRC in it
    awk '$2 == "ib_register_peer_memory_client" { print $1 }' "$1"
}
abi_crcs_differ() {
    local a b
    a=$(abi_crc "$work/standins/$k1/ofa_kernel/Module.symvers")
    b=$(abi_crc "$work/standins/$k1/abi_variant/Module.symvers")
    echo "ib_register_peer_memory_client: $a, the update's $b"
    [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]
}
check "the stand-in MLNX_OFED update has another ib_register_peer_memory_client CRC" abi_crcs_differ
stage_abi_update() {
    local name=nvpm-standin-mofed-$k1 d=$work/abi-update
    rm -rf "$d" && cp -a "$debs/$name" "$d" || return 1
    install -m 0644 "$work/standins/$k1/abi_variant/ib_core.ko" "$d/lib/modules/$k1/updates/ib_core.ko" &&
        install -m 0644 "$work/standins/$k1/abi_variant/Module.symvers" "$d/usr/src/ofa_kernel/x86_64/$k1/Module.symvers" &&
        sed -i 's/^Version: 0-test$/Version: 1-test/' "$d/DEBIAN/control" &&
        mkdir -p "$debs/update" &&
        dpkg-deb --root-owner-group --build "$d" "$debs/update/${name}_1-test_amd64.deb" >/dev/null
}
check "stand-in MLNX_OFED update deb (1-test) built" stage_abi_update
# MLNX_OFED's stand-in rebuilt for another kernel only (2-test: $k2's
# ib_core and Module.symvers, nothing for $k1), as a node's MLNX_OFED kmod
# package is after an update built for the other kernel: the
# next-boot-skip scenario (DKMS skips nv_peer_mem for $k1). Its scripts run
# depmod for every kernel that has a modules.order: dpkg calls the old
# version's `postrm upgrade` before it removes the old version's files that
# the new one lacks (Debian Policy 6.6, "Details of unpack phase of
# installation or upgrade", steps 5 and 6), so only the new postinst's
# depmod sees $k1 without ib_core, and our dkms.conf's rule reads
# modules.symbols.
stage_other_kernel_update() {
    local name=nvpm-standin-mofed-$k1 d=$work/other-kernel-update s
    rm -rf "$d" && mkdir -p "$d/DEBIAN" &&
        sed 's/^Version: 0-test$/Version: 2-test/' "$debs/$name/DEBIAN/control" >"$d/DEBIAN/control" &&
        install -D -m 0644 "$work/standins/$k2/ib_core.ko" "$d/lib/modules/$k2/updates/ib_core.ko" &&
        install -D -m 0644 "$work/standins/$k2/ofa_kernel/Module.symvers" "$d/usr/src/ofa_kernel/x86_64/$k2/Module.symvers" || return 1
    for s in postinst postrm; do
        printf '#!/bin/sh\nset -e\nfor k in %s %s; do if [ -e /lib/modules/$k/modules.order ]; then depmod -a $k; fi; done\n' "$k1" "$k2" >"$d/DEBIAN/$s"
        chmod 0755 "$d/DEBIAN/$s"
    done
    grep -qx 'Version: 2-test' "$d/DEBIAN/control" &&
        dpkg-deb --root-owner-group --build "$d" "$debs/update/${name}_2-test_amd64.deb" >/dev/null
}
check "stand-in MLNX_OFED update for $k2 only (2-test) built" stage_other_kernel_update

echo "== install into the image (chroot)"
check "unpack the system tarball" unpack_tree
lap "unpack"
mkdir -p "$tree/tmp/debs"
cp "$debs"/*.deb "${our_debs[@]}" "$tree/tmp/debs/" 2>>"$work/log"
apt_install() { in_image apt-get install -y -q --no-install-recommends "$@"; }
check "apt-get install the stand-ins for $k1 (MLNX_OFED, NVIDIA)" apt_install \
    "/tmp/debs/nvpm-standin-mofed-${k1}_0-test_amd64.deb" "/tmp/debs/nvpm-standin-nvidia-${k1}_0-test_amd64.deb" \
    /tmp/debs/nvpm-standin-nvidia-source_0-test_all.deb
# A DKMS MOK key (Secure Boot, issue 20 item 4): Debian's dkms signs what it
# builds with /var/lib/dkms/mok.key and mok.pub when they exist (and makes
# them with openssl when it can; the image has no openssl). A throwaway
# pair, made here, stands for an admin's enrolled key.
mok_cn="nv_peer_mem test-image throwaway MOK"
place_mok() {
    mkdir -p "$tree/var/lib/dkms" &&
        openssl req -new -x509 -nodes -days 2 -subj "/CN=$mok_cn/" -newkey rsa:2048 \
            -keyout "$tree/var/lib/dkms/mok.key" -outform DER -out "$tree/var/lib/dkms/mok.pub" >/dev/null 2>&1
}
check "a DKMS MOK key pair in the image (/var/lib/dkms/mok.key, mok.pub)" place_mok
first_install() {
    apt_install "/tmp/debs/$(basename "${our_debs[0]}")" "/tmp/debs/$(basename "${our_debs[1]}")" >"$work/first-install.out" 2>&1
    local rc=$?
    cat "$work/first-install.out"
    return $rc
}
check "apt-get install nvidia-peer-memory nvidia-peer-memory-dkms" first_install
# The packages' post-install says what the kernel hook says (whichever of
# the two dpkg configured last asks it): nv_peer_mem will load on $k1, and
# nothing about NCCL, as $k1 exports mm_kobj (docs/readiness.md).
check "the installation said nv_peer_mem will load on $k1, and no NCCL warning there (it exports mm_kobj)" sh -c \
    "grep -qF 'nv_peer_mem: GPUDirect RDMA: nv_peer_mem will load on $k1' '$work/first-install.out' && ! grep -q 'NCCL will not use' '$work/first-install.out'"
# signed_by_mok KVER: DKMS's nv_peer_mem for KVER carries the MOK's signature.
signed_by_mok() {
    local ko
    ko=$(ls "$tree/lib/modules/$1/updates/dkms/"nv_peer_mem.ko* 2>/dev/null | head -n 1)
    [ -n "$ko" ] && modinfo -F signer "$ko" | tee /dev/stderr | grep -qxF "$mok_cn"
}
check "DKMS signed nv_peer_mem for $k1 with the MOK key (modinfo -F signer)" signed_by_mok "$k1"
dkms_built_with_providers() {  # KVER: installed, and built against the stand-ins, not kmod/compat
    local k=$1 log
    in_image dkms status -m nv_peer_mem -k "$k" | grep -q ': installed' || return 1
    log=$tree/var/lib/dkms/nv_peer_mem/$upstream/$k/x86_64/log/make.log
    grep -q "using MLNX_OFED from /usr/src/ofa_kernel/x86_64/$k" "$log" &&
        grep -q "using NVIDIA P2P header /usr/src/nvidia-$nv_ver/" "$log"
}
check "DKMS built nv_peer_mem for $k1 against the stand-ins' ib_core and nvidia" dkms_built_with_providers "$k1"
lap "install"

# The test unit and what it needs beside the packages.
install_test_unit() {
    local t=$tree/usr/lib/nvpm-image-test k
    install -D -m 0755 "$root/kmod/tests/vm/image/run" "$t/run" &&
    install -D -m 0644 "$root/kmod/tests/vm/guest/scenarios.sh" "$t/scenarios.sh" &&
    install -D -m 0644 "$root/kmod/tests/vm/image/nvpm-image-test.service" "$tree/etc/systemd/system/nvpm-image-test.service" || return 1
    # The guest switches MLNX_OFED stand-ins for $k1 with dpkg -i.
    install -D -m 0644 "$debs/nvpm-standin-mofed-${k1}_0-test_amd64.deb" "$t/debs/nvpm-standin-mofed-${k1}_0-test_amd64.deb" &&
    install -D -m 0644 "$debs/update/nvpm-standin-mofed-${k1}_1-test_amd64.deb" "$t/debs/nvpm-standin-mofed-${k1}_1-test_amd64.deb" || return 1
    for k in "$k1" "$k2"; do
        install -D -m 0644 "$work/standins/$k/nvpm_scenarios.ko" "$t/$k/nvpm_scenarios.ko" &&
        install -D -m 0644 "$work/standins/$k/nv_peer_mem_no_persistent.ko" "$t/$k/nv_peer_mem_no_persistent.ko" &&
        install -D -m 0644 "$work/standins/$k/mofed_config.h" "$t/$k/mofed_config.h" || return 1
        # NCCL's own access test (xtask/src/vm/nccl_probe.rs), where built.
        if [ -f "$work/standins/$k/nccl_gdr_files" ]; then
            install -D -m 0755 "$work/standins/$k/nccl_gdr_files" "$t/$k/nccl_gdr_files" &&
            install -D -m 0644 "$work/standins/$k/nccl_gdr_files.list" "$t/$k/nccl_gdr_files.list" || return 1
        fi
    done
    # The next-boot scenario's MLNX_OFED update for $k2 (other ib_* CRCs).
    install -D -m 0644 "$work/standins/$k2/abi_variant/ib_core.ko" "$t/$k2/ib_core_abi_variant.ko" &&
    install -D -m 0644 "$work/standins/$k2/abi_variant/Module.symvers" "$t/$k2/Module.symvers.abi_variant" || return 1
    # ... and the update of MLNX_OFED's DKMS package the next boot installs.
    install -D -m 0644 "$debs/update/mlnx-ofed-kernel-dkms_${dkms_standin_update}-test_all.deb" \
        "$t/debs/mlnx-ofed-kernel-dkms_${dkms_standin_update}-test_all.deb" || return 1
    mkdir -p "$tree/etc/systemd/system/multi-user.target.wants"
    ln -sf /etc/systemd/system/nvpm-image-test.service "$tree/etc/systemd/system/multi-user.target.wants/"
    # The console is the test's channel: no login prompt on it.
    ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
    echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$tree/etc/fstab"
    echo nvpm-image-test >"$tree/etc/hostname"
    grep -qx 'ONBOOT=yes' "$tree/etc/infiniband/nv_peer_mem.conf"
}
check "test unit installed; the package's conf says ONBOOT=yes" install_test_unit

# The disk: the tree as an ext4 image (mke2fs -d: no loop mount), with
# 512 MB for the guest's own writes (make_disk, ci/lib/guest-image.sh).
# The booted image runs the harness's scenarios with a tenth of the race,
# benchmark and load-cycle iterations (kmod/tests/vm/guest/scenarios.sh
# reads nvpm.iter_divisor): the same module source runs the full counts in
# `cargo xtask test-vm`; here the point is DKMS's build in a real system,
# and TCG time is CI's budget.
ITER_DIVISOR=10
# boot KVER PHASE CHECKS... [--vm-scenarios]: boots the disk with the
# image's own kernel and initrd; each guest check becomes one of ours
# (--vm-scenarios: then the VM harness's scenarios, the list test-vm expects).
# $append: more kernel command line for this boot.
boot() {
    local k=$1 phase=$2; shift 2
    local checks=() flags=() a
    for a in "$@"; do
        case "$a" in --*) flags+=("$a") ;; *) checks+=("$a") ;; esac
    done
    boot_counted "$k" "$phase" --kernel "$work/vmlinuz-$k" --initrd "$work/initrd.img-$k" --disk "$work/disk.img" \
        --append "nvpm_phase=$phase nvpm.iter_divisor=$ITER_DIVISOR${append:+ $append}" --expect "$(IFS=,; echo "${checks[*]}")" "${flags[@]}" ||
        return
    # What the guest kept of `nv_peer_mem-service status` and `systemctl
    # status nv_peer_mem` (/var/log/nvpm-image-test), for the record.
    rm -rf "$work/status-$phase" && mkdir -p "$work/status-$phase" &&
        debugfs -R "rdump /var/log/nvpm-image-test $work/status-$phase" "$work/disk.img" >>"$work/log" 2>&1
}
kernel_from_image() {  # KVER: the image's vmlinuz and initrd, copied out
    cp "$tree/boot/vmlinuz-$1" "$work/vmlinuz-$1" && cp "$tree/boot/initrd.img-$1" "$work/initrd.img-$1"
}

echo "== boot $k1"
check "disk image (mke2fs -d)" make_disk 512
check "kernel and initrd of $k1 from the image's /boot" kernel_from_image "$k1"
lap "disk"
boot "$k1" onboot service_loaded_module journal_says_loaded loaded_is_dkms_build loaded_is_signed providers_are_standins \
    status_loaded status_diagnoses_loaded systemctl_status_loaded readiness_booted timer_writes_files service_stop --vm-scenarios
lap "boot onboot"
boot "$k1" onboot-no not_loaded_onboot_no journal_says_onboot_no status_onboot_no systemctl_status_onboot_no \
    inbox_ib_core_loaded inbox_start_fails status_inbox systemctl_status_inbox no_splat_inbox \
    abi_update_rebuilds abi_update_loads crc_start_fails status_crc systemctl_status_crc no_splat_crc
lap "boot onboot-no"
boot "$k1" peermem peermem_loaded refused_beside_peermem journal_names_fix status_names_peermem \
    systemctl_status_peermem dkms_remove status_no_module
lap "boot peermem"

echo "== $k1 with MLNX_OFED built for another kernel only: DKMS skips nv_peer_mem; the saved verdict against the boot"
# Issue 26 item 3, the DKMS skip: MLNX_OFED's kmod package updated to a
# build for $k2 only (the stand-in's 2-test), so $k1 has no peer memory
# API. DKMS's build of nv_peer_mem for $k1 is removed and asked for again:
# our dkms.conf skips it with its one line, the kernel hook warns, and
# --next-boot (the /vmlinuz link still names $k1) says LOST with DKMS's
# reason; the next boot must show it. In the image's chroot, as the kernel
# install below: dpkg, depmod and DKMS run natively, the verdict reads
# files only, and the boot after it is the proof.
cp "$debs/update/nvpm-standin-mofed-${k1}_2-test_amd64.deb" "$tree/tmp/debs/"
check "dpkg -i MLNX_OFED's stand-in 2-test: built for $k2 only, $k1's ib_core and Module.symvers gone" \
    in_image dpkg -i "/tmp/debs/nvpm-standin-mofed-${k1}_2-test_amd64.deb"
no_ib_core_for() { ! grep -q 'ib_register_peer_memory_client' "$tree/lib/modules/$1/modules.symbols"; }
check "$k1's modules.symbols (the new postinst's depmod) has no ib_register_peer_memory_client" no_ib_core_for "$k1"
# dkms remove of a module's last kernel drops it from DKMS's tree: the
# registration is made again (dkms add), as the -dkms package's postinst
# made it, before DKMS is asked to build.
dkms_skips() {
    in_image dkms remove "nv_peer_mem/$upstream" -k "$k1" >"$work/dkms-skip.out" 2>&1 &&
        in_image dkms add "nv_peer_mem/$upstream" >>"$work/dkms-skip.out" 2>&1 || { cat "$work/dkms-skip.out"; return 1; }
    in_image dkms autoinstall -k "$k1" >>"$work/dkms-skip.out" 2>&1
    cat "$work/dkms-skip.out"
    grep -qF "nv_peer_mem: not built for kernel $k1: it lacks MLNX_OFED (no ib_register_peer_memory_client)" "$work/dkms-skip.out" &&
        [ -z "$(in_image dkms status -m nv_peer_mem -k "$k1" | grep ": installed")" ] &&
        ! ls "$tree/lib/modules/$k1/updates/dkms/"nv_peer_mem.ko* 2>/dev/null
}
check "dkms remove, add and autoinstall -k $k1: nv_peer_mem skipped, it lacks MLNX_OFED; no module for $k1" dkms_skips
hook_warns_skip() {
    in_image /etc/kernel/postinst.d/zz-nv-peer-mem "$k1" >"$work/hook-skip.out" 2>&1
    local rc=$?
    cat "$work/hook-skip.out"
    [ $rc = 0 ] && grep -qF "fix: install what $k1 lacks (MLNX_OFED (no ib_register_peer_memory_client)), then run: dkms autoinstall -k $k1" "$work/hook-skip.out"
}
check "the kernel hook (zz-nv-peer-mem $k1) warns, naming what DKMS found missing, and exits 0" hook_warns_skip
# save_prediction WANT-EXIT KVER PATTERN: --next-boot in the image, saved
# where the guest's outcome_matches reads it (kmod/tests/vm/image/run).
save_prediction() {
    local d=$tree/var/log/nvpm-image-test rc=0
    mkdir -p "$d"
    in_image gpudirect-rdma-check --next-boot >"$d/prediction" 2>&1 || rc=$?
    echo "$rc" >"$d/prediction.rc"
    cat "$d/prediction"
    [ "$rc" = "$1" ] && grep -q "^NEXT BOOT [A-Z]*: .* on $2\$" "$d/prediction" && grep -qF -- "$3" "$d/prediction"
}
check "gpudirect-rdma-check --next-boot: $k1, NEXT BOOT LOST (exit 4), DKMS skips it for want of MLNX_OFED; saved for the boot" \
    save_prediction 4 "$k1" "its dkms.conf skips that kernel: it lacks MLNX_OFED (no ib_register_peer_memory_client)"
check "disk image (mke2fs -d)" make_disk 512
lap "DKMS skip"
boot "$k1" next-boot-skip outcome_matches_skip status_skip_after_boot kernel_verdict_skip
lap "boot next-boot-skip"
# MLNX_OFED's stand-in for $k1 back (0-test), and DKMS's build for $k1
# again: what the kernel update below starts from.
skip_undone() {
    in_image dpkg -i "/tmp/debs/nvpm-standin-mofed-${k1}_0-test_amd64.deb" >"$work/skip-undo.out" 2>&1 &&
        in_image dkms autoinstall -k "$k1" >>"$work/skip-undo.out" 2>&1
    local rc=$?
    cat "$work/skip-undo.out"
    [ $rc = 0 ] && [ ! -e "$tree/lib/modules/$k2/updates/ib_core.ko" ] && dkms_built_with_providers "$k1"
}
check "MLNX_OFED's stand-in for $k1 back (dpkg -i 0-test); dkms autoinstall -k $k1 builds nv_peer_mem against it" skip_undone
rm -f "$tree/tmp/debs/nvpm-standin-mofed-${k1}_2-test_amd64.deb"
lap "skip undone"

echo "== a second kernel: $k2"
# What arrives with a kernel upgrade: the MLNX_OFED and NVIDIA modules for
# the new kernel, then the kernel and its headers, whose hooks run DKMS.
mapfile -t k2debs <"$work/kdebs2"
for d in "${k2debs[@]}"; do cp "$d" "$tree/tmp/debs/"; done
install_dkms_standins() {
    apt_install "/tmp/debs/mlnx-ofed-kernel-dkms_${dkms_standin_version}-test_all.deb" \
        "/tmp/debs/nvidia-kernel-dkms_${dkms_standin_version}-test_all.deb" || return 1
    in_image dkms status >"$work/dkms-status.txt" 2>&1
    cat "$work/dkms-status.txt"
    grep -q "^mlnx-ofed-kernel/$dkms_standin_version: added" "$work/dkms-status.txt" &&
        grep -q "^nvidia-current/$dkms_standin_version: added" "$work/dkms-status.txt"
}
check "apt-get install the DKMS stand-ins: mlnx-ofed-kernel and nvidia-current registered, built for no kernel yet" \
    install_dkms_standins
# As unattended-upgrades installs a kernel: apt, C locale, no questions;
# the image's and the headers' postinst hooks run dkms autoinstall, which
# must build both stand-ins and then nv_peer_mem for the new kernel.
# Timed (to $work/kernel-update-seconds): ci/test-fleet-image.sh prints it
# beside the prebuilt route's time for the same step.
kernel_upgrade() {
    rm -f "$work/kernel-update-seconds"
    local t0=$SECONDS
    in_image env LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        $(for d in "${k2debs[@]}"; do echo "/tmp/debs/$(basename "$d")"; done) >"$work/kernel-upgrade.out" 2>&1 ||
        { cat "$work/kernel-upgrade.out"; return 1; }
    cat "$work/kernel-upgrade.out"
    echo $((SECONDS - t0)) >"$work/kernel-update-seconds"
    echo "kernel update to a loadable nv_peer_mem (DKMS route): $((SECONDS - t0)) s"
}
check "LC_ALL=C apt-get install linux-image and linux-headers $k2 (the kernel's hooks run DKMS)" kernel_upgrade
# installed_for KVER MODULE...: dkms says each is installed for KVER.
installed_for() {
    local k=$1 m; shift
    for m in "$@"; do in_image dkms status -m "$m" -k "$k" | grep -q ': installed' || { in_image dkms status; return 1; }; done
}
check "the hook installed mlnx-ofed-kernel, nvidia-current and nv_peer_mem for $k2" \
    installed_for "$k2" mlnx-ofed-kernel nvidia-current nv_peer_mem
# Our hook (/etc/kernel/postinst.d/zz-nv-peer-mem) runs after dkms's and
# reads what DKMS built (docs/next-boot.md, "The kernel hook").
check "the kernel's installation said nv_peer_mem will load on $k2 (zz-nv-peer-mem, after DKMS's hook)" \
    grep -q "nv_peer_mem: GPUDirect RDMA: nv_peer_mem will load on $k2" "$work/kernel-upgrade.out"
# $k2 (bookworm-backports' 6.12) exports no mm_kobj: the same run says
# NCCL will see nv_peer_mem there all the same, since the module makes
# /sys/kernel/mm/memory_peers itself (docs/contracts.md).
check "and that NCCL will see nv_peer_mem on $k2 (no mm_kobj: the module makes memory_peers)" \
    grep -q "nv_peer_mem: NCCL will see nv_peer_mem on $k2: the kernel exports no mm_kobj" "$work/kernel-upgrade.out"
# built_after KVER: nv_peer_mem's build log for KVER is newer than both
# prerequisites' (BUILD_DEPENDS ordered the autoinstall).
built_after() {
    local k=$1 ours=$tree/var/lib/dkms/nv_peer_mem/$upstream/$1/x86_64/log/make.log m
    for m in mlnx-ofed-kernel nvidia-current; do
        [ "$ours" -nt "$tree/var/lib/dkms/$m/$dkms_standin_version/$k/x86_64/log/make.log" ] || { ls -l --time-style=full-iso "$ours" "$tree/var/lib/dkms/$m/$dkms_standin_version/$k/x86_64/log/make.log"; return 1; }
    done
}
check "nv_peer_mem was built for $k2 after both prerequisites" built_after "$k2"
# modules.dep for $k2 names DKMS's ib_core and nvidia, not the kernel's own
# ib_core (what modprobe loads at boot).
dkms_providers_in_modules_dep() {
    local dep=$tree/lib/modules/$1/modules.dep
    grep -Eq '^updates/dkms/ib_core\.ko(\.xz)?:' "$dep" && grep -Eq '^updates/dkms/nvidia\.ko(\.xz)?:' "$dep" ||
        { grep -E '(^|/)(ib_core|nvidia)\.ko' "$dep" | cut -d: -f1; return 1; }
}
check "$k2's modules.dep names DKMS's ib_core and nvidia (updates/dkms/)" dkms_providers_in_modules_dep "$k2"
check "DKMS built nv_peer_mem for $k2 (kernel hook) against the DKMS-built stand-ins" dkms_built_with_providers "$k2"
check "DKMS signed nv_peer_mem for $k2 with the MOK key" signed_by_mok "$k2"
lap "install $k2"

echo "== -dkms and the prebuilt module package replace each other, both ways (dpkg)"
# Issue 21 item 1: nvidia-peer-memory-modules-<release> conflicts with and
# replaces nvidia-peer-memory-dkms (docs/fleet.md); real dpkg, through apt,
# swaps them in this image and back, the service package and its
# configuration staying. The prebuilt package is build-modules' for $k2,
# built on this host against the doubles the DKMS stand-ins build here
# (same sources, so the same symbol versions), and depends on the
# mlnx-ofed-kernel-dkms the image has.
mkdir -p "$work/ofa/x86_64" && ln -sfn "$work/standins/$k2/ofa_kernel" "$work/ofa/x86_64/$k2"
build_prebuilt() {
    rm -rf "$work/prebuilt" && mkdir -p "$work/prebuilt" &&
        "$root/target/release/xtask" build-modules --kernel "$k2" --out "$work/prebuilt" --no-metapackage \
            --ofed-root "$work/ofa" --nvidia-src "$work/standins/$k2/nvidia" \
            --ofed-package "mlnx-ofed-kernel-dkms=${dkms_standin_version}-test" &&
        cp "$work/prebuilt/nvidia-peer-memory-modules-${k2}_"*.deb "$tree/tmp/debs/"
}
check "build-modules for $k2 (the prebuilt package, depending on mlnx-ofed-kernel-dkms ${dkms_standin_version}-test)" build_prebuilt
prebuilt_deb=$(cd "$work/prebuilt" 2>/dev/null && ls "nvidia-peer-memory-modules-${k2}_"*.deb 2>/dev/null | head -n 1)
dpkg_state() { in_image dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | tr -d ' '; }
# states_are PACKAGE=ii|gone...: installed, or not installed (removed,
# config files only, or never).
states_are() {
    local a p have
    for a in "$@"; do
        p=${a%%=*} have=$(dpkg_state "${a%%=*}")
        case "${a#*=}" in ii) [ "$have" = ii ] ;; *) [ "$have" != ii ] ;; esac || { echo "$p: ${have:-unknown}"; return 1; }
    done
}
# swap_to OUT PACKAGE-FILE REMOVED: apt-get installs PACKAGE-FILE, and dpkg
# removes REMOVED on the way (the Conflicts), as its output says.
swap_to() {
    in_image env LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" >"$work/$1" 2>&1
    local rc=$?
    cat "$work/$1"
    [ $rc = 0 ] && grep -q "^Removing $3 " "$work/$1"
}
check "apt-get install the prebuilt package: dpkg removes nvidia-peer-memory-dkms, installs nvidia-peer-memory-modules-$k2" \
    swap_to to-prebuilt.out "/tmp/debs/$prebuilt_deb" nvidia-peer-memory-dkms
# The prebuilt package's post-install asks the kernel hook: it will load
# on $k2, and NCCL will see it there ($k2 exports no mm_kobj; the module
# makes memory_peers itself).
check "the prebuilt package's installation said it will load on $k2 and that NCCL will see it there (no mm_kobj)" sh -c \
    "grep -qF 'nv_peer_mem: GPUDirect RDMA: nv_peer_mem will load on $k2' '$work/to-prebuilt.out' && grep -qF 'nv_peer_mem: NCCL will see nv_peer_mem on $k2: the kernel exports no mm_kobj' '$work/to-prebuilt.out'"
check "states: -modules-$k2 installed, -dkms not, the service package still installed" \
    states_are "nvidia-peer-memory-modules-$k2=ii" nvidia-peer-memory-dkms=gone nvidia-peer-memory=ii
no_dkms_builds() {
    local k
    for k in "$k1" "$k2"; do ! ls "$tree/lib/modules/$k/updates/dkms/"nv_peer_mem.ko* 2>/dev/null || return 1; done
    [ -z "$(in_image dkms status -m nv_peer_mem)" ] && [ ! -e "$tree/usr/src/nv_peer_mem-$upstream" ]
}
check "DKMS's builds, its registration and its source are gone (-dkms's prerm: dkms remove)" no_dkms_builds
check "the configuration stayed: $tree/etc/infiniband/nv_peer_mem.conf says ONBOOT=yes" grep -qx 'ONBOOT=yes' "$tree/etc/infiniband/nv_peer_mem.conf"
modules_dep_names() { grep -Eq "^$2\.ko(\.xz)?:" "$tree/lib/modules/$1/modules.dep" || { grep -E 'nv_peer_mem' "$tree/lib/modules/$1/modules.dep"; return 1; }; }
check "$k2's modules.dep resolves nv_peer_mem to the package's updates/nv_peer_mem.ko" modules_dep_names "$k2" updates/nv_peer_mem
# next_boot_says KVER EXIT PATTERN: the image's gpudirect-rdma-check
# --kernel KVER (files only: the verdict needs no booted kernel) exits EXIT
# and says PATTERN.
next_boot_says() {
    local out rc
    out=$(in_image gpudirect-rdma-check --kernel "$1" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = "$2" ] && echo "$out" | grep -qF -- "$3"
}
check "gpudirect-rdma-check --kernel $k2: NEXT BOOT OK, from the prebuilt package" \
    next_boot_says "$k2" 0 "updates/nv_peer_mem.ko, from the prebuilt package nvidia-peer-memory-modules-$k2"
check "gpudirect-rdma-check --kernel $k1: NEXT BOOT LOST (exit 4): the switch took $k1's DKMS build, and no package has one" \
    next_boot_says "$k1" 4 "no nv_peer_mem for $k1: modprobe finds none"
check "apt-get install nvidia-peer-memory-dkms: dpkg removes the prebuilt package, DKMS builds again" \
    swap_to to-dkms.out "/tmp/debs/$(basename "${our_debs[1]}")" "nvidia-peer-memory-modules-$k2"
back_on_dkms() {
    states_are nvidia-peer-memory-dkms=ii nvidia-peer-memory=ii "nvidia-peer-memory-modules-$k2=gone" &&
        [ ! -e "$tree/lib/modules/$k2/updates/nv_peer_mem.ko" ]
}
check "states: -dkms and the service installed, -modules-$k2 not; its module file gone" back_on_dkms
check "DKMS installed nv_peer_mem for $k2 again" installed_for "$k2" nv_peer_mem
check "-dkms's post-install said, once DKMS had built it, it will load on $k2 and NCCL will see it there (no mm_kobj)" sh -c \
    "grep -qF 'nv_peer_mem: GPUDirect RDMA: nv_peer_mem will load on $k2' '$work/to-dkms.out' && grep -qF 'nv_peer_mem: NCCL will see nv_peer_mem on $k2: the kernel exports no mm_kobj' '$work/to-dkms.out'"
check "$k2's modules.dep resolves nv_peer_mem to DKMS's build again" modules_dep_names "$k2" updates/dkms/nv_peer_mem
check "DKMS's new build for $k2 is signed with the MOK key" signed_by_mok "$k2"
rm -rf "$tree/tmp/debs"
lap "switch -dkms / prebuilt"
# Issue 26 item 3: the verdict for the kernel the image boots next, saved
# where the guest's outcome_matches reads it (kmod/tests/vm/image/run).
# --next-boot in the image's chroot: it reads files only.
check "gpudirect-rdma-check --next-boot in the image: $k2 (its /vmlinuz link), NEXT BOOT OK; saved for the boot" \
    save_prediction 0 "$k2" "NEXT BOOT OK: nv_peer_mem will load on $k2"
check "disk image (mke2fs -d)" make_disk 512
check "kernel and initrd of $k2 from the image's /boot" kernel_from_image "$k2"
lap "disk"
boot "$k2" newkernel service_loaded_module outcome_matches_update loaded_is_dkms_build providers_are_dkms_builds \
    crc_update_installed hook_warns_crc next_boot_predicts_crc
lap "boot newkernel"

echo "== reboot $k2 after an MLNX_OFED update nv_peer_mem was not rebuilt for: the saved verdict against the boot; then a packaged update, which rebuilds it"
# Issue 26 item 3: the verdict the last boot saved (NEXT BOOT LOST) is what
# this boot shows. loglevel=3: the expected load failure's kernel lines
# stay off the console, the guest checks the kernel log instead (quiet_end).
append=loglevel=3 boot "$k2" next-boot-crc outcome_matches_crc status_crc_after_boot no_splat_crc_boot \
    provider_update_rebuilds provider_update_verdict provider_update_loads provider_update_crc provider_update_dkms \
    purge purge_unloaded purge_leaves_nothing modprobe_fails_after_purge
lap "boot next-boot-crc"

echo "   (test-image: $((SECONDS - start)) s in all)"
finish
