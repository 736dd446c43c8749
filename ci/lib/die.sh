# die MESSAGE: MESSAGE on stderr after the running script's name, then
# exit 2 (bad input or a missing prerequisite, whose fix MESSAGE names).
# Sourced by the scripts that prepare what the suites read
# (ci/chroot.sh, ci/config-trees.sh, ci/image.sh).
die() { echo "$(basename "${BASH_SOURCE[-1]}"): $*" >&2; exit 2; }
