#!/usr/bin/env bash
# Downloads Debian's nvidia-open-kernel-dkms (contrib, NVIDIA 535) and unpacks
# it into a cache without installing it (installing would build nvidia.ko via
# DKMS for every kernel). Prints the driver source directory, which holds
# nvidia/nv-p2p.h: pass it as NV_SRC= to kmod's Makefile.
set -euo pipefail
cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}
mkdir -p "$cache"
cd "$cache"
if ! ls nvidia-open-kernel-dkms_*.deb >/dev/null 2>&1; then
  # apt's _apt user cannot write here; download as the caller.
  apt-get download -o APT::Sandbox::User=root nvidia-open-kernel-dkms >&2
fi
deb=$(ls nvidia-open-kernel-dkms_*.deb | sort | tail -n1)
if [ ! -d nvidia-open/usr/src ]; then
  rm -rf nvidia-open.tmp
  dpkg-deb -x "$deb" nvidia-open.tmp
  mv nvidia-open.tmp nvidia-open
fi
ls -d "$cache"/nvidia-open/usr/src/nvidia-*/ | sort | tail -n1 | sed 's:/$::'
