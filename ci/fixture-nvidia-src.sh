#!/usr/bin/env bash
# Usage: ci/fixture-nvidia-src.sh VERSION      (580.142, 595.45.04)
# NVIDIA's open kernel modules of that release come as a fixture
# (open-gpu-kernel-modules-VERSION-kernel-open.tar.gz in $NVPM_FIXTURES,
# default ../shared/fixtures; its README says where they come from). Unpacks
# the one file a module build against the driver needs, kernel-open/nvidia/
# nv-p2p.h, into target/nvidia-fixtures/VERSION and prints the directory to
# pass as NV_SRC= to kmod's Makefile. Exit 3, saying so, when the fixture is
# absent (callers report the builds skipped, never passed).
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
if [ ! -f "$out/kernel-open/nvidia/nv-p2p.h" ]; then
    rm -rf "$out" && mkdir -p "$out"
    tar -xzf "$tarball" -C "$out" --strip-components=1 "open-gpu-kernel-modules-$version/kernel-open/nvidia/nv-p2p.h"
fi
echo "$out/kernel-open"
