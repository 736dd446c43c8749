# Sourced by the test scripts (ci/test-kmod.sh, test-rpm.sh, test-deb.sh):
# the pass/fail bookkeeping and the closing `N passed, M failed` line.
# The sourcing script sets $work (its scratch dir; command output goes to
# $work/log) and calls `finish` last.
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# check "description" command...: runs the command, output to the log; a
# failure also shows the command's last lines, so CI output says why.
check() {
    local what=$1; shift
    if "$@" >"$work/last" 2>&1; then
        cat "$work/last" >>"$work/log"
        pass "$what"
    else
        cat "$work/last" >>"$work/log"
        fail "$what (see $work/log)"
        tail -n 25 "$work/last" | sed 's/^/    /'
    fi
}
# skip "WHAT: what is missing and the fix": a check that cannot run here.
# A user without the fixtures sees SKIP and goes on; under CI=true (CI, and
# .ci/run) a check that did not run is a failure naming what is missing:
# CI never passes what it did not test (issue 60).
skip() {
    if [ "${CI:-}" = true ]; then
        fail "not run, and CI=true: $*"
    else
        echo "SKIP: $*"
    fi
}
# skip_suite "WHAT": the same for a whole suite that cannot start; ends the
# script with its count line.
skip_suite() {
    skip "$*"
    if [ "${CI:-}" = true ]; then
        finish
    fi
    echo "$passed passed, $failed failed (skipped)"
    exit 0
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}
# require_root_and_tools SCRIPT TOOL...: stops with the fix when not root or
# a tool is missing.
require_root_and_tools() {
    local script=$1; shift
    if [ "$(id -u)" != 0 ]; then
        echo "$script: run as root (sudo bash ci/$script)" >&2
        exit 2
    fi
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$script: $tool is missing; run: sudo bash ci/setup-host.sh" >&2; exit 2; }
    done
}
