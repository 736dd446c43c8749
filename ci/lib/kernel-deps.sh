# Sourced. header_deps KVER: the packages linux-headers-KVER (installed on
# this host) depends on among linux-headers-* and linux-kbuild-*, one
# `package=version` a line, each at a version the archive has and the
# headers' own Depends allows:
#   - `(= V)` (the -common headers): V;
#   - `(>= V)` or unversioned (linux-kbuild): the version installed on this
#     host, which apt chose for these headers, else apt's candidate. Debian
#     uploads linux-kbuild apart from the headers (bookworm-security had
#     headers 6.1.192-2 with linux-kbuild-6.1 6.1.192-3 only), so asking for
#     the headers' own version fails on a later day's archive.
# Fails, naming what is missing, when apt knows no version that satisfies.
header_deps() {
    local kver=$1 version depends
    version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver" 2>/dev/null) || {
        echo "linux-headers-$kver is not installed on this host; run: sudo bash ci/setup-host.sh" >&2; return 2; }
    depends=$(dpkg-query -W -f='${Depends}' "linux-headers-$kver")
    local dep pkg op want have
    while IFS= read -r dep; do
        # "pkg (op version)" or "pkg"; alternatives (a | b) are not headers.
        pkg=$(sed -n 's/^ *\(linux-\(headers\|kbuild\)-[^ ]*\).*/\1/p' <<<"$dep")
        [ -n "$pkg" ] || continue
        op=$(sed -n 's/.*(\([<>=]*\) *\([^)]*\)).*/\1/p' <<<"$dep")
        want=$(sed -n 's/.*(\([<>=]*\) *\([^)]*\)).*/\2/p' <<<"$dep")
        if [ "$op" = "=" ]; then
            echo "$pkg=$want"
            continue
        fi
        have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
        [ -n "$have" ] || have=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
        if [ -z "$have" ] || [ "$have" = "(none)" ] ||
            { [ -n "$op" ] && ! dpkg --compare-versions "$have" "$op" "$want"; }; then
            echo "no $pkg ${op:+$op $want }is installed or known to apt (linux-headers-$kver $version depends on it); run: sudo apt-get update && sudo bash ci/setup-host.sh" >&2
            return 1
        fi
        echo "$pkg=$have"
    done < <(tr ',' '\n' <<<"$depends")
}
