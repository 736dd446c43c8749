#!/usr/bin/env bash
# Kernel build trees configured as other distributions configure their
# kernels (issue 56): Debian's own linux-source, Debian's own configuration
# of that release, changed by one option set of kmod/tests/kernel-configs/,
# then `make olddefconfig modules_prepare`: a tree an external module builds
# against (KDIR=) exactly as against a distribution's headers, with that
# distribution's code generation options.
#
#   ci/config-trees.sh list        the option sets' names
#   ci/config-trees.sh kdir NAME   ensure NAME's prepared tree; print its path
#   ci/config-trees.sh info NAME   the set's source release and arch
#
# An option set is NAME.config: `# source: 6.1|6.12`, `# arch: x86_64|arm64`,
# `# rustflags: ...` (what rust-flags.sh must give for it: ci/test-kmod.sh
# checks the Rust object's command line), then .config lines (`CONFIG_X=y`, `CONFIG_X=<value>`, `# CONFIG_X is not
# set`). Every line must hold in the tree olddefconfig leaves, or the tree
# is refused: a tree that silently lost an option would test nothing.
#
# Base configurations: the host's installed linux-headers of the bookworm
# (6.1) and bookworm-backports (6.12) kernels (ci/kernels.sh); arm64's from
# ci/fetch-arm64-kernel.sh. Sources: linux-source-<x.y> at the headers'
# version where the archive has it, else the newest it has.
# Cache: /var/cache/nv-peer-mem-ci/config-trees: src-<version>/ (the
# unpacked source, shared by the sets of a release) and <name>-<key>/ (the
# prepared tree; <key> hashes the source version, the base configuration,
# the option set and the compiler), so a later run prepares nothing and
# needs no download. Costs on the 2-core CI machine: unpacking a source
# about 10-20 s, preparing a tree about 10-20 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
sets=$top/kmod/tests/kernel-configs
cache=${NVPM_CACHE:-/var/cache/nv-peer-mem-ci}/config-trees
. "$(dirname "${BASH_SOURCE[0]}")/lib/die.sh"

header() { sed -n "s/^# $2: *//p" "$1" | head -n1; }
options() { grep -E '^(CONFIG_[A-Z0-9_]+=|# CONFIG_[A-Z0-9_]+ is not set$)' "$1"; }

