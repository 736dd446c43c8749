#!/usr/bin/env bash
# Stand-ins for the two kernel-side prerequisites of a loadable nv_peer_mem,
# for the packaging tests (ci/test-deb.sh on the host, ci/test-suites.sh
# inside a chroot): real modules that export the symbols dkms.conf looks
# for, never loaded, in either of the two shapes the real prerequisites
# come in.
#   prereq-standin.sh install KVER   prebuilt: build and place both for KVER
#   prereq-standin.sh remove KVER    undo that (only what install placed)
#   prereq-standin.sh dkms-add       DKMS: register both with DKMS, which
#                                    builds them for each kernel (autoinstall)
#   prereq-standin.sh dkms-remove    undo that (only what dkms-add registered)
#   prereq-standin.sh remove-all     undo every install (any kernel) and
#                                    dkms-add this script's markers show,
#                                    whichever run placed them: the
#                                    leftovers of a run that was stopped
#                                    before its own cleanup (a killed test,
#                                    a machine snapshot taken mid-run)
# Prebuilt (as MLNX_OFED's kmod packages and a .run-installed driver):
# - NVIDIA: nvpm_standin_nvidia.ko exports nvidia_p2p_get_pages and goes to
#   /lib/modules/KVER/extra/nvpm-standin/, so depmod lists the symbol in
#   modules.symbols as it does for the driver from DKMS, .run or kmod packages.
# - MLNX_OFED: the Module.symvers line of nvpm_standin_mofed.ko, which
#   exports ib_register_peer_memory_client, in
#   /usr/src/ofa_kernel/<arch>/KVER/Module.symvers, the per-kernel copy
#   MLNX_OFED's DKMS package keeps (no headers: the module build still uses
#   kmod/compat's PeerDirect description).
# DKMS (as MLNX_OFED's mlnx-ofed-kernel-dkms and Debian's nvidia-kernel-dkms):
# the DKMS module names the real packages register on Debian,
# mlnx-ofed-kernel (MLNX_OFED 25.10 debian/rules renders its dkms.conf with
# PACKAGE_NAME=mlnx-ofed-kernel) and nvidia-current (Debian 12's
# nvidia-kernel-dkms dkms.conf), with AUTOINSTALL=yes as both have, so that
# a kernel install's `dkms autoinstall` builds them for the new kernel.
# What differs from the real ones, and why it does not matter here: they
# build one module each (nvpm_standin_mofed.ko, nvpm_standin_nvidia.ko,
# exporting the one symbol dkms.conf looks for) instead of ib_core.ko and
# nvidia-current.ko, so that they never shadow the kernel's own ib_core;
# and no MLNX_OFED headers or Module.symvers (POST_BUILD) are kept per
# kernel, as with the prebuilt shape above. dkms installs them to
# /lib/modules/KVER/updates/dkms/ and runs depmod, as for the real ones.
# Needs the kernel's build tree (/lib/modules/KVER/build), gcc and make;
# dkms-add needs dkms.
set -euo pipefail
usage="usage: prereq-standin.sh install|remove KVER, or prereq-standin.sh dkms-add|dkms-remove|remove-all"
action=${1:-}
dkms_version=99.0
# DKMS module name -> the stand-in module it builds (write_sources).
declare -A dkms_standins=([mlnx-ofed-kernel]=mofed [nvidia-current]=nvidia)

# write_sources DIR MODULE...: the C source of each stand-in module (mofed,
# nvidia) and a Kbuild that builds them into DIR.
write_sources() {
    local dir=$1; shift
    local objs=() which
    for which in "$@"; do
        case $which in
        nvidia) cat >"$dir/nvpm_standin_nvidia.c" <<'C'
// Test stand-in: exports the NVIDIA P2P entry point nv_peer_mem needs.
#include <linux/module.h>
int nvidia_p2p_get_pages(void) { return -EINVAL; }
EXPORT_SYMBOL(nvidia_p2p_get_pages);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for the NVIDIA driver; never loaded");
C
        ;;
        mofed) cat >"$dir/nvpm_standin_mofed.c" <<'C'
