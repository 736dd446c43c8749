#!/usr/bin/env bash
# Debian chroots of newer suites (trixie, sid) for real builds there
# (issue 12 item 6), made with mmdebstrap from Debian's archive and cached as
# tarballs, so only the first run on a machine (or one a week later) pays for
# the download.
#
#   ci/chroot.sh tarball SUITE      ensure the cached tarball; print its path
#   ci/chroot.sh new SUITE DIR      a fresh chroot in DIR from that tarball
#   ci/chroot.sh run DIR CMD...     run CMD (as root) inside the chroot DIR
#
# Cache: /var/cache/nv-peer-mem-ci/chroots/<suite>-<yyyymmdd>-<key>.tar,
# <key> being a hash of the package list and the sources, so a changed list
# makes a new tarball. A tarball is reused for NVPM_CHROOT_MAX_AGE_DAYS
# (default 7) days; then the next run makes a new one (the archive moves on,
# sid daily) and removes the older ones of that suite.
#
# The chroot is a copy: tests install and purge packages in it freely, and
# the next run starts again from the tarball. `run` mounts /proc, /sys and
# /dev in a private mount namespace (unshare -m), so nothing stays mounted on
# the host when the command ends, however it ends; the chroot's directory is
# first bound onto itself, so that its / is a mount point as a machine's is
# (rpm 6's unshare plugin makes / private around each scriptlet, which
# fails with EINVAL where / is none).
set -euo pipefail

cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}/chroots
max_age_days=${NVPM_CHROOT_MAX_AGE_DAYS:-7}
# The mirror the host's own apt sources use (/etc/apt/sources.list.d/debian.sources).
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${NVPM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# What the tests need inside: the suite's own kernel headers (the metapackage
# pulls the current linux-headers-<ver>-amd64, its -common and the gcc it was
# built with), its rustc with the library sources, and the packaging tools.
packages=(
    linux-headers-amd64 gcc make bc kmod libelf-dev dwarves
    rustc rust-src
    build-essential dkms dpkg-dev debhelper dh-dkms lintian fakeroot
)

# sid's only: dnf5 with libdnf5's actions plugin (in Debian's libdnf5-2),
# the package manager of Fedora 41 and later, for ci/test-rpm.sh's node
# with dnf5's guard (docs/fleet.md, "The dnf5 guard"), which needs an
# actions plugin with raise_error (1.4.0 and later; sid's dnf5 is 5.4).
packages_sid=(dnf5)

. "$(dirname "${BASH_SOURCE[0]}")/lib/die.sh"

packages_for() {  # the package list of a suite, one per line
    printf '%s\n' "${packages[@]}"
    [ "$1" != sid ] && [ "$1" != unstable ] || printf '%s\n' "${packages_sid[@]}"
}

sources_for() {  # the sources.list lines of a suite, one per line
    case "$1" in
        trixie)
            # What a trixie machine has: the release, its point-release
            # updates and security (where the current 6.12 kernel is).
            echo "deb $mirror trixie main"
            echo "deb $mirror trixie-updates main"
            echo "deb $security_mirror trixie-security main" ;;
        sid|unstable)
            echo "deb $mirror sid main" ;;
        *) die "unknown suite '$1' (trixie or sid)" ;;
    esac
}

