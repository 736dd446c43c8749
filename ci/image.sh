#!/usr/bin/env bash
# The bootable Debian 12 system ci/test-image.sh installs our packages into
# and boots (issue 15 item 1): made with mmdebstrap from Debian's archive,
# systemd as init, Debian's bookworm kernel with its headers, DKMS and the
# toolchain the -dkms deb needs; cached as a tarball.
#
#   ci/image.sh kernel-debs KVER   ensure the kernel's image and header debs
#                                  in the kernels cache; print their paths
#   ci/image.sh tarball KVER       ensure the cached system tarball with
#                                  kernel KVER installed; print its path
#   ci/image.sh signed-kernel-debs KVER   Debian's signed image of KVER and
#                                  the linux-image-<flavour> metapackage
#                                  version that installs it (the fleet
#                                  node's kernels); print their paths
#   ci/image.sh node-tarball KVER  a compute node as fleets run them
#                                  (ci/test-fleet-image.sh): the same base
#                                  system without DKMS, compiler, Rust or
#                                  kernel headers, with KVER's signed image
#                                  and its metapackage
#
# Kernel debs: /var/cache/nv-peer-mem-ci/kernels (where `cargo xtask
# test-vm` keeps linux-image-<kver>-unsigned): linux-image-<kver>-unsigned,
# linux-headers-<kver> and its -common at exactly the version of the host's
# installed linux-headers-<kver>, so modules built on the host for <kver>
# (the test's stand-ins) have the image's symbol CRCs; linux-kbuild at the
# host's version (ci/lib/kernel-deps.sh).
#
# System tarballs: /var/cache/nv-peer-mem-ci/images/bookworm-<yyyymmdd>-<key>.tar,
# <key> a hash of the package list, the sources and the kernel debs'
# names; reused for NVPM_IMAGE_MAX_AGE_DAYS (default 7) days, like
# ci/chroot.sh's chroots.
set -euo pipefail
. "$(dirname "$0")/lib/kernel-deps.sh"

