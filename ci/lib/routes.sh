# What the suites of xtask's package routes (ci/test-rpm.sh, test-deb.sh,
# test-dkms.sh, test-fleet.sh, test-fleet-arm64.sh) check the same way.
# The sourcing script has sourced ci/checks.sh and sets $root (the
# workspace), $work (its scratch directory) and $xtask (the xtask binary).

# bad_input SUBCOMMAND EXPECTED ARG...: `xtask SUBCOMMAND ARG...` is bad
# input: it exits 2, says EXPECTED (grep, fixed string), and writes
# nothing into $work/bad (created empty first; pass `--out "$work/bad"`
# where the route writes there).
bad_input() {
    local subcommand=$1 expected=$2; shift 2
    local dir=$work/bad
    rm -rf "$dir"; mkdir -p "$dir"
    "$xtask" "$subcommand" "$@" >"$work/bad.out" 2>&1
    local status=$?
    cat "$work/bad.out"
    [ "$status" = 2 ] && grep -qF -- "$expected" "$work/bad.out" && [ -z "$(ls -A "$dir")" ]
}
# dist_of ID: the dist tag packaging/distros.yaml gives distribution ID
# (`.el9`, or empty).
dist_of() {
    sed -n "/^  - id: $1\$/,/^  - id:/s/^    dist: \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$root/packaging/distros.yaml"
}
# lintian_quiet ARG...: lintian says nothing (its notice about running as
# root aside); what it says is shown.
lintian_quiet() {
    local out
    out=$(lintian "$@" 2>&1 | grep -v 'running with root')
    echo "$out"
    [ -z "$out" ]
}