suite_tarball() {
    local suite=$1
    command -v mmdebstrap >/dev/null || die "mmdebstrap is missing; run: sudo bash ci/setup-host.sh"
    local key
    key=$( { sources_for "$suite"; packages_for "$suite"; } | sha256sum | cut -c1-12)
    mkdir -p "$cache"
    # The newest tarball of this suite and key, if young enough.
    local found="" f
    for f in $(ls -1 "$cache/$suite"-*-"$key".tar 2>/dev/null | sort -r); do
        if [ -n "$(find "$f" -maxdepth 0 -mtime -"$max_age_days")" ]; then found=$f; break; fi
    done
    if [ -n "$found" ]; then
        echo "==> $suite chroot: cached $(basename "$found") ($(du -h "$found" | cut -f1))" >&2
        echo "$found"; return
    fi
    local out
    out=$cache/$suite-$(date -u +%Y%m%d)-$key.tar
    echo "==> $suite chroot: creating $(basename "$out") with mmdebstrap (a few minutes; log in $out.log)" >&2
    local start=$SECONDS
    local -a src=()
    mapfile -t src < <(sources_for "$suite")
    # The chroot's apt follows the host's Acquire::Check-Valid-Until: where
    # the host's mirror is a frozen snapshot (this CI machine's apt.conf.d
    # turns the check off), sid's Release would otherwise be refused as
    # expired.
    local -a aptopts=('APT::Install-Recommends "false"')
    if apt-config dump Acquire::Check-Valid-Until | grep -qi '"false"'; then
        aptopts+=('Acquire::Check-Valid-Until "false"')
    fi
    # --variant=apt: Essential + apt, then our packages (no Recommends).
    # --skip=cleanup/apt/lists keeps the package lists, so a test can
    # `apt-get install` more in its copy without an update.
    if ! mmdebstrap --variant=apt --mode=root --format=tar \
            "${aptopts[@]/#/--aptopt=}" \
            --include="$(packages_for "$suite" | paste -sd,)" \
            --skip=cleanup/apt/lists \
            "$suite" "$out.tmp" "${src[@]}" >"$out.log" 2>&1; then
        rm -f "$out.tmp"
        tail -n 20 "$out.log" >&2
        die "mmdebstrap $suite failed (full log: $out.log); is $mirror reachable?"
    fi
    mv "$out.tmp" "$out"
    echo "==> $suite chroot: created in $((SECONDS - start)) s ($(du -h "$out" | cut -f1))" >&2
    # Older tarballs of this suite (any package list) are superseded.
    for f in "$cache/$suite"-*.tar; do
        [ "$f" = "$out" ] || rm -f "$f" "$f.log"
    done
    echo "$out"
}

new() {
    local suite=$1 dir=$2 tar
    tar=$(suite_tarball "$suite")
    [ -n "$dir" ] && [ "$dir" != / ] || die "refusing to use '$dir' as a chroot directory"
    # A leftover bind mount would make rm -rf reach into the host: refuse.
    if grep -q " $(realpath -m "$dir")/" /proc/self/mounts; then
        die "something is mounted under $dir; unmount it first (grep $dir /proc/self/mounts)"
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    local start=$SECONDS
    tar -C "$dir" -xf "$tar"
    # Name resolution for apt-get inside (mmdebstrap leaves the host's copy
    # only during its own run).
    cp -L /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    echo "==> $suite chroot: unpacked into $dir in $((SECONDS - start)) s" >&2
}

run() {
    local dir=$1; shift
    [ -x "$dir/bin/sh" ] || die "$dir is not a chroot (no bin/sh); make one with: ci/chroot.sh new SUITE $dir"
    # shellcheck disable=SC2016
    unshare --mount --propagation private --fork sh -c '
        d=$1; shift
        mount --bind "$d" "$d" &&
        mount -t proc proc "$d/proc" &&
        mount -t sysfs sys "$d/sys" &&
        mount --rbind /dev "$d/dev" &&
        exec chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"' sh "$dir" "$@"
}

[ "$(id -u)" = 0 ] || die "run as root (sudo bash ci/chroot.sh ...)"
cmd=${1:-}; shift || true
case "$cmd" in
    tarball) [ $# = 1 ] || die "usage: ci/chroot.sh tarball SUITE"; suite_tarball "$1" ;;
    new) [ $# = 2 ] || die "usage: ci/chroot.sh new SUITE DIR"; new "$1" "$2" ;;
    run) [ $# -ge 2 ] || die "usage: ci/chroot.sh run DIR CMD..."; run "$@" ;;
    *) die "usage: ci/chroot.sh tarball SUITE | new SUITE DIR | run DIR CMD..." ;;
esac
