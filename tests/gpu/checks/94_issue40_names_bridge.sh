#!/usr/bin/env bash
# usage: 94_issue40_names_bridge.sh GPUSCOPE_BIN OUT_DIR
# Issue 40 on the real driver and NVML:
# 1. `gpuscope starvation` with no bridge publishing under its --pin-dir runs one itself (real
#    NVML) and names the `preprocess` thread of workloads/torch_starve.py (starve mode);
# 2. a PyTorch process that names itself with bytes of no UTF-8 (and a quote, a backslash, a
#    newline, braces) launches kernels under the agent: the whole scrape is valid UTF-8, every
#    sample line parses, and the process's launches carry its comm as JSON reads those bytes
#    (the invalid ones as Latin-1), the same as /api/processes; promtool checks it where present.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
command -v curl >/dev/null || skip "curl missing"
BPFFS=$(bpffs_dir) || fail "no bpffs could be mounted"
PD=$BPFFS/gs94-$$
mkdir -p "$PD"
cleanup_pins() { rm -f "$PD"/gpu_* 2>/dev/null || true; rmdir "$PD" 2>/dev/null || true; }

# 1. starvation alone
python3 -X perf -u -B "$GPU_TESTS_DIR/workloads/torch_starve.py" starve 14 >"$OUT/starve.workload" 2>&1 &
WL=$!
track "$WL"
wait_for "$OUT/starve.workload" '^READY ' 90 "$WL" || fail "workload not READY: $(tail -c 400 "$OUT/starve.workload")"
"$GPUSCOPE" starvation --json --pin-dir "$PD" -p "$WL" --collect-ustack -d 10 >"$OUT/starve.jsonl" 2>"$OUT/starve.err" || true
wait_exit "$WL" 60
grep -q "no bridge was publishing under $PD; starvation runs one" "$OUT/starve.err" ||
  { cleanup_pins; fail "starvation did not run its bridge: $(tail -c 400 "$OUT/starve.err")"; }
cleanup_pins
starve=$(python3 - "$OUT/starve.jsonl" "$OUT/starve.workload" <<'PY'
import json, sys
ready = next(json.loads(l[6:]) for l in open(sys.argv[2]) if l.startswith("READY "))
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
mine = [r for r in rows if r.get("type") == "starvation" and r["tid"] == ready["tid"]]
named = any(any("preprocess_burn" in f for f in r.get("ustack", [])) for r in mine)
cpu = sum(r["cpu_time_ns"] for r in mine) / 1e9
print(f"{len(mine)} rows for the preprocess thread, {cpu:.2f} s CPU, ustack names preprocess_burn: {named}")
sys.exit(0 if mine and named and all(r["thread"] == "preprocess" for r in mine) else 1)
PY
) || fail "starvation with its own bridge: $starve"
log "starvation, own bridge: $starve"

# 2. an odd process name under the agent
ODD=$'a"b\\c\nd\xff\xfe{}'
"$GPUSCOPE" agent --json --listen 127.0.0.1:0 -c "$ODD" --collectors kernels,memleak,latency --interval 0.2 \
  >"$OUT/agent.jsonl" 2>"$OUT/agent.err" &
AG=$!
track "$AG"
wait_for "$OUT/agent.jsonl" '"type":"agent"' 60 "$AG" || fail "agent did not start: $(tail -c 400 "$OUT/agent.err")"
PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$OUT/agent.jsonl")
timeout 150 python3 "$GPU_TESTS_DIR/workloads/torch_small.py" "$ODD" 3 >"$OUT/workload.out" 2>&1 &
TS=$!
track "$TS"
wait_for "$OUT/workload.out" '^pid ' 90 "$TS" || fail "workload did not start: $(tail -c 300 "$OUT/workload.out")"
TSPID=$(awk '/^pid /{print $2; exit}' "$OUT/workload.out")
# Its 20 steps, then 3 s of CPU burn while it still runs: scraped once its launches show.
for ((i = 0; i < 600; i++)); do
  curl -sf "http://127.0.0.1:$PORT/api/processes" >"$OUT/processes.json" || true
  curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/odd.prom" || true
  grep -q "^gpuscope_kernel_launches_total{pid=\"$TSPID\"" "$OUT/odd.prom" && grep -qE "\"pid\":$TSPID[,}]" "$OUT/processes.json" && break
  sleep 0.2
done
wait_exit "$TS" 60
stop "$AG"
promtool_out="promtool not on this host"
if command -v promtool >/dev/null; then
  promtool_out=$(promtool check metrics <"$OUT/odd.prom" 2>&1 | head -5) || fail "promtool: $promtool_out"
  promtool_out="promtool: ${promtool_out:-clean}"
fi
odd=$(python3 - "$OUT/odd.prom" "$OUT/processes.json" "$TSPID" <<'PY'
import json, re, sys
raw = open(sys.argv[1], "rb").read()
text = raw.decode("utf-8")  # strict: a byte of no UTF-8 fails here
want = 'a"b\\c\nd\u00ff\u00fe{}'
lab = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
unesc = lambda v: re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), v)
series = 0
launches = 0
for line in text.split("\n"):
    if not line or line.startswith("#"):
        continue
    m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)', line)
    if not m:
        print("unparsable line:", line[:200]); sys.exit(1)
    series += 1
    labels = {k: unesc(v) for k, v in lab.findall(m.group(3) or "")}
    if m.group(1) == "gpuscope_kernel_launches_total" and labels.get("pid") == sys.argv[3]:
        if labels["comm"] != want:
            print("comm label", repr(labels["comm"])); sys.exit(1)
        launches += float(m.group(4))
api = [p for p in json.load(open(sys.argv[2]))["processes"] if str(p["pid"]) == sys.argv[3]]
print(f"{series} samples parse, {launches:.0f} launches of pid {sys.argv[3]} under comm {want!r}, "
      f"/api/processes comm {api[0]['comm']!r}" if api else "pid not in /api/processes")
sys.exit(0 if launches > 0 and api and api[0]["comm"] == want else 1)
PY
) || fail "odd name: $odd"
pass "starvation with its own bridge: $starve; odd name: $odd; $promtool_out"
