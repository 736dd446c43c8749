#!/usr/bin/env bash
# Usage: ci/fetch-bullseye-headers.sh
# The oldest kernel the module is built on here (issue 56): Debian 11's 5.10,
# the current bullseye-security linux-headers-<abi>-amd64 with its -common and
# linux-kbuild-5.10, and gcc-10 (the headers' Makefile names it as CC:
# bookworm has no gcc-10), downloaded with a private apt state
# (ci/lib/private-apt.sh) and unpacked into a cache, nothing installed.
# RHEL 8 and 9 are 4.18- and 5.14-based; 5.10 is the nearest older kernel
# Debian's archive has.
# Prints the headers' directory (KDIR= for kmod's Makefile); gcc-10 is in
# <that>/../../bin, to be put first on PATH (gcc finds its cc1 relative to
# itself). One line of the unpacked headers is changed: their Makefile
# includes the -common headers by absolute path (/usr/src/...), which is
# made the unpacked tree's. The unpacked
# tree is the cache: a later run needs no download, whatever the archive
# still holds (the index is refreshed once a day at most).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/private-apt.sh"
cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${NVPM_DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}
apt_dir=$cache/apt-bullseye
apt_extra=(-o APT::Architectures::=amd64)
private_apt "$apt_dir" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bullseye main" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $security_mirror bullseye-security main"
out=$cache/kernels/bullseye
# Offline or an archive that moved on: the last unpacked tree still serves.
if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null)" ]; then
    echo "==> bullseye: apt-get update (private state in $apt_dir)" >&2
    apt-get "${apt_opts[@]}" update -qq >&2 || {
        if [ -f "$out/kdir" ]; then
            echo "fetch-bullseye-headers.sh: apt-get update from $mirror failed; using the cached $(cat "$out/kdir")" >&2
            cat "$out/kdir"; exit 0
        fi
        echo "fetch-bullseye-headers.sh: apt-get update of bullseye from $mirror failed; is the mirror reachable?" >&2; exit 1; }
fi
# The ABI the metapackage names now, and the headers' own Depends.
headers=$(apt-cache "${apt_opts[@]}" depends linux-headers-amd64 2>/dev/null | awk '/Depends: linux-headers-/{print $2; exit}')
[ -n "$headers" ] || { echo "fetch-bullseye-headers.sh: bullseye's linux-headers-amd64 names no linux-headers-<abi>-amd64" >&2; exit 1; }
version=$(apt-cache "${apt_opts[@]}" policy "$headers" | sed -n 's/^ *Candidate: //p')
kdir=$out/root/usr/src/$headers
if [ -f "$out/version" ] && [ "$(cat "$out/version")" = "$headers $version" ] && [ -f "$kdir/.config" ]; then
    echo "$kdir"; exit 0
fi
deps=$(apt-cache "${apt_opts[@]}" show "$headers=$version" | sed -n 's/^Depends: //p' | head -n1 |
    tr ',' '\n' | sed -n 's/^ *\(linux-\(headers\|kbuild\)-[^ ]*\).*/\1/p')
pkgs=("$headers=$version")
for dep in $deps gcc-10 cpp-10 libgcc-10-dev; do
    pkgs+=("$dep=$(apt-cache "${apt_opts[@]}" policy "$dep" | sed -n 's/^ *Candidate: //p')")
done
echo "==> bullseye $headers $version: download and unpack ${pkgs[*]} (once; cached in $out)" >&2
rm -rf "$apt_dir/debs" && mkdir -p "$apt_dir/debs"
(cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "${pkgs[@]}" >&2) || {
    echo "fetch-bullseye-headers.sh: the archive lacks one of ${pkgs[*]} (apt-get download failed, above)" >&2; exit 1; }
rm -rf "$out.tmp" && mkdir -p "$out.tmp/root"
for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$out.tmp/root"; done
[ -f "$out.tmp/root/usr/src/$headers/.config" ] && [ -x "$out.tmp/root/usr/bin/gcc-10" ] ||
    { echo "fetch-bullseye-headers.sh: the unpacked packages lack $headers/.config or gcc-10" >&2; exit 1; }
sed -i "s|^include /usr/src/|include $out/root/usr/src/|" "$out.tmp/root/usr/src/$headers/Makefile"
echo "$headers $version" >"$out.tmp/version"
echo "$kdir" >"$out.tmp/kdir"
rm -rf "$out" && mv "$out.tmp" "$out"
rm -rf "$apt_dir/debs"
echo "$kdir"
