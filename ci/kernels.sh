# Sourced: sets KVER_BOOKWORM and KVER_BACKPORTS to the kernel releases the
# tests build for and boot, as named by Debian's linux-headers-amd64
# metapackage in each suite (needs `apt-get update` with ci/apt-sources.sh).
KVER_BOOKWORM=$(apt-cache depends linux-headers-amd64 2>/dev/null | awk '/Depends: linux-headers-/{sub("linux-headers-","",$2); print $2; exit}')
KVER_BACKPORTS=$(apt-cache depends linux-headers-amd64/bookworm-backports 2>/dev/null | awk '/Depends: linux-headers-/{sub("linux-headers-","",$2); print $2; exit}')
if [ -z "$KVER_BOOKWORM" ] || [ -z "$KVER_BACKPORTS" ]; then
  echo "kernels.sh: cannot resolve the bookworm / bookworm-backports kernels; run: sudo bash ci/apt-sources.sh && sudo apt-get update" >&2
  return 2 2>/dev/null || exit 2
fi
export KVER_BOOKWORM KVER_BACKPORTS
