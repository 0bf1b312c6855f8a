#!/usr/bin/env bash
# usage: 30_trace_overhead.sh GPUSCOPE_BIN OUT_DIR
# Placeholder: launch overhead with and without gpuscope attached, using tests/gpu/bin/
# bench_launch (provided by the lead). Its interface is not fixed yet; for now it is run
# with no arguments, once untraced and once traced, its stdout saved and its last line of
# each run reported. No threshold is applied. SKIP (exit 77) while the binary is missing.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
export GPUSCOPE=$1 # used by start_tracer
OUT=$2
PROG=$GPU_TESTS_DIR/bin/bench_launch
mkdir -p "$OUT"
[[ -x $PROG ]] || skip "bench_launch missing ($PROG)"

probe_libs_for "$PROG" "$OUT/ldd.txt"
rc=0
timeout 90 "$PROG" >"$OUT/untraced.out" 2>"$OUT/untraced.err" || rc=$?
[[ $rc == 0 ]] || fail "untraced run exited with $rc: $(tail -c 300 "$OUT/untraced.err" | tr '\n' ' ')"
start_tracer "$OUT/trace" -c "$(basename "$PROG" | cut -c1-15)" "${PROBE_LIBS[@]}" -d 120
timeout 90 "$PROG" >"$OUT/traced.out" 2>"$OUT/traced.err" || rc=$?
stop_tracer "$OUT/trace"
[[ $rc == 0 ]] || fail "traced run exited with $rc: $(tail -c 300 "$OUT/traced.err" | tr '\n' ' ')"
pass "untraced: $(tail -n1 "$OUT/untraced.out"); traced: $(tail -n1 "$OUT/traced.out"); $(grep -h '"type":"summary"' "$OUT/trace.jsonl")"