// Test stand-in: exports MLNX_OFED's peer memory registration entry point.
#include <linux/module.h>
int ib_register_peer_memory_client(void) { return -EINVAL; }
EXPORT_SYMBOL(ib_register_peer_memory_client);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("nv_peer_mem CI stand-in for MLNX_OFED's ib_core; never loaded");
C
        ;;
        esac
        objs+=("nvpm_standin_$which.o")
    done
    echo "obj-m := ${objs[*]}" >"$dir/Kbuild"
}

case "$action" in
install|remove)
    [ $# = 2 ] || { echo "$usage" >&2; exit 2; }
    kver=$2
    modules=/lib/modules/$kver
    ofa=/usr/src/ofa_kernel/$(uname -m)/$kver
    marker=$modules/extra/nvpm-standin/placed-by-prereq-standin
    if [ "$action" = install ]; then
        [ -f "$modules/build/Makefile" ] || { echo "prereq-standin.sh: no build tree for $kver at $modules/build" >&2; exit 2; }
        [ ! -e "$ofa" ] || { echo "prereq-standin.sh: $ofa exists (a real MLNX_OFED?); not touching it" >&2; exit 2; }
        src=$(mktemp -d)
        trap 'rm -rf "$src"' EXIT
        write_sources "$src" nvidia mofed
        make -s -C "$modules/build" M="$src" modules >&2
        mkdir -p "$modules/extra/nvpm-standin" "$ofa"
        cp "$src/nvpm_standin_nvidia.ko" "$modules/extra/nvpm-standin/"
        touch "$marker"
        grep -P '\tib_register_peer_memory_client\t' "$src/Module.symvers" >"$ofa/Module.symvers"
        depmod -a "$kver"
    elif [ -f "$marker" ]; then
        rm -rf "$modules/extra/nvpm-standin" "$ofa"
        rmdir --ignore-fail-on-non-empty "$modules/extra" "$(dirname "$ofa")" /usr/src/ofa_kernel 2>/dev/null || true
        depmod -a "$kver"
    fi
    ;;
dkms-add)
    [ $# = 1 ] || { echo "$usage" >&2; exit 2; }
    for name in "${!dkms_standins[@]}"; do
        [ ! -e "/var/lib/dkms/$name" ] || { echo "prereq-standin.sh: /var/lib/dkms/$name exists (a real $name?); not touching it" >&2; exit 2; }
    done
    for name in "${!dkms_standins[@]}"; do
        which=${dkms_standins[$name]}
        src=/usr/src/$name-$dkms_version
        mkdir -p "$src"
        write_sources "$src" "$which"
        touch "$src/placed-by-prereq-standin"
        cat >"$src/dkms.conf" <<CONF
# ci/prereq-standin.sh: stand-in for the DKMS module $name (never loaded).
PACKAGE_NAME="$name"
PACKAGE_VERSION="$dkms_version"
AUTOINSTALL="yes"
MAKE[0]="make -C \${kernel_source_dir} M=\${dkms_tree}/\${PACKAGE_NAME}/\${PACKAGE_VERSION}/build modules"
CLEAN="make -C \${kernel_source_dir} M=\${dkms_tree}/\${PACKAGE_NAME}/\${PACKAGE_VERSION}/build clean"
BUILT_MODULE_NAME[0]="nvpm_standin_$which"
DEST_MODULE_LOCATION[0]="/updates/dkms"
CONF
        dkms add -m "$name" -v "$dkms_version" >&2
    done
    ;;
dkms-remove)
    [ $# = 1 ] || { echo "$usage" >&2; exit 2; }
    for name in "${!dkms_standins[@]}"; do
        src=/usr/src/$name-$dkms_version
        [ -f "$src/placed-by-prereq-standin" ] || continue
        dkms remove -m "$name" -v "$dkms_version" --all >&2 || true
        rm -rf "$src" "/var/lib/dkms/$name"
    done
    ;;
remove-all)
    [ $# = 1 ] || { echo "$usage" >&2; exit 2; }
    for marker in /lib/modules/*/extra/nvpm-standin/placed-by-prereq-standin; do
        [ -f "$marker" ] || continue
        kver=${marker#/lib/modules/}
        bash "$0" remove "${kver%%/*}"
    done
    bash "$0" dkms-remove
    ;;
*) echo "$usage" >&2; exit 2 ;;
esac
