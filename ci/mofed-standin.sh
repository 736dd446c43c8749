#!/usr/bin/env bash
# Builds the MLNX_OFED stand-in the packaging tests install: an equivs
# package that satisfies the -dkms deb's dependency on MLNX_OFED's kernel
# modules (which Debian does not package), with no files.
#   mofed-standin.sh DIR PACKAGE NOTE [update]
# DIR: where the control file and the .deb go; PACKAGE: its name; NOTE: one
# sentence for its description (who installs it). The .deb is
# DIR/PACKAGE_0-test_all.deb; with `update`, DIR/PACKAGE_1-test_all.deb,
# the next version, with one file under /usr/src/ofa_kernel/ (as MLNX_OFED's
# kernel package ships its Module.symvers there), so that installing it
# fires the file triggers on /usr/src (ci/test-dkms.sh).
set -euo pipefail
[ $# = 3 ] || [ $# = 4 ] && [ "${4:-update}" = update ] ||
    { echo "usage: mofed-standin.sh DIR PACKAGE NOTE [update]" >&2; exit 2; }
dir=$1 package=$2 note=$3
mkdir -p "$dir"
version=99:0-test files=
if [ $# = 4 ]; then
    version=99:1-test
    echo "ci/mofed-standin.sh: the MLNX_OFED stand-in's update" >"$dir/nvpm-standin-update"
    files="Files: nvpm-standin-update /usr/src/ofa_kernel/"
fi
cat >"$dir/standin.ctl" <<CTL
Section: misc
Priority: optional
Standards-Version: 4.6.2
Package: $package
Version: $version${files:+
$files}
Description: test stand-in for MLNX_OFED's kernel modules
 $note
CTL
cd "$dir" && equivs-build standin.ctl
