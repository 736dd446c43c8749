#!/usr/bin/env bash
# Adds the apt sources this project's builds and tests need to a Debian 12
# machine whose sources list only bookworm main, without letting any other
# suite replace the system's packages:
#   - bookworm contrib/non-free: the NVIDIA 535 sources (nv-p2p.h);
#   - bookworm-backports main: the 6.12 kernels. Backports is NotAutomatic in
#     its Release file (priority 100), so it is only used when a package is
#     explicitly selected as <pkg>/bookworm-backports.
# Never adds trixie: see docs/testing.md on what that did once.
set -euo pipefail
list=/etc/apt/sources.list.d/nv-peer-mem-ci.sources
want='Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
'
if [ ! -f "$list" ] || [ "$(cat "$list")" != "$want" ]; then
    printf '%s' "$want" > "$list"
fi
# Belt and braces: pin backports below the system's suites even if a mirror
# drops NotAutomatic.
cat > /etc/apt/preferences.d/nv-peer-mem-ci <<'PIN'
Package: *
Pin: release n=bookworm-backports
Pin-Priority: 100
PIN