set_file() {
    local name=$1
    case "$name" in ''|*[!a-z0-9.-]*) die "'$name' is not an option set's name (lower case, digits, '.', '-')" ;; esac
    [ -f "$sets/$name.config" ] || die "no option set $name (kmod/tests/kernel-configs/$name.config); sets: $(list | tr '\n' ' ')"
    echo "$sets/$name.config"
}
list() { local f; for f in "$sets"/*.config; do basename "$f" .config; done; }

# base_config SERIES ARCH: Debian's own .config of that release.
base_config() {
    . "$here/kernels.sh"
    local kver
    case "$1" in
        6.1) kver=$KVER_BOOKWORM ;;
        6.12) kver=$KVER_BACKPORTS ;;
        *) die "source release '$1' is not 6.1 or 6.12" ;;
    esac
    case "$2" in
        x86_64) echo "/usr/src/linux-headers-$kver/.config" ;;
        arm64)
            local root; root=$(bash "$here/fetch-arm64-kernel.sh" "$kver") || die "no arm64 kernel (above)"
            echo "$root/usr/src/linux-headers-${kver%-amd64}-arm64/.config" ;;
        *) die "arch '$2' is not x86_64 or arm64" ;;
    esac
}

# source_tree SERIES: the unpacked linux-source-SERIES; prints its path.
source_tree() {
    local series=$1 pkg=linux-source-$1 want version
    . "$here/kernels.sh"
    case "$series" in 6.1) want=$KVER_BOOKWORM ;; 6.12) want=$KVER_BACKPORTS ;; esac
    want=$(dpkg-query -W -f='${Version}' "linux-headers-$want" 2>/dev/null || true)
    if apt-cache madison "$pkg" 2>/dev/null | awk '{print $3}' | grep -qxF "$want"; then
        version=$want
    else
        version=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    fi
    local src=$cache/src-$series
    if [ -f "$src/version" ] && { [ "$(cat "$src/version")" = "$version" ] || [ -z "$version" ] || [ "$version" = "(none)" ]; }; then
        echo "$src/linux-source-$series"; return
    fi
    [ -n "$version" ] && [ "$version" != "(none)" ] ||
        die "apt knows no $pkg and nothing is cached; run: sudo apt-get update (bookworm and bookworm-security carry it)"
    echo "==> $pkg $version: download and unpack (once; cached in $src)" >&2
    local start=$SECONDS dl; dl=$(mktemp -d)
    (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$version" >&2) ||
        { rm -rf "$dl"; die "the archive has no $pkg at $version (apt-get download failed, above)"; }
    rm -rf "$src.tmp" && mkdir -p "$src.tmp"
    dpkg-deb --fsys-tarfile "$dl"/*.deb | tar -x -O "./usr/src/linux-source-$series.tar.xz" | tar -xJ -C "$src.tmp" ||
        { rm -rf "$dl" "$src.tmp"; die "cannot unpack $pkg $version"; }
    rm -rf "$dl"
    echo "$version" >"$src.tmp/version"
    rm -rf "$src" && mv "$src.tmp" "$src"
    echo "==> $pkg $version unpacked in $((SECONDS - start)) s" >&2
    echo "$src/linux-source-$series"
}

kdir() {
    local name=$1 file series arch base src
    file=$(set_file "$name")
    series=$(header "$file" source) arch=$(header "$file" arch)
    base=$(base_config "$series" "$arch")
    [ -f "$base" ] || die "no base configuration $base; run: sudo bash ci/setup-host.sh"
    mkdir -p "$cache"
    exec 9>"$cache/.lock"; flock 9
    src=$(source_tree "$series")
    local -a make_args=(-s -C "$src")
    local cc=gcc
    if [ "$arch" = arm64 ]; then
        make_args+=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-); cc=aarch64-linux-gnu-gcc
    fi
    local key out
    key=$( { cat "$src/../version"; sha256sum <"$base"; options "$file"; "$cc" --version | head -n1; } | sha256sum | cut -c1-12)
    out=$cache/$name-$key
    if [ -f "$out/.prepared" ]; then echo "$out"; return; fi
    echo "==> $name: preparing a $series $arch tree (Debian's configuration + kmod/tests/kernel-configs/$name.config)" >&2
    local start=$SECONDS line opt val
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    cp "$base" "$out.tmp/.config"
    while IFS= read -r line; do
        case "$line" in
            "# CONFIG_"*" is not set") opt=${line#\# CONFIG_}; opt=${opt% is not set}
                "$src/scripts/config" --file "$out.tmp/.config" --disable "$opt" ;;
            CONFIG_*=*) opt=${line%%=*}; opt=${opt#CONFIG_}; val=${line#*=}
                "$src/scripts/config" --file "$out.tmp/.config" --set-val "$opt" "$val" ;;
        esac
    done < <(options "$file")
    if ! make "${make_args[@]}" O="$out.tmp" olddefconfig >"$out.tmp.log" 2>&1; then
        tail -n 20 "$out.tmp.log" >&2; rm -rf "$out.tmp"; die "make olddefconfig failed for $name (log: $out.tmp.log)"
    fi
    local lost=()
    while IFS= read -r line; do
        case "$line" in
            "# CONFIG_"*) opt=${line#\# }; opt=${opt%% *}
                grep -q "^$opt=" "$out.tmp/.config" && lost+=("$line") ;;
            *) grep -qxF "$line" "$out.tmp/.config" || lost+=("$line") ;;
        esac
    done < <(options "$file")
    [ ${#lost[@]} = 0 ] || { rm -rf "$out.tmp"; die "$name: olddefconfig did not keep: ${lost[*]} (an option whose dependencies the tree lacks; fix kmod/tests/kernel-configs/$name.config)"; }
    if ! make "${make_args[@]}" O="$out.tmp" -j"$(nproc)" modules_prepare >>"$out.tmp.log" 2>&1; then
        tail -n 20 "$out.tmp.log" >&2; rm -rf "$out.tmp"; die "make modules_prepare failed for $name (log: $out.tmp.log)"
    fi
    touch "$out.tmp/.prepared"
    local old; for old in "$cache/$name"-*; do [ "$old" = "$out.tmp" ] || [ "$old" = "$out.tmp.log" ] || rm -rf "$old"; done
    mv "$out.tmp" "$out" && mv "$out.tmp.log" "$out.log"
    echo "==> $name prepared in $((SECONDS - start)) s" >&2
    echo "$out"
}

cmd=${1:-}; shift || true
case "$cmd" in
    list) [ $# = 0 ] || die "usage: ci/config-trees.sh list"; list ;;
    kdir) [ $# = 1 ] || die "usage: ci/config-trees.sh kdir NAME"; [ "$(id -u)" = 0 ] || die "run as root (it downloads with apt)"; kdir "$1" ;;
    info) [ $# = 1 ] || die "usage: ci/config-trees.sh info NAME"; f=$(set_file "$1")
        echo "$(header "$f" source) $(header "$f" arch) $(header "$f" rustflags)" ;;
    *) die "usage: ci/config-trees.sh list | kdir NAME | info NAME" ;;
esac
