#!/usr/bin/env bash
# Usage: ci/fetch-nvidia-p2p.sh SUITE
# Downloads Debian's nvidia-open-kernel-dkms of another suite (trixie and sid
# contrib: NVIDIA 550; experimental contrib: 555) and unpacks it into a cache,
# without installing it and without touching this host's apt state: apt runs
# with its own sources list, lists and archive cache under
# /var/cache/nv-peer-mem-ci/apt-<suite> (adding trixie or sid to a bookworm
# host's sources would let them replace its packages: docs/testing.md, "The
# host").
# Prints the driver source directory, which holds nvidia/nv-p2p.h: pass it as
# NV_SRC= to kmod's Makefile. (Bookworm's own 535: ci/fetch-nvidia-src.sh.)
set -euo pipefail
suite=${1:?usage: ci/fetch-nvidia-p2p.sh trixie|sid|experimental}
case "$suite" in
    trixie|sid|unstable|experimental) ;;
    *) echo "fetch-nvidia-p2p.sh: unknown suite '$suite' (trixie, sid or experimental)" >&2; exit 2 ;;
esac
cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
apt_dir=$cache/apt-$suite
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/debs"
# experimental holds only what differs from sid; the package is in contrib.
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite contrib" >"$apt_dir/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o Dir::State::status=/dev/null
    -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives"
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o APT::Architectures::=amd64 -o Debug::NoLocking=1
    # apt's _apt user cannot write to the cache; download as the caller.
    -o APT::Sandbox::User=root
)
# The index is refreshed once a day at most.
if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null)" ]; then
    echo "==> nvidia-open-kernel-dkms/$suite: apt-get update (private state in $apt_dir)" >&2
    apt-get "${apt_opts[@]}" update -qq >&2 || {
        echo "fetch-nvidia-p2p.sh: apt-get update of $suite contrib from $mirror failed; is the mirror reachable?" >&2; exit 1; }
fi
version=$(apt-cache "${apt_opts[@]}" show nvidia-open-kernel-dkms 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n1)
[ -n "$version" ] || { echo "fetch-nvidia-p2p.sh: $suite contrib has no nvidia-open-kernel-dkms" >&2; exit 1; }
out=$apt_dir/nvidia-open-$version
if [ ! -d "$out/usr/src" ]; then
    echo "==> nvidia-open-kernel-dkms $version ($suite): download and unpack" >&2
    (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "nvidia-open-kernel-dkms=$version" >&2)
    rm -rf "$out.tmp"
    dpkg-deb -x "$apt_dir/debs/nvidia-open-kernel-dkms_${version/*:/}_amd64.deb" "$out.tmp"
    mv "$out.tmp" "$out"
fi
src=$(dirname "$(ls -d "$out"/usr/src/nvidia-*/nvidia/nv-p2p.h | sort | tail -n1)")
dirname "$src"
