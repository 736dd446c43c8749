#!/usr/bin/env bash
# Builds the MLNX_OFED stand-in the packaging tests install: an equivs
# package that satisfies the -dkms deb's dependency on MLNX_OFED's kernel
# modules (which Debian does not package), with no files.
#   mofed-standin.sh DIR PACKAGE NOTE
# DIR: where the control file and the .deb go; PACKAGE: its name; NOTE: one
# sentence for its description (who installs it). The .deb is
# DIR/PACKAGE_0-test_all.deb.
set -euo pipefail
[ $# = 3 ] || { echo "usage: mofed-standin.sh DIR PACKAGE NOTE" >&2; exit 2; }
dir=$1 package=$2 note=$3
mkdir -p "$dir"
cat >"$dir/standin.ctl" <<CTL
Section: misc
Priority: optional
Standards-Version: 4.6.2
Package: $package
Version: 99:0-test
Description: test stand-in for MLNX_OFED's kernel modules
 $note
CTL
cd "$dir" && equivs-build standin.ctl
