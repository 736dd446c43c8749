#!/usr/bin/env bash
# Removes from this host what the suites that install system-wide
# (ci/test-deb.sh, ci/test-dkms.sh) may have left behind when a run of
# either was stopped before its own cleanup ran: a killed test, or a machine
# whose disk was copied while a run was half-way (a CI machine made from a
# snapshot). Each suite's cleanup only knows its own run's state files, so
# without this the next suite starts on the other's stand-ins and its
# "no prerequisites yet" checks fail.
# Only what a test made, told apart by its own marks:
# - our two packages (every suite purges them; they are the product under test);
# - the equivs stand-in for MLNX_OFED's package, only at the versions
#   ci/mofed-standin.sh gives it (99:0-test, 99:1-test), never a real
#   MLNX_OFED;
# - ci/prereq-standin.sh's stand-in modules and DKMS registrations, by
#   that script's marker files (prereq-standin.sh remove-all).
# Callers hold the host package lock (/var/lock/nv-peer-mem-host-packages.lock).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "remove-test-leftovers.sh: run as root" >&2; exit 2; }
dpkg -P nvidia-peer-memory nvidia-peer-memory-dkms >/dev/null 2>&1
standin=mlnx-ofed-kernel-modules
case "$(dpkg-query -W -f='${Status} ${Version}' "$standin" 2>/dev/null)" in
"install ok installed 99:0-test" | "install ok installed 99:1-test") dpkg -P "$standin" >/dev/null ;;
esac
bash "$here/prereq-standin.sh" remove-all >/dev/null
