#!/usr/bin/env bash
# Installs everything this project's build and test suite needs on a fresh
# Debian 12 (bookworm) machine, as root. Safe to run again.
#
# Suites are selected per package (docs/testing.md): bookworm-backports only
# for the 6.12 headers and the QEMU it needs, bookworm-security's rustc-web
# (it is the candidate anyway), never trixie.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "setup-host.sh: run as root (sudo bash ci/setup-host.sh)" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive

echo "==> apt sources: bookworm contrib/non-free, bookworm-backports (pinned low)"
bash "$here/apt-sources.sh"
apt-get update -qq

# The kernels we build and boot: the current bookworm kernel and the current
# bookworm-backports 6.12 kernel, each named by its metapackage.
. "$here/kernels.sh"

echo "==> installing build and test packages (kernels $KVER_BOOKWORM, $KVER_BACKPORTS)"
pkgs=(
  # module build
  build-essential bc kmod libelf-dev dwarves binutils rustc-web rust-web-src
  # kernel trees prepared from Debian's linux-source (ci/config-trees.sh):
  # Kconfig's lexer and parser are generated with flex and bison
  flex bison
  "linux-headers-$KVER_BOOKWORM" "linux-headers-$KVER_BACKPORTS/bookworm-backports"
  # packaging tests
  rpm rpmlint dpkg-dev debhelper dh-dkms dkms lintian equivs fakeroot git
  # a real rpm resolver (libsolv) and repository metadata, for the rpm
  # packages' relations (ci/test-rpm.sh, ci/rpm-providers.sh)
  dnf createrepo-c
  # the fleet route's repositories (ci/test-fleet.sh): apt-ftparchive, gpg,
  # and openssl for a throwaway module signing key
  apt-utils gnupg openssl
  # a mirror's two-pass sync, as docs/fleet.md prints it
  rsync
  # arm64: cross compiler for the module and the VM test modules
  gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu
  # NCCL's access probe in the guests, static (xtask/src/vm/nccl_probe.rs)
  libc6-dev libc6-dev-arm64-cross
  # boot tests; patch plants the mutation check's defects
  busybox-static cpio patch
  # trixie/sid chroots (ci/chroot.sh); bookworm's own mmdebstrap 1.3.5 makes
  # them fine, no backport needed
  mmdebstrap
  # the Secure Boot fleet node (ci/test-fleet-image.sh): edk2's OVMF and
  # virt-fw-vars for its UEFI variable store; SoftHSM 2 and OpenSSL's
  # pkcs11 provider (which the kernels' sign-file loads) for a module
  # signing key kept in a token; jq for the store's JSON and for
  # ci/test-nccl.sh (which needs g++ too: build-essential)
  ovmf python3-virt-firmware/bookworm-backports jq softhsm2 pkcs11-provider/bookworm-backports
)
# qemu-utils may already come from backports on these machines; qemu-system
# must then match it, and seabios with it.
if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo12; then
  pkgs+=(qemu-system-x86/bookworm-backports qemu-system-arm/bookworm-backports
         qemu-system-common/bookworm-backports
         qemu-system-data/bookworm-backports seabios/bookworm-backports)
else
  pkgs+=(qemu-system-x86 qemu-system-arm)
fi
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null

# Slurm and munge for ci/test-monitoring.sh's drain-and-resume scenario,
# which runs its own daemons on its own ports and files: installed with
# their daemons kept from starting (a policy-rc.d that refuses, unless the
# machine already has one; removed again only if it is ours).
if ! command -v slurmd >/dev/null || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "==> Slurm and munge (daemons not started)"
  ours=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && ours=1
  fi
  installed=0
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null || installed=$?
  [ -z "$ours" ] || rm -f /usr/sbin/policy-rc.d
  [ "$installed" = 0 ] || exit "$installed"
fi

echo "==> NVIDIA 535 driver sources (nv-p2p.h), unpacked, not installed"
bash "$here/fetch-nvidia-src.sh" >/dev/null
# The kernels' image and header debs in the kernels cache (ci/image.sh
# kernel-debs), fetched here, once, because two suites that ci/test.sh
# runs side by side read them: cargo xtask test-vm boots these images and
# ci/next-boot-trees.sh (the fleet route) unpacks one; neither then
# downloads into the cache while the other reads it.
echo "==> kernel packages of $KVER_BOOKWORM and $KVER_BACKPORTS (cached)"
for kver in "$KVER_BOOKWORM" "$KVER_BACKPORTS"; do
  bash "$here/image.sh" kernel-debs "$kver" >/dev/null
done
echo "==> host ready"
