#!/usr/bin/env bash
# usage: 20_trace_known_launch.sh GPUSCOPE_BIN OUT_DIR
# Traces tests/gpu/bin/calls_shared (nvcc -cudart shared build of tests/fixtures/cuda/calls.cu)
# on both layers: N cudaMalloc and M launches of grid (11,22,33) block (4,5,6) must appear
# exactly, at the runtime and at the driver layer, with the values the program passed.
# The tracer starts first (probes on the program's libcudart and on libcuda.so.1); the
# program then waits DELAY_MS before its first CUDA call.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
export GPUSCOPE # used by start_tracer
N=4 M=7 DELAY_MS=1500
PROG=$GPU_TESTS_DIR/bin/calls_shared
rm -f "$OUT"/{prog.out,prog.err,trace.jsonl,trace.err,figures.json,ldd.txt}
[[ -x $PROG ]] || skip "$PROG missing (build: nvcc -O1 -cudart shared -o calls_shared tests/fixtures/cuda/calls.cu)"

probe_libs_for "$PROG" "$OUT/ldd.txt"
COMM=$(basename "$PROG" | cut -c1-15)

start_tracer "$OUT/trace" -c "$COMM" "${PROBE_LIBS[@]}" -d 60
rc=0
timeout 30 "$PROG" "$N" "$M" "$DELAY_MS" >"$OUT/prog.out" 2>"$OUT/prog.err" || rc=$?
sleep 0.5
stop_tracer "$OUT/trace"
grep '"type":"summary"' "$OUT/trace.jsonl" >&2
PID=$(awk -F'[= ]' '/^ready pid=[0-9]+/ && !n++ { print $3 }' "$OUT/prog.out")
[[ -n $PID ]] || fail "no 'ready pid=' line from $PROG (rc $rc): $(tail -c 300 "$OUT/prog.err" | tr '\n' ' ')"
if [[ $rc != 0 ]] || ! grep -q '^done' "$OUT/prog.out"; then
  fail "$PROG exited with $rc or did not print done: $(tail -c 300 "$OUT/prog.err" | tr '\n' ' ')"
fi

if python3 -B "$GPU_TESTS_DIR/lib/analyze_known_launch.py" "$OUT/trace.jsonl" "$PID" "$N" "$M" \
  "$OUT/figures.json" >"$OUT/result.txt"; then
  cat "$OUT/result.txt"
  exit 0
fi
cat "$OUT/result.txt"
exit 1
