#!/usr/bin/env bash
# Lint: formatting, clippy and the tidy tests that keep two files (or the
# code's shape) in step. Runs without root and without the host packages;
# prints one line per check and `N passed, M failed`; exits non-zero on any
# failure.
#
# - cargo fmt --check: the tree stays formatted (rustfmt.toml);
# - cargo clippy on the whole workspace, every target, warnings as errors.
#   This includes kmod/: its lib is #![no_std] but builds for the host (its
#   host tests do too), so clippy checks it with the lints of
#   kmod/Cargo.toml (undocumented_unsafe_blocks denied). The nvpm_kernel
#   cfg (kernel.rs, the FFI) is compiled only by Kbuild, so clippy does not
#   see it; the contract test below covers its declarations;
# - the C/Rust contract (xtask/src/contract/): nv_peer_mem_glue.h against
#   platform.rs and kernel.rs;
# - xtask's tidy tests (xtask/src/tidy.rs): no import loops between
#   modules, no source file over 400 lines without a reason.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
work=$(mktemp -d)
. ci/checks.sh
trap 'rm -rf "$work"' EXIT
command -v cargo >/dev/null || { echo "test-lint.sh: cargo not found; install Rust (https://rustup.rs)" >&2; exit 2; }

check "cargo fmt --check" cargo fmt --all --check
check "cargo clippy --workspace --all-targets -- -D warnings" \
    cargo clippy --locked --workspace --all-targets -- -D warnings
# xtask_tests FILTER: runs xtask's unit tests whose names contain FILTER;
# a filter that matches no test fails (it would pass vacuously).
xtask_tests() {
    cargo test --locked -p xtask --bin xtask -- "$1" 2>&1 | tee "$work/tests"
    grep -Eq '^test result: ok\. [1-9][0-9]* passed' "$work/tests"
}
check "C/Rust contract: nv_peer_mem_glue.h = platform.rs + kernel.rs" xtask_tests contract::
check "xtask tidy: no import loops, no long files without a reason" xtask_tests tidy::
# Issue 60: under CI=true a suite that cannot run what it should fails,
# naming what is missing; a user without the fixtures sees it skipped.
# ci/test-nccl.sh stops before building anything when its fixtures are
# missing, so it shows both for the cost of a shell.
without_fixtures() {  # without_fixtures CI-VALUE WANT-EXIT PATTERN
    env CI="$1" NVPM_FIXTURES=/nonexistent NVPM_TEST_DIR="$work/nccl" bash ci/test-nccl.sh >"$work/skip.out" 2>&1
    local rc=$?; cat "$work/skip.out"
    [ $rc = "$2" ] && grep -qF -- "$3" "$work/skip.out"
}
check "CI=true, a suite without its fixtures: exit 1, FAIL naming the missing file" \
    without_fixtures true 1 "FAIL: not run, and CI=true: NCCL 2.28.9-1: no /nonexistent/nccl-2.28.9-1.tar.gz"
check "without CI, the same suite: SKIP naming it, exit 0" \
    without_fixtures false 0 "SKIP: NCCL 2.28.9-1: no /nonexistent/nccl-2.28.9-1.tar.gz"
finish
