#!/usr/bin/env bash
# Usage: ci/fixture-nvidia-src.sh VERSION      (580.142, 595.45.04)
# NVIDIA's open kernel modules of that release come as a fixture
# (open-gpu-kernel-modules-VERSION-kernel-open.tar.gz in $NVPM_FIXTURES,
# default ../shared/fixtures; its README says where they come from). Unpacks
# what the tests read of it into target/nvidia-fixtures/VERSION/kernel-open
# and prints that directory (pass it as NV_SRC= to kmod's Makefile):
# nvidia/nv-p2p.h (module builds, the 580-style NVIDIA double of test-vm),
# nvidia-peermem/nvidia-peermem.c and conftest.sh (test-vm's oracle builds
# NVIDIA's nvidia-peermem of that release). Exit 3, saying so, when the
# fixture is absent (callers report the builds skipped, never passed).
set -euo pipefail
version=${1:?usage: ci/fixture-nvidia-src.sh VERSION (e.g. 580.142)}
top=$(cd "$(dirname "$0")/.." && pwd)
fixtures=${NVPM_FIXTURES:-$top/../shared/fixtures}
tarball=$fixtures/open-gpu-kernel-modules-$version-kernel-open.tar.gz
if [ ! -f "$tarball" ]; then
    echo "fixture-nvidia-src.sh: no $tarball (set NVPM_FIXTURES)" >&2
    exit 3
fi
out=$top/target/nvidia-fixtures/$version
files=(nvidia/nv-p2p.h nvidia-peermem/nvidia-peermem.c conftest.sh)
for f in "${files[@]}"; do
    if [ ! -f "$out/kernel-open/$f" ]; then
        rm -rf "$out" && mkdir -p "$out"
        tar -xzf "$tarball" -C "$out" --strip-components=1 \
            "${files[@]/#/open-gpu-kernel-modules-$version/kernel-open/}"
        break
    fi
done
echo "$out/kernel-open"
