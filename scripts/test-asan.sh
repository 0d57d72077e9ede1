#!/usr/bin/env bash
# `make test-asan`: runs the tests of an AddressSanitizer + UndefinedBehaviorSanitizer build
# (BUILD_DIR, default build-asan, configured with -DCOLLAGE_SANITIZE=ON by the Makefile).
# Fails on any test failure and on any sanitizer report, including reports from processes
# whose exit status a test expects to be non-zero (forked conformance children, the CLI,
# measure workers): every report is written to $BUILD_DIR/sanitizer-logs/ and printed here.
# Suppressions (third-party libraries only, each justified) are in scripts/sanitizer/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
build=$(cd "$BUILD_DIR" && pwd)
logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"

# Halide's compiled kernels go to a cache private to this build.
export COLLAGE_CACHE_DIR=$build/cache
common="print_suppressions=0:log_path=$logs/report"
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_string_checks=1:$common:suppressions=$root/scripts/sanitizer/asan.supp"
export LSAN_OPTIONS="$common:suppressions=$root/scripts/sanitizer/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:$common:suppressions=$root/scripts/sanitizer/ubsan.supp"

# Tests that cannot run under the sanitizers (keep this list short; say why for each).
exclude=(
)
# Tests whose kernels raise SIGSEGV on purpose and check that the CLI reports the signal:
# ASan's SEGV handler would turn the signal into a report and exit status 1, so they run in
# a second pass with handle_segv=0 (a real segfault still kills the process and fails them).
raises_segv=(
  '^Isolation\.'
)
join() { local IFS='|'; echo "$*"; }

status=0
run_ctest() {
  (cd "$build" && ctest --output-on-failure -j "$JOBS" --timeout 3000 "$@") || status=$?
}
run_ctest -E "$(join "${exclude[@]}" "${raises_segv[@]}")" ${CTEST_ARGS:-}
ASAN_OPTIONS="$ASAN_OPTIONS:handle_segv=0" run_ctest -R "$(join "${raises_segv[@]}")" \
  ${exclude[0]:+-E "$(join "${exclude[@]}")"} ${CTEST_ARGS:-}

# Each process that said anything has a log; only errors count (ASan also logs warnings
# there, e.g. about makecontext/swapcontext, which some third-party libraries use).
mapfile -t reports < <(grep -l -E 'ERROR: [A-Za-z]+Sanitizer|runtime error:' "$logs"/report.* 2>/dev/null)
if [ ${#reports[@]} -gt 0 ]; then
  echo "test-asan: ${#reports[@]} sanitizer report(s):"
  for r in "${reports[@]}"; do
    echo "==== $r"
    cat "$r"
  done
  status=1
fi
[ "$status" -eq 0 ] && echo "test-asan: all tests passed, no sanitizer reports"
exit "$status"
