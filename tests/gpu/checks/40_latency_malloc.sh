#!/usr/bin/env bash
# usage: 40_latency_malloc.sh GPUSCOPE_BIN OUT_DIR
# The chapter's experiment 3 as a tool: cudaMalloc/cudaFree of 1 MiB, 1000 times
# (tests/gpu/bin/malloc_loop), under gpuscope latency. Records the histogram and the driver.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog malloc_loop
"$GPUSCOPE" latency --json --api cudaMalloc,cudaFree,cuMemAlloc_v2,cuMemFree_v2 -c malloc_loop "${PROBE_LIBS[@]}" -d 90 \
  >"$OUT/latency.jsonl" 2>"$OUT/latency.err" &
LAT=$!
track "$LAT"
sleep 4
alive "$LAT" || fail "gpuscope latency exited early: $(tail -c 300 "$OUT/latency.err")"
timeout 60 "$PROG" 1000 >"$OUT/workload.out" 2>&1 || fail "malloc_loop failed: $(tail -c 300 "$OUT/workload.out")"
sleep 0.5
term_wait "$LAT"
"$GPUSCOPE" latency --api cudaMalloc -c malloc_loop "${PROBE_LIBS[@]}" -d 12 >"$OUT/latency.txt" 2>&1 &
TXT=$!
track "$TXT"
sleep 4
timeout 60 "$PROG" 1000 >/dev/null 2>&1 || true
wait_exit "$TXT" 30
cat "$OUT/latency.txt" >&2
python3 - "$OUT/latency.jsonl" "$OUT/workload.out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
done = open(sys.argv[2]).read()
lat = {r["api"]: r for r in rows if r.get("type") == "latency"}
err = {(r["api"], r["ret_name"]): r["count"] for r in rows if r.get("type") == "errors"}
m = lat.get("cudaMalloc")
if not m:
    print("FAIL 40_latency_malloc: no cudaMalloc histogram"); sys.exit(1)
ok = m["count"] == 1000 and err.get(("cudaMalloc", "cudaSuccess")) == 1000
drv = lat.get("cuMemAlloc_v2", {}).get("count")
pct = ", ".join(f"{p} {m[p + '_lo_ns']/1e3:.1f}-{m[p + '_hi_ns']/1e3:.1f} us" for p in ("p50", "p95", "p99"))
msg = (f"cudaMalloc 1 MiB x{m['count']}: {pct}, max {m['max_ns']/1e3:.1f} us; cudaSuccess {err.get(('cudaMalloc','cudaSuccess'))}; "
       f"cuMemAlloc_v2 count {drv}; workload: {done.strip().splitlines()[-1]}")
print(("PASS" if ok else "FAIL") + " 40_latency_malloc: " + msg)
sys.exit(0 if ok else 1)
PY