top=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}
kernels=$top/kernels
cache=$top/images
max_age_days=${NVPM_IMAGE_MAX_AGE_DAYS:-7}
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${NVPM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# What a small Debian 12 server that runs our packages has: systemd as init
# (systemd-sysv), udev (modules, /dev), initramfs-tools (the kernel's
# postinst makes the initrd the VM boots), and what the -dkms deb depends on
# (dkms, make, gcc, Debian 12's rust_packages from packaging/distros.yaml),
# so installing our debs needs no download. mawk: the service helper's awk.
packages=(
    systemd-sysv udev kmod initramfs-tools zstd mawk procps
    dkms make gcc libc6-dev rustc-web rust-web-src
)

# A node that installs prebuilt modules: the same base, no toolchain;
# mokutil, as a Secure Boot node enrolls and checks its MOKs with it.
node_packages=(systemd-sysv udev kmod initramfs-tools zstd mawk procps mokutil)

. "$(dirname "${BASH_SOURCE[0]}")/lib/die.sh"

sources() {
    echo "deb $mirror bookworm main"
    echo "deb $mirror bookworm-updates main"
    echo "deb $security_mirror bookworm-security main"
}

# The debs of kernel KVER at the host's linux-headers-KVER version, one path
# a line: image, headers, then what the headers depend on (the -common
# headers at their exact version, linux-kbuild at the version the headers'
# Depends allows and the host has: ci/lib/kernel-deps.sh). Each is
# downloaded once into $kernels and found there by later runs, so a run
# does not depend on the archive keeping old versions.
kernel_debs() {
    local kver=$1 version
    version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver" 2>/dev/null) ||
        die "linux-headers-$kver is not installed on this host; run: sudo bash ci/setup-host.sh"
    local -a wanted
    mapfile -t wanted < <(header_deps "$kver") || true
    [ ${#wanted[@]} -gt 0 ] || die "cannot resolve linux-headers-$kver's dependencies (see above)"
    mkdir -p "$kernels"
    local spec pkg ver deb
    for spec in "linux-image-$kver-unsigned=$version" "linux-headers-$kver=$version" "${wanted[@]}"; do
        pkg=${spec%%=*} ver=${spec#*=}
        deb=$(find_deb "$pkg" "$ver")
        if [ -z "$deb" ]; then
            echo "==> downloading $pkg=$ver into $kernels (once)" >&2
            # apt's _apt sandbox user may not write to the cache: download as root.
            (cd "$kernels" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >&2) ||
                die "the archive has no $pkg at $ver (apt-get download failed; the 6.12 kernels need bookworm-backports: sudo bash ci/setup-host.sh; a version gone from the archive: sudo apt-get update && sudo bash ci/setup-host.sh)"
            deb=$(find_deb "$pkg" "$ver")
            [ -n "$deb" ] || die "apt-get download left no $pkg $ver deb in $kernels"
        fi
        echo "$deb"
    done
}

# The signed image of KVER at the host's linux-headers-KVER version and the
# flavour metapackage version whose Depends names it (apt-cache show), one
# path a line.
signed_kernel_debs() {
    local kver=$1 version meta flavour
    version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver" 2>/dev/null) ||
        die "linux-headers-$kver is not installed on this host; run: sudo bash ci/setup-host.sh"
    flavour=${kver##*-}
    meta=$(apt-cache show "linux-image-$flavour" | awk -v img="linux-image-$kver (= $version)" '/^Version:/{v=$2} /^Depends:/ && index($0, img) {print v; exit}')
    [ -n "$meta" ] || die "apt-cache knows no linux-image-$flavour that depends on linux-image-$kver (= $version); run: sudo apt-get update"
    mkdir -p "$kernels"
    local pkg ver deb
    for pkg in "linux-image-$kver=$version" "linux-image-$flavour=$meta"; do
        ver=${pkg#*=}
        deb=$(find_deb "${pkg%%=*}" "$ver")
        if [ -z "$deb" ]; then
            echo "==> downloading $pkg into $kernels (once)" >&2
            (cd "$kernels" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2) ||
                die "apt-get download $pkg failed"
            deb=$(find_deb "${pkg%%=*}" "$ver")
            [ -n "$deb" ] || die "apt-get download left no ${pkg%%=*} $ver deb in $kernels"
        fi
        echo "$deb"
    done
}

find_deb() {  # find_deb PKG VERSION: the cached deb of PKG at VERSION, if any
    local f
    for f in "$kernels/$1"_*.deb; do
        [ -f "$f" ] || continue
        [ "$(dpkg-deb -f "$f" Package)" = "$1" ] && [ "$(dpkg-deb -f "$f" Version)" = "$2" ] && { echo "$f"; return; }
    done
    return 0  # none: an empty answer, not a failure under set -e
}

# system_tarball KVER [node]: the test image, or with `node` the fleet node.
system_tarball() {
    local kver=$1 profile=${2:-}
    command -v mmdebstrap >/dev/null || die "mmdebstrap is missing; run: sudo bash ci/setup-host.sh"
    local -a debs pkgs
    if [ "$profile" = node ]; then
        mapfile -t debs < <(signed_kernel_debs "$kver")
        [ ${#debs[@]} = 2 ] || exit 2
        pkgs=("${node_packages[@]}")
    else
        mapfile -t debs < <(kernel_debs "$kver")
        [ ${#debs[@]} -ge 3 ] || exit 2
        pkgs=("${packages[@]}")
    fi
    # Each profile's tarballs are named apart, so one never evicts the other.
    local prefix=bookworm${profile:+-$profile}
    local key
    key=$( { sources; printf '%s\n' "${pkgs[@]}"; for d in "${debs[@]}"; do basename "$d"; done; } | sha256sum | cut -c1-12)
    mkdir -p "$cache"
    local found="" f
    for f in $(ls -1 "$cache"/"$prefix"-2*-"$key".tar 2>/dev/null | sort -r); do
        if [ -n "$(find "$f" -maxdepth 0 -mtime -"$max_age_days")" ]; then found=$f; break; fi
    done
    if [ -n "$found" ]; then
        echo "==> image: cached $(basename "$found") ($(du -h "$found" | cut -f1))" >&2
        echo "$found"; return
    fi
    local out
    out=$cache/$prefix-$(date -u +%Y%m%d)-$key.tar
    echo "==> image: creating $(basename "$out") with mmdebstrap (several minutes; log in $out.log)" >&2
    local start=$SECONDS
    local -a src=() aptopts=('APT::Install-Recommends "false"')
    mapfile -t src < <(sources)
    # As ci/chroot.sh: follow the host's Acquire::Check-Valid-Until (a frozen
    # snapshot mirror would otherwise be refused as expired).
    if apt-config dump Acquire::Check-Valid-Until | grep -qi '"false"'; then
        aptopts+=('Acquire::Check-Valid-Until "false"')
    fi
    local -a include=("--include=$(IFS=,; echo "${pkgs[*]}")")
    for f in "${debs[@]}"; do include+=("--include=$f"); done
    # --skip=cleanup/apt/lists keeps the package lists: the test's apt-get
    # install of our debs resolves dependencies without an update.
    if ! mmdebstrap --variant=apt --mode=root --format=tar \
            "${aptopts[@]/#/--aptopt=}" "${include[@]}" \
            --skip=cleanup/apt/lists \
            bookworm "$out.tmp" "${src[@]}" >"$out.log" 2>&1; then
        rm -f "$out.tmp"
        tail -n 20 "$out.log" >&2
        die "mmdebstrap bookworm failed (full log: $out.log); is $mirror reachable?"
    fi
    mv "$out.tmp" "$out"
    echo "==> image: created in $((SECONDS - start)) s ($(du -h "$out" | cut -f1))" >&2
    for f in "$cache"/"$prefix"-2*.tar; do
        [ "$f" = "$out" ] || rm -f "$f" "$f.log"
    done
    echo "$out"
}

[ "$(id -u)" = 0 ] || die "run as root (sudo bash ci/image.sh ...)"
cmd=${1:-}; shift || true
case "$cmd" in
    kernel-debs) [ $# = 1 ] || die "usage: ci/image.sh kernel-debs KVER"; kernel_debs "$1" ;;
    tarball) [ $# = 1 ] || die "usage: ci/image.sh tarball KVER"; system_tarball "$1" ;;
    signed-kernel-debs) [ $# = 1 ] || die "usage: ci/image.sh signed-kernel-debs KVER"; signed_kernel_debs "$1" ;;
    node-tarball) [ $# = 1 ] || die "usage: ci/image.sh node-tarball KVER"; system_tarball "$1" node ;;
    *) die "usage: ci/image.sh kernel-debs KVER | tarball KVER | signed-kernel-debs KVER | node-tarball KVER" ;;
esac
