#!/usr/bin/env bash
# gpuscope and its tests built with ASAN+UBSAN (build-asan/, -DGPUSCOPE_SANITIZE=ON, see
# cmake/Sanitize.cmake), then the tests that fit CI's time under it:
#   - every unit test, and every integration test (gpuscope run as root, loading BPF, against
#     the stand-in and real-cudart fixtures): trace, memleak, kernels, latency, ioctl, uvm,
#     starvation, bridge, doctor;
#   - not the bench_smoke_* tests (they time overhead ratios, which ASAN distorts; the benches
#     are not even built here), nor fuzz_* (sanitized already), bpf_header_deps, format or
#     deploy_* (no code of ours runs in them), nor Memory.* (they assert peak and steady RSS,
#     which ASAN's shadow memory and quarantine distort), nor Reliability.NumericFlagsRejectNonsense
#     (six runs of each of ~80 flags, 110 s here: it drives the one number validator that
#     CliBadInput.* runs under ASAN already).
# The BPF skeletons are the release build's (build/generated, built first here when missing or
# out of date): the sanitizer does not apply to them, and build-asan/ has no clang BPF rule.
# Any sanitizer report fails the run. ASAN and LSAN reports (from every process, including the
# gpuscope the tests start) go to build-asan/sanitizer-logs/, and a non-empty folder is a failure
# even when the test itself passed. UBSAN aborts the process on its first report
# (-fno-sanitize-recover, exit 1); GCC prints those on stderr whatever log_path says, so they
# show in the failing test's output. LSAN suppressions (libraries only): scripts/lsan.supp.
# Usage: scripts/test-asan.sh [extra ctest args]; GPUSCOPE_ASAN_EXCLUDE overrides the -E regex.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
b=build-asan
exclude=${GPUSCOPE_ASAN_EXCLUDE:-'^(bench_smoke_|fuzz_|bpf_header_deps$|format$|deploy_|Memory\.|Reliability\.NumericFlagsRejectNonsense$)'}

start=$(date +%s)
bash scripts/build.sh bpf_skels >/dev/null || { echo "test-asan: build/'s BPF skeletons failed to build" >&2; exit 2; }
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUSCOPE_SANITIZE=ON -DGPUSCOPE_FUZZ=OFF \
  -DGPUSCOPE_BPF_PREBUILT="$root/build/generated" >/dev/null
cmake --build "$b" -j"$(nproc)" >"$b/build.log" 2>&1 || { tail -50 "$b/build.log"; echo "test-asan: build failed" >&2; exit 2; }
built=$(date +%s)
# A sanitized build that silently is not one would pass everything. ldd's output is captured
# first: `ldd | grep -q` under pipefail fails whenever grep exits before ldd is done (SIGPIPE).
libs=$(ldd "$b/gpuscope")
if [[ $libs != *libasan* ]]; then echo "test-asan: $b/gpuscope is not linked with ASAN" >&2; exit 2; fi
echo "test-asan: ASAN+UBSAN build in $((built - start)) s" >&2

logs=$root/$b/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
common="log_path=$logs/report:print_stacktrace=1"
export ASAN_OPTIONS="$common:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export LSAN_OPTIONS="$common:suppressions=$root/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="$common:halt_on_error=1"

rc=0
(cd "$b" && ctest --output-on-failure --timeout 300 -j"$(nproc)" -E "$exclude" "$@") || rc=$?
echo "test-asan: tests in $(($(date +%s) - built)) s" >&2
if compgen -G "$logs/report*" >/dev/null; then
  for f in "$logs"/report*; do echo "=== $f" >&2; cat "$f" >&2; done
  echo "test-asan: sanitizer reports above (build-asan/sanitizer-logs/)" >&2
  ((rc)) || rc=3
fi
exit $rc
