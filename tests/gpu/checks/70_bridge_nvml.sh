#!/usr/bin/env bash
# usage: 70_bridge_nvml.sh GPUSCOPE_BIN OUT_DIR
# A: beside a busy PyTorch process, the bridge's device utilization, memory and per-pid memory
#    agree with nvidia-smi read at the same moment.
# B: 30 ms GPU bursts every 500 ms: how many the published utilization shows with NVML's
#    sample buffer (default) and with polling only (--no-samples).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
cat >"$OUT/busy.py" <<'PY'
import os, sys, time, torch
mode, secs = sys.argv[1], float(sys.argv[2])
hold = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
print("pid", os.getpid(), flush=True)
end = time.time() + secs
bursts = 0
while time.time() < end:
    if mode == "busy":
        for _ in range(20): a @ a
        torch.cuda.synchronize()
    else:
        t = time.time()
        while time.time() - t < 0.030:
            a @ a
            torch.cuda.synchronize()
        bursts += 1
        time.sleep(0.470)
print("bursts", bursts, flush=True)
PY
timeout 60 python3 "$OUT/busy.py" busy 12 >"$OUT/busy.out" 2>&1 &
W=$!
track "$W"
wait_for "$OUT/busy.out" '^pid' 60 "$W" || fail "workload did not start: $(tail -c 300 "$OUT/busy.out")"
sleep 2
"$GPUSCOPE" bridge --json -d 4 >"$OUT/bridge_a.jsonl" 2>"$OUT/bridge_a.err" &
B=$!
track "$B"
sleep 3
nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits >"$OUT/smi_gpu.csv"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$OUT/smi_apps.csv"
wait_exit "$B" 20
[[ $WAIT_RC == 0 ]] || fail "bridge did not stop: $(tail -c 300 "$OUT/bridge_a.err")"
wait_exit "$W" 60
PID=$(awk '/^pid/ {print $2}' "$OUT/busy.out")

timeout 60 python3 "$OUT/busy.py" bursts 13 >"$OUT/bursts.out" 2>&1 &
W=$!
track "$W"
wait_for "$OUT/bursts.out" '^pid' 60 "$W" || fail "burst workload did not start"
"$GPUSCOPE" bridge --json -d 5.5 >"$OUT/bridge_samples.jsonl" 2>"$OUT/bridge_samples.err" || fail "bridge (samples) failed: $(cat "$OUT/bridge_samples.err")"
"$GPUSCOPE" bridge --json --no-samples -d 5.5 >"$OUT/bridge_poll.jsonl" 2>"$OUT/bridge_poll.err" || fail "bridge (poll) failed: $(cat "$OUT/bridge_poll.err")"
wait_exit "$W" 60

python3 - "$OUT" "$PID" <<'PY'
import json, sys, os
out, pid = sys.argv[1], int(sys.argv[2])
def rows(f): return [json.loads(l) for l in open(os.path.join(out, f)) if l.startswith("{")]
a = rows("bridge_a.jsonl")
dev = [r for r in a if r.get("type") == "device" and r["device"] == 0]
procs = [r for r in a if r.get("type") == "process" and r["pid"] == pid]
util, used, total = [float(x) for x in open(os.path.join(out, "smi_gpu.csv")).read().split(",")[:3]]
apps = {int(l.split(",")[0]): float(l.split(",")[1]) for l in open(os.path.join(out, "smi_apps.csv")) if l.strip()}
d = dev[len(dev) // 2 + 1] if len(dev) > 2 else dev[-1]
mib = 1 << 20
checks = []
checks.append(("mem_used", abs(d["mem_used_bytes"] / mib - used) <= max(64, 0.02 * used), f"{d['mem_used_bytes']/mib:.0f} vs smi {used:.0f} MiB"))
checks.append(("mem_total", abs(d["mem_total_bytes"] / mib - total) <= 1, f"{d['mem_total_bytes']/mib:.0f} vs smi {total:.0f} MiB"))
busy_ticks = sum(1 for r in dev if r["sm_util_pct"] > 0)
checks.append(("util", util > 0 and busy_ticks >= len(dev) * 0.8, f"{busy_ticks}/{len(dev)} ticks busy, smi {util:.0f}%"))
p = procs[-1] if procs else None
checks.append(("pid_mem", p is not None and pid in apps and abs(p["used_gpu_memory_bytes"] / mib - apps[pid]) <= 1,
               f"{(p['used_gpu_memory_bytes']/mib if p else -1):.0f} vs smi {apps.get(pid, -1):.0f} MiB"))
def bursts(f):
    ds = [r for r in rows(f) if r.get("type") == "device" and r["device"] == 0]
    n, prev = 0, False
    for r in ds:
        on = r["sm_util_pct"] > 0
        if on and not prev: n += 1
        prev = on
    return n, len(ds)
bs, ts = bursts("bridge_samples.jsonl")
bp, tp = bursts("bridge_poll.jsonl")
expected = 11  # 5.5 s / 0.5 s
checks.append(("bursts", bs >= 0.8 * expected and bs >= bp, f"samples {bs}/{expected} bursts in {ts} ticks, polling only {bp}/{expected} in {tp} ticks"))
ok = all(c[1] for c in checks)
print(("PASS" if ok else "FAIL") + " 70_bridge_nvml: " + "; ".join(f"{n} {'ok' if g else 'BAD'} ({m})" for n, g, m in checks))
sys.exit(0 if ok else 1)
PY
