#!/usr/bin/env bash
# usage: 90_memleak.sh GPUSCOPE_BIN OUT_DIR
# A: tests/gpu/bin/leak_app (tests/fixtures/cuda/leak_app.cu, nvcc -cudart shared -lcuda) under
#    `gpuscope memleak --json --stacks`: its leak report must list exactly the blocks it never
#    freed (3 cudaMalloc, 2 cuMemAlloc, the released-but-mapped VMM allocation, the pinned
#    block), at the addresses it printed; its double free must be reported.
# B: PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the VMM allocations are
#    seen, and outstanding_bytes matches torch.cuda.memory_reserved() at each quiet point.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog leak_app

"$GPUSCOPE" memleak --json --stacks -c leak_app "${PROBE_LIBS[@]}" -d 60 >"$OUT/leak_app.jsonl" 2>"$OUT/leak_app.err" &
ML=$!
track "$ML"
sleep 4
alive "$ML" || fail "memleak exited early: $(tail -c 300 "$OUT/leak_app.err")"
timeout 60 "$PROG" >"$OUT/leak_app.out" 2>&1 || fail "leak_app failed: $(tail -c 300 "$OUT/leak_app.out")"
sleep 1
term_wait "$ML"
ra=0
python3 - "$OUT/leak_app.jsonl" "$OUT/leak_app.out" >"$OUT/a.result" <<'PY' || ra=$?
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = open(sys.argv[2]).read()
pid = int(re.search(r"ready pid=(\d+)", out).group(1))
want = {}
for m in re.finditer(r"^(cudaMalloc|cuMemAlloc) (\d+) (0x[0-9a-f]+)$", out, re.M):
    want[int(m.group(3), 16)] = (m.group(1), int(m.group(2)))
m = re.search(r"^cuMemCreate (\d+) handle \S+ mapped at (0x[0-9a-f]+)", out, re.M)
want[int(m.group(2), 16)] = ("cuMemCreate", int(m.group(1)))
m = re.search(r"^cudaMallocHost (\d+) (0x[0-9a-f]+)", out, re.M)
want[int(m.group(2), 16)] = ("cudaMallocHost", int(m.group(1)))
leaks = [r for r in rows if r.get("type") == "leak" and r["pid"] == pid]
got = {int(r["addr"], 16): (r["api"].split("_")[0], r["size"]) for r in leaks}
bad = [r for r in rows if r.get("type") == "bad_free" and r["pid"] == pid]
summ = [r for r in rows if r.get("type") == "summary" and r["pid"] == pid]
last = summ[-1] if summ else {}
stacks = sum(1 for r in leaks if r.get("stack"))
print(f"leak_app pid {pid}: leaks {len(leaks)} (want {len(want)}), exact {got == want}; bad_free {[(b['api'], b['reason']) for b in bad]}; "
      f"summary allocs_ok {last.get('allocs_ok')} frees_ok {last.get('frees_ok')} frees_failed {last.get('frees_failed')} "
      f"free_errors {last.get('free_errors')}; leaks with stacks {stacks}; first stack {leaks[0].get('stack', [])[:4] if leaks else None}")
if got != want:
    print("want", {hex(k): v for k, v in want.items()}); print("got ", {hex(k): v for k, v in got.items()})
ok = got == want and any("cudaFree" in b["api"] for b in bad) and last.get("allocs_ok") == len(want) + 3  # + the three blocks it freed
sys.exit(0 if ok else 1)
PY
cat "$OUT/a.result" >&2

cat >"$OUT/expand.py" <<'PY'
import json, os, sys, time, torch
def quiet(tag):
    torch.cuda.synchronize(); time.sleep(2.5)
    print("POINT", json.dumps({"tag": tag, "t_ns": time.clock_gettime_ns(time.CLOCK_REALTIME),
                               "reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}), flush=True)
    time.sleep(2.5)
print("READY", os.getpid(), os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), flush=True)
while not os.path.exists(sys.argv[1]): time.sleep(0.05)
torch.cuda.init(); x = torch.zeros(1, device="cuda"); quiet("init")
a = torch.empty(300 << 20, dtype=torch.uint8, device="cuda"); quiet("300MiB")
b = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); quiet("+1GiB")
c = [torch.empty((7 + i) << 20, dtype=torch.uint8, device="cuda") for i in range(10)]; quiet("+10 small")
del b; torch.cuda.empty_cache(); quiet("-1GiB, empty_cache")
PY
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 -u -B "$OUT/expand.py" "$OUT/go" >"$OUT/expand.out" 2>&1 &
WL=$!
track "$WL"
wait_for "$OUT/expand.out" '^READY' 90 "$WL" || fail "expand.py not ready: $(tail -c 300 "$OUT/expand.out")"
LIBCUDA=$(ld_cache_libcuda)
"$GPUSCOPE" memleak --json --interval 1 -p "$WL" ${LIBCUDA:+--lib "$LIBCUDA"} -d 90 >"$OUT/expand.jsonl" 2>"$OUT/expand.err" &
ML=$!
track "$ML"
sleep 4
touch "$OUT/go"
wait_exit "$WL" 90
wait_exit "$ML" 30
rb=0
python3 - "$OUT/expand.jsonl" "$OUT/expand.out" >"$OUT/b.result" <<'PY' || rb=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
points = [json.loads(l[6:]) for l in open(sys.argv[2]) if l.startswith("POINT ")]
summ = [r for r in rows if r.get("type") == "summary"]
# The summaries carry no timestamp: take, for each point, the summaries printed while the
# program was quiet around it -- they all equal the last one before the next change. Use
# the most frequent outstanding value between consecutive changes.
vals = [r["outstanding_bytes"] for r in summ if r.get("state") != "exited"]
runs = []
for v in vals:
    if runs and runs[-1][0] == v: runs[-1][1] += 1
    else: runs.append([v, 1])
plateaus = [v for v, n in runs if n >= 3]
# Each quiet point, in order, must find a later plateau equal to memory_reserved() or above
# it by less than the driver's 2 MiB granularity.
ok = True
lines = []
j = 0
for p in points:
    k = next((k for k in range(j, len(plateaus)) if 0 <= plateaus[k] - p["reserved"] < 2 << 20), None)
    o = plateaus[k] if k is not None else None
    lines.append(f"{p['tag']}: reserved {p['reserved']} outstanding {o}")
    ok = ok and k is not None
    j = k + 1 if k is not None else j
vmm = [r for r in rows if r.get("type") == "leak" and r.get("api", "").startswith("cuMemCreate")]
print("expandable segments: " + "; ".join(lines) + f"; VMM rows at exit {len(vmm)}; plateaus {plateaus}")
ok = ok and len(vmm) > 0
sys.exit(0 if ok else 1)
PY
cp "$OUT/expand.jsonl" "$OUT/leak_app.jsonl" "$OUT/leak_app.out" "$OUT/.." 2>/dev/null || true
cat "$OUT/b.result" >&2
[[ $ra == 0 && $rb == 0 ]] && pass "$(cat "$OUT/a.result") | $(cat "$OUT/b.result")"
fail "$(cat "$OUT/a.result") | $(cat "$OUT/b.result")"
