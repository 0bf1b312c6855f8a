#!/usr/bin/env bash
# usage: 30_trace_overhead.sh GPUSCOPE_BIN OUT_DIR
# Host-side cost of real kernel launches (tests/gpu/bin/launch_loop, an empty kernel in a loop)
# under gpuscope trace, against bare counting uprobes on the same sites, in one run
# (tests/gpu/bin/trace_overhead, built from bench/trace_overhead.cpp). Reports the ratios.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog launch_loop BENCH=trace_overhead
timeout 240 "$BENCH" --gpuscope "$GPUSCOPE" --rounds 5 --workload "$PROG 1000" "${PROBE_LIBS[@]}" \
  >"$OUT/overhead.txt" 2>"$OUT/overhead.err" || fail "trace_overhead failed: $(tail -c 300 "$OUT/overhead.err")"
cat "$OUT/overhead.txt" >&2
timeout 240 "$BENCH" --json --gpuscope "$GPUSCOPE" --rounds 3 --workload "$PROG 1000" "${PROBE_LIBS[@]}" \
  >"$OUT/overhead.json" 2>>"$OUT/overhead.err" || true
pass "$(grep -E 'added cost|per call' "$OUT/overhead.txt" | tr -s ' ' | tr '\n' ';')"
