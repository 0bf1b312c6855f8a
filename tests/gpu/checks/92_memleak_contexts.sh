#!/usr/bin/env bash
# usage: 92_memleak_contexts.sh GPUSCOPE_BIN OUT_DIR
# A: tests/gpu/bin/ctx_reset (tests/fixtures/cuda/ctx_reset.cu, nvcc -cudart shared) under
#    `gpuscope memleak --json`: it allocates 3 MiB and 1 MiB on the primary context, frees the
#    1 MiB block, calls cudaDeviceReset() and exits. Expect one context_released row with the
#    3 MiB block (api cudaDeviceReset, device 0) and no leak rows. `gpuscope trace` runs beside
#    it to record which context calls the real runtime makes through libcuda's exports.
# B: PyTorch started after gpuscope: the summary's per-device outstanding bytes (device 0)
#    equal torch.cuda.memory_reserved() at each quiet point, and nothing is on an unknown device.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog ctx_reset

"$GPUSCOPE" memleak --json -c ctx_reset "${PROBE_LIBS[@]}" -d 60 >"$OUT/ctx_reset.jsonl" 2>"$OUT/ctx_reset.err" &
ML=$!
track "$ML"
start_tracer "$OUT/trace" -c ctx_reset "${PROBE_LIBS[@]}"
wait_for "$OUT/ctx_reset.err" 'tracking' 60 "$ML" || fail "memleak did not start: $(tail -c 300 "$OUT/ctx_reset.err")"
timeout 60 "$PROG" >"$OUT/ctx_reset.out" 2>&1 || fail "ctx_reset failed: $(tail -c 300 "$OUT/ctx_reset.out")"
sleep 1
term_wait "$ML"
stop_tracer "$OUT/trace"
ra=0
python3 - "$OUT/ctx_reset.jsonl" "$OUT/ctx_reset.out" "$OUT/trace.jsonl" >"$OUT/a.result" <<'PY' || ra=$?
import collections, json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = open(sys.argv[2]).read()
pid = int(re.search(r"ready pid=(\d+)", out).group(1))
leaked = int(re.search(r"leaked (\d+) at", out).group(1))
reset_ok = "cudaDeviceReset cudaSuccess" in out
rel = [r for r in rows if r.get("type") == "context_released" and r["pid"] == pid]
leaks = [r for r in rows if r.get("type") == "leak" and r["pid"] == pid]
summ = [r for r in rows if r.get("type") == "summary" and r["pid"] == pid and r["state"] == "exited"]
calls = collections.Counter(e["api"] for e in (json.loads(l) for l in open(sys.argv[3]) if l.startswith("{"))
                            if e.get("pid") == pid and e.get("phase") == "exit")
ctx_calls = {k: v for k, v in calls.items() if "Ctx" in k or k in ("cudaSetDevice", "cudaDeviceReset")}
print(f"ctx_reset pid {pid}: reset {'ok' if reset_ok else 'FAILED'}; context_released "
      f"{[(r['api'], r['device'], r['allocs'], r['bytes']) for r in rel]} (want one with 1 x {leaked}); "
      f"leak rows {len(leaks)} (want 0); final outstanding {summ[-1]['outstanding_bytes'] if summ else None}; "
      f"context calls seen {ctx_calls}")
ok = (reset_ok and len(rel) == 1 and rel[0]["bytes"] == leaked and rel[0]["allocs"] == 1
      and rel[0]["api"] == "cudaDeviceReset" and rel[0]["device"] == 0 and not leaks
      and summ and summ[-1]["outstanding_bytes"] == 0)
sys.exit(0 if ok else 1)
PY
cat "$OUT/a.result" >&2

cat >"$OUT/devices.py" <<'PY'
import ctypes, json, os, sys, time
ctypes.CDLL(None).prctl(15, b"gs_ctxtorch", 0, 0, 0)  # PR_SET_NAME: gpuscope -c picks this process
print("READY", os.getpid(), flush=True)
while not os.path.exists(sys.argv[1]): time.sleep(0.05)
import torch
def quiet(tag):
    torch.cuda.synchronize(); time.sleep(2.5)
    print("POINT", json.dumps({"tag": tag, "reserved": torch.cuda.memory_reserved(0)}), flush=True)
    time.sleep(2.5)
x = torch.zeros(1, device="cuda"); quiet("init")
a = torch.empty(300 << 20, dtype=torch.uint8, device="cuda"); quiet("300MiB")
b = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); quiet("+1GiB")
c = [torch.empty((7 + i) << 20, dtype=torch.uint8, device="cuda") for i in range(10)]; quiet("+10 small")
del b; torch.cuda.empty_cache(); quiet("-1GiB, empty_cache")
PY
LIBCUDA=$(ld_cache_libcuda)
"$GPUSCOPE" memleak --json --interval 1 -c gs_ctxtorch ${LIBCUDA:+--lib "$LIBCUDA"} -d 120 >"$OUT/devices.jsonl" 2>"$OUT/devices.err" &
ML=$!
track "$ML"
wait_for "$OUT/devices.err" 'tracking' 60 "$ML" || fail "memleak did not start: $(tail -c 300 "$OUT/devices.err")"
python3 -u -B "$OUT/devices.py" "$OUT/go" >"$OUT/devices.out" 2>&1 &
WL=$!
track "$WL"
wait_for "$OUT/devices.out" '^READY' 90 "$WL" || fail "devices.py not ready: $(tail -c 300 "$OUT/devices.out")"
touch "$OUT/go"
wait_exit "$WL" 100
sleep 2
term_wait "$ML"
rb=0
python3 - "$OUT/devices.jsonl" "$OUT/devices.out" >"$OUT/b.result" <<'PY' || rb=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
points = [json.loads(l[6:]) for l in open(sys.argv[2]) if l.startswith("POINT ")]
summ = [r for r in rows if r.get("type") == "summary" and r.get("state") == "running"]
dev0 = [next((d["outstanding_bytes"] for d in r["devices"] if d["device"] == 0), 0) for r in summ]
unknown = max([d["outstanding_bytes"] for r in summ for d in r["devices"] if d["device"] < 0] or [0])
runs = []
for v in dev0:
    if runs and runs[-1][0] == v: runs[-1][1] += 1
    else: runs.append([v, 1])
plateaus = [v for v, n in runs if n >= 3]
ok, lines, j = True, [], 0
for p in points:
    k = next((k for k in range(j, len(plateaus)) if plateaus[k] == p["reserved"]), None)
    lines.append(f"{p['tag']}: reserved {p['reserved']} device 0 {plateaus[k] if k is not None else None}")
    ok = ok and k is not None
    j = k + 1 if k is not None else j
print("per device: " + "; ".join(lines) + f"; most bytes on an unknown device {unknown}; plateaus {plateaus}")
sys.exit(0 if ok and points and unknown == 0 else 1)
PY
cat "$OUT/b.result" >&2
[[ $ra == 0 && $rb == 0 ]] && pass "$(cat "$OUT/a.result") | $(cat "$OUT/b.result")"
fail "$(cat "$OUT/a.result") | $(cat "$OUT/b.result")"
