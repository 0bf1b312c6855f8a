#!/usr/bin/env bash
# The whole test suite, as root: unit tests, real-BPF integration tests, benchmark smoke runs,
# fuzz targets (30 s each) and the format check; then the ASAN+UBSAN build and its tests
# (scripts/test-asan.sh). A failure of either fails the run, and the main ctest summary is
# printed again at the very end. GPUSCOPE_ASAN=advisory reports the sanitizer step without
# failing on it; GPUSCOPE_ASAN=off skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
main_rc=0
# -j: the tests that may share the machine (unit tests, fuzz targets, format) run two at a time;
# every test that loads BPF or times something is RUN_SERIAL and runs alone.
(cd build && ctest --output-on-failure --timeout 300 -j"$(nproc)") 2>&1 | tee build/ctest-main.log || main_rc=$?

asan_rc=0
case ${GPUSCOPE_ASAN:-on} in
  off) echo "test.sh: ASAN+UBSAN step skipped (GPUSCOPE_ASAN=off)" ;;
  *)
    bash scripts/test-asan.sh || asan_rc=$?
    if ((asan_rc)); then
      echo "test.sh: ASAN+UBSAN step FAILED (exit $asan_rc): see above and build-asan/sanitizer-logs/"
      [ "${GPUSCOPE_ASAN:-on}" = advisory ] && asan_rc=0
    else
      echo "test.sh: ASAN+UBSAN step passed"
    fi
    ;;
esac

# The closing lines are the main ctest run's summary.
echo "--- main ctest summary (build/)"
sed -n '/tests passed\|tests failed out of/,$p' build/ctest-main.log
# A failed fuzz target's key report lines (tests/fuzz/run_fuzzer.sh), else lost in a long log.
for f in build/fuzz/artifacts/*.failure.txt; do [ -f "$f" ] && cat "$f"; done
((main_rc)) && exit "$main_rc"
exit "$asan_rc"
