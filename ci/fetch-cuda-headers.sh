#!/usr/bin/env bash
# CUDA's headers for nccl-harness (issue 42; docs/nccl-harness.md): NCCL's
# .cc files include cuda_runtime.h, cuda.h and, through collectives.h,
# libcu++'s <cuda/atomic>, though the topology code the harness runs calls
# no CUDA function it does not stub. Debian ships them in non-free's
# nvidia-cuda-dev (trixie: CUDA 12.4; bookworm's 11.8 is older than NCCL
# 2.28 supports) and main's libcu++-dev. Both are downloaded from trixie
# with a private apt state under the cache (this machine's apt sources and
# lists are not touched, nothing is installed), and only their usr/include
# is kept: nvidia-cuda-dev is 934 MB, its headers 24 MB. NVIDIA's license
# does not let them be copied into this repository. Prints the include
# directory. Cache: $NVPM_CACHE/cuda-headers/<nvidia-cuda-dev version>.
set -euo pipefail
cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}/cuda-headers
mirror=${NVPM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
cd "$cache"
# The newest tree already unpacked is enough: the headers only have to
# compile NCCL's code, which the harness pins by its own fixtures.
have=$(ls -d */usr/include 2>/dev/null | sort -V | tail -n1 || true)
if [ -n "$have" ] && [ -f "$have/cuda_runtime.h" ] && [ -f "$have/cuda/atomic" ]; then
    echo "$cache/$have"
    exit 0
fi
apt_dir=$cache/apt
rm -rf "$apt_dir" && mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
echo "deb $mirror trixie main non-free" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::archives=$apt_dir/archives"
    -o "Dir::Cache::pkgcache=$apt_dir/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$apt_dir/srcpkgcache.bin"
    -o APT::Sandbox::User=root -o Debug::NoLocking=true -q)
echo "fetch-cuda-headers: apt-get update (trixie main non-free, a private apt state)" >&2
apt-get "${apt_opts[@]}" update >&2
(cd "$apt_dir" && apt-get "${apt_opts[@]}" download nvidia-cuda-dev libcu++-dev >&2)
deb=$(ls "$apt_dir"/nvidia-cuda-dev_*.deb)
version=$(dpkg-deb -f "$deb" Version)
rm -rf "$version.tmp" && mkdir -p "$version.tmp"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$version.tmp" --wildcards './usr/include/*'
dpkg-deb -x "$(ls "$apt_dir"/libcu++-dev_*.deb)" "$version.tmp"
[ -f "$version.tmp/usr/include/cuda_runtime.h" ] && [ -f "$version.tmp/usr/include/cuda/atomic" ] || {
    echo "fetch-cuda-headers: nvidia-cuda-dev $version and libcu++-dev gave no cuda_runtime.h or cuda/atomic" >&2
    exit 1
}
rm -rf "$version" && mv "$version.tmp" "$version" && rm -rf "$apt_dir"
echo "fetch-cuda-headers: CUDA headers of nvidia-cuda-dev $version in $cache/$version/usr/include" >&2
echo "$cache/$version/usr/include"
