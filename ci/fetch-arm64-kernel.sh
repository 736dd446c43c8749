#!/usr/bin/env bash
# Usage: ci/fetch-arm64-kernel.sh <amd64 kernel release>
# Downloads the Debian arm64 kernel of the same ABI as an amd64 release the
# tests use (6.1.0-56-amd64 -> 6.1.0-56-arm64) and unpacks it into a cache,
# without installing anything and without touching this host's apt state
# (no `dpkg --add-architecture`): apt runs with its own sources list, lists
# and archive cache under /var/cache/nv-peer-mem-ci/apt-arm64, as
# ci/fetch-nvidia-p2p.sh does for other suites.
#
# The unpacked root, <cache>/kernels/<arm64 release>/root, holds:
#   usr/src/linux-headers-<release>   the arm64 headers (KDIR= for a cross
#                                     build with ARCH=arm64), whose relative
#                                     links reach the -common headers and
#                                     linux-kbuild unpacked beside them;
#   usr/lib/linux-kbuild-<x.y>        the kbuild tools for *this* host (amd64),
#                                     as the headers' scripts/ link expects;
#   boot/vmlinuz-<release>            from linux-image-<release>-unsigned;
#   bin/busybox                       busybox-static for the arm64 initramfs.
# Prints the root. The kernel's packages are taken at exactly the version of
# the amd64 headers installed on this host, so the two arches' builds are
# comparable; linux-kbuild at the host's own version (ci/lib/kernel-deps.sh).
# The unpacked root is the cache: a later run needs no download, whatever
# the archive still holds.
set -euo pipefail
amd64=${1:?usage: ci/fetch-arm64-kernel.sh <amd64 kernel release, e.g. 6.1.0-56-amd64>}
case "$amd64" in
    *-amd64) ;;
    *) echo "fetch-arm64-kernel.sh: '$amd64' is not a Debian amd64 kernel release (<abi>-amd64)" >&2; exit 2 ;;
esac
abi=${amd64%-amd64}
release=$abi-arm64
version=$(dpkg-query -W -f='${Version}' "linux-headers-$amd64" 2>/dev/null) || {
    echo "fetch-arm64-kernel.sh: linux-headers-$amd64 is not installed; run: bash ci/setup-host.sh" >&2; exit 2; }
# The -common headers at the headers' version; linux-kbuild-6.1 /
# linux-kbuild-6.12.95+deb12 (amd64 tools, for this host) at the version the
# host has, which the headers' Depends allows (ci/lib/kernel-deps.sh).
. "$(dirname "$0")/lib/kernel-deps.sh"
deps=$(header_deps "$amd64") || exit 1
kbuild=$(grep '^linux-kbuild-' <<<"$deps" | head -n1)
[ -n "$kbuild" ] || { echo "fetch-arm64-kernel.sh: cannot find linux-kbuild in linux-headers-$amd64's dependencies" >&2; exit 1; }

cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
apt_dir=$cache/apt-arm64
out=$cache/kernels/$release
root=$out/root
if [ -f "$out/version" ] && [ "$(cat "$out/version")" = "$version" ] && [ -x "$root/bin/busybox" ]; then
    echo "$root"
    exit 0
fi

mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/debs"
# bookworm's kernels move through bookworm-security and point releases;
# bookworm-backports carries 6.12.
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-updates main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror%/debian}/debian-security bookworm-security main
EOF
apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o Dir::State::status=/dev/null
    -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives"
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    # arm64 packages plus this host's linux-kbuild (amd64 tools).
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o APT::Architectures::=amd64
    -o Debug::NoLocking=1
    # apt's _apt user cannot write to the cache; download as the caller.
    -o APT::Sandbox::User=root
)
have_index() { apt-cache "${apt_opts[@]}" show "linux-headers-$release=$version" >/dev/null 2>&1; }
if ! have_index; then
    echo "==> $release: apt-get update (private arm64 state in $apt_dir)" >&2
    apt-get "${apt_opts[@]}" update -qq >&2 || {
        echo "fetch-arm64-kernel.sh: apt-get update from $mirror failed; is the mirror reachable?" >&2; exit 1; }
    have_index || { echo "fetch-arm64-kernel.sh: the archive has no linux-headers-$release at $version (the amd64 headers' version); update the host's headers (apt-get update && bash ci/setup-host.sh)" >&2; exit 1; }
fi

pkgs=("linux-headers-$release:arm64=$version" "linux-headers-$abi-common=$version"
      "${kbuild%%=*}:amd64=${kbuild#*=}" "linux-image-$release-unsigned:arm64=$version" "busybox-static:arm64")
echo "==> $release $version: download and unpack (once; cached in $out)" >&2
rm -rf "$apt_dir/debs" && mkdir -p "$apt_dir/debs"
(cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "${pkgs[@]}" >&2) || {
    echo "fetch-arm64-kernel.sh: the archive lacks one of ${pkgs[*]} (apt-get download failed, above); a version gone from the archive: apt-get update && bash ci/setup-host.sh" >&2; exit 1; }
rm -rf "$out.tmp"
mkdir -p "$out.tmp/root"
for deb in "$apt_dir"/debs/*.deb; do
    case "$(basename "$deb")" in
        # The image's 100+ MB of modules are not needed: only the kernel.
        linux-image-*) dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$out.tmp/root" "./boot/vmlinuz-$release" ;;
        *) dpkg-deb -x "$deb" "$out.tmp/root" ;;
    esac
done
[ -f "$out.tmp/root/usr/src/linux-headers-$release/.config" ] && [ -x "$out.tmp/root/bin/busybox" ] &&
    [ -f "$out.tmp/root/boot/vmlinuz-$release" ] || { echo "fetch-arm64-kernel.sh: the unpacked packages lack headers, busybox or vmlinuz" >&2; exit 1; }
echo "$version" >"$out.tmp/version"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$apt_dir/debs"
echo "$root"
