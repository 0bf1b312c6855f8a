#!/usr/bin/env bash
# usage: 98_deploy_anomaly_gpu.sh GPUSCOPE_BIN OUT_DIR
# deploy/ on a real GPU: a bridge on the real NVML beside the agent.
# 1. "A background job takes the GPU": PyTorch process A holds 256 MiB on cuda:0; then B takes
#    512 MiB. With --alloc-alert-bytes 100 MB the agent says unexpected_allocation once, of B,
#    naming A; A alone said nothing.
# 2. Every metric name of deploy/grafana and deploy/prometheus/rules.yml is in the scrape (device
#    series from the real NVML), but the PENDING ones (when python3-yaml is on the host).
# Needs in tests/gpu/bin: nothing but the gpuscope binary (python3, torch and curl on the host).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
command -v curl >/dev/null || skip "curl missing"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || skip "no torch with CUDA"
D=${WORK:-/tmp/gpuscope-98}
BPFFS=$(bpffs_dir) || fail "no bpffs could be mounted"
PINS=$BPFFS/gs98-$$
rm -rf "$D"
mkdir -p "$D" "$PINS"
trap '_cleanup; rm -rf "$PINS"' EXIT
libcuda_libs

hold() {  # NAME MIB: allocates MIB on cuda:0 once D/go-NAME exists, holds until D/end exists
  python3 -u -B -c '
import os, sys, time, torch
name, mib, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.cuda.init()
print("READY", os.getpid(), flush=True)
while not os.path.exists(f"{d}/go-{name}"): time.sleep(0.05)
x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("HOLDING", flush=True)
while not os.path.exists(f"{d}/end"): time.sleep(0.05)
' "$1" "$2" "$D" >"$D/$1.out" 2>"$D/$1.err" &
}
hold a 256
A=$!
track "$A"
hold b 512
B=$!
track "$B"
wait_for "$D/a.out" '^READY' 60 "$A" || fail "A not ready: $(tail -c 300 "$D/a.err")"
wait_for "$D/b.out" '^READY' 60 "$B" || fail "B not ready: $(tail -c 300 "$D/b.err")"

"$GPUSCOPE" bridge --pin-dir "$PINS" >"$D/bridge.out" 2>"$D/bridge.err" &
BR=$!
track "$BR"
wait_for "$D/bridge.err" 'bridge publishing' 30 "$BR" || fail "bridge did not start: $(tail -c 300 "$D/bridge.err")"
"$GPUSCOPE" agent --json --listen 127.0.0.1:0 -p "$A" -p "$B" "${LIBS[@]}" --interval 0.2 --bridge-pin-dir "$PINS" \
  --alloc-alert-bytes 100000000 -d 120 >"$D/agent.jsonl" 2>"$D/agent.err" &
AG=$!
track "$AG"
wait_for "$D/agent.jsonl" '"type":"agent"' 60 "$AG" || fail "agent did not start: $(tail -c 400 "$D/agent.err")"
PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$D/agent.jsonl")

touch "$D/go-a"
wait_for "$D/a.out" '^HOLDING' 60 "$A" || fail "A did not allocate: $(tail -c 300 "$D/a.err")"
sleep 2
curl -sf "http://127.0.0.1:$PORT/api/anomalies" >"$OUT/anomalies_a.json"
touch "$D/go-b"
wait_for "$D/b.out" '^HOLDING' 60 "$B" || fail "B did not allocate: $(tail -c 300 "$D/b.err")"
sleep 2
curl -sf "http://127.0.0.1:$PORT/api/anomalies" >"$OUT/anomalies.json"
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/scrape.prom"
touch "$D/end"
wait_exit "$A" 30
wait_exit "$B" 30
stop "$AG" 30
stop "$BR" 30
cp "$D/agent.err" "$OUT/agent.err"

r=0
python3 -B - "$OUT/anomalies_a.json" "$OUT/anomalies.json" "$A" "$B" >"$OUT/anomaly.txt" <<'PY' || r=$?
import json, sys
before, after = (json.load(open(p)) for p in sys.argv[1:3])
a, b = int(sys.argv[3]), int(sys.argv[4])
ua = [e for e in after["anomalies"] if e["rule"] == "unexpected_allocation"]
ok = not before["anomalies"] and len(ua) == 1 and ua[0]["pid"] == b and ua[0]["other_pid"] == a and ua[0]["bytes"] >= 512 << 20
print(("ok" if ok else "wrong") + ": before B: %d anomalies; after: %s" % (len(before["anomalies"]), json.dumps(ua)))
sys.exit(0 if ok else 1)
PY
cat "$OUT/anomaly.txt" >&2
names="metric names: not checked (no python3-yaml)"
if python3 -c 'import yaml' 2>/dev/null; then
  src=$GPU_TESTS_DIR/../..
  if python3 -B "$src/tests/deploy/metric_names.py" --scrape "$OUT/scrape.prom" "$src"/deploy/grafana/*.json \
    "$src/deploy/prometheus/rules.yml" >"$OUT/metric_names.txt" 2>&1; then
    names="metric names: $(tail -n1 "$OUT/metric_names.txt"), $(grep -c '^PENDING' "$OUT/metric_names.txt") pending"
  else
    names="metric names: $(grep '^FAIL' "$OUT/metric_names.txt" | tr '\n' ' ')"
    r=1
  fi
fi
[[ $r == 0 ]] && pass "$(cat "$OUT/anomaly.txt"); $names"
fail "$(cat "$OUT/anomaly.txt"); $names"
