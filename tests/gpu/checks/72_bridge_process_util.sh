#!/usr/bin/env bash
# usage: 72_bridge_process_util.sh GPUSCOPE_BIN OUT_DIR
# Per-process utilization (nvmlDeviceGetProcessUtilization, per-tick maxima) beside two PyTorch
# processes: one keeping the GPU busy, one holding memory and idle. The busy one's published
# sm_util_pct is near the device's on the ticks that carry a sample; the idle one stays near 0.
# A driver answering NOT_SUPPORTED passes when every per-process field stays 0, and says so.
# Recorded: how often a tick carries a new sample, nvidia-smi pmon beside it, the bridge's CPU.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
PIN=/sys/fs/bpf/gpuscope-check72
# A fresh host has no bpffs at /sys/fs/bpf (the bridge mounts it for its default directory only).
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mkdir -p "$PIN"
rm -f "$PIN"/gpu_*
cleanup_pins() { rm -f "$PIN"/gpu_*; rmdir "$PIN" 2>/dev/null || true; }

cat >"$OUT/work.py" <<'PY'
import os, sys, time, torch
mode, secs = sys.argv[1], float(sys.argv[2])
hold = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("pid", os.getpid(), flush=True)
end = time.time() + secs
while time.time() < end:
    if mode == "busy":
        for _ in range(20): a @ a
        torch.cuda.synchronize()
    else:
        time.sleep(0.2)
PY
timeout 90 python3 "$OUT/work.py" busy 22 >"$OUT/busy.out" 2>&1 &
WB=$!
track "$WB"
timeout 90 python3 "$OUT/work.py" idle 22 >"$OUT/idle.out" 2>&1 &
WI=$!
track "$WI"
wait_for "$OUT/busy.out" '^pid' 60 "$WB" || fail "busy workload did not start: $(tail -c 300 "$OUT/busy.out")"
wait_for "$OUT/idle.out" '^pid' 60 "$WI" || fail "idle workload did not start: $(tail -c 300 "$OUT/idle.out")"
sleep 2
log "bridge --json -v -d 10 --pin-dir $PIN"
"$GPUSCOPE" bridge --json -v -d 10 --pin-dir "$PIN" >"$OUT/bridge.jsonl" 2>"$OUT/bridge.err" &
B=$!
track "$B"
sleep 2
S0=$(awk '{print $1}' /proc/$B/schedstat 2>/dev/null || echo 0)
T0=$(date +%s%N)
nvidia-smi pmon -c 3 -s u >"$OUT/smi_pmon.txt" 2>&1 || true
sleep 5
S1=$(awk '{print $1}' /proc/$B/schedstat 2>/dev/null || echo 0)
T1=$(date +%s%N)
wait_exit "$B" 30
[[ $WAIT_RC == 0 ]] || { cleanup_pins; fail "bridge failed ($WAIT_RC): $(tail -c 300 "$OUT/bridge.err")"; }
cleanup_pins
BUSY=$(awk '/^pid/ {print $2}' "$OUT/busy.out")
IDLE=$(awk '/^pid/ {print $2}' "$OUT/idle.out")
CPU=$(awk -v s0="$S0" -v s1="$S1" -v t0="$T0" -v t1="$T1" 'BEGIN { printf "%.2f", (t1 > t0 && s1 > s0) ? 100 * (s1 - s0) / (t1 - t0) : -1 }')

python3 - "$OUT" "$BUSY" "$IDLE" "$CPU" <<'PY'
import json, os, statistics, sys
out, busy, idle, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(os.path.join(out, "bridge.jsonl")) if l.startswith("{")]
err = open(os.path.join(out, "bridge.err")).read()
dev = [r["sm_util_pct"] for r in rows if r["type"] == "device" and r["device"] == 0]
ticks = len(dev)
def proc(pid): return [r for r in rows if r["type"] == "process" and r["pid"] == pid and r["device"] == 0]
b, i = proc(busy), proc(idle)
fields = ("sm_util_pct", "mem_util_pct", "enc_util_pct", "dec_util_pct")
unsupported = "nvmlDeviceGetProcessUtilization is not supported" in err
b_on = [r["sm_util_pct"] for r in b if r["sm_util_pct"] > 0]
i_max = max((r["sm_util_pct"] for r in i), default=-1)
agg_ok = all(r["sm_util_pct_max"] >= r["sm_util_pct"] for r in b + i)
dev_med = statistics.median(dev) if dev else -1
rec = (f"device sm median {dev_med}% over {ticks} ticks; busy pid {busy}: {len(b_on)}/{len(b)} ticks with a sample, "
       f"sm {('median %s max %s' % (statistics.median(b_on), max(b_on))) if b_on else 'none'}; "
       f"idle pid {idle}: sm max {i_max}%; bridge CPU {cpu}% of a core")
checks = []
if unsupported:
    zero = all(r[f] == 0 for r in b + i for f in fields)
    checks.append(("not_supported_zero", zero, "NOT_SUPPORTED said once in -v; every per-process field 0"))
    checks.append(("said_once", err.count("nvmlDeviceGetProcessUtilization") == 1, "one line"))
else:
    checks.append(("listed", len(b) >= ticks - 1 and len(i) >= ticks - 1, f"{len(b)}/{len(i)} of {ticks} ticks list both pids"))
    # NVML samples per process about once a second, so most 100 ms ticks carry none.
    checks.append(("busy_sampled", len(b_on) >= 3, f"{len(b_on)} ticks with a sample in {ticks * 0.1:.0f} s"))
    checks.append(("busy_near_device", bool(b_on) and statistics.median(b_on) >= dev_med - 25, "busy median of sampled ticks within 25 points of the device's"))
    checks.append(("idle_near_zero", 0 <= i_max <= 5, f"idle max {i_max}%"))
    checks.append(("aggregate", agg_ok, "sm_util_pct_max >= sm_util_pct"))
ok = all(c[1] for c in checks)
print(("PASS" if ok else "FAIL") + " 72_bridge_process_util: " + rec + "; " +
      "; ".join(f"{n} {'ok' if g else 'BAD'} ({m})" for n, g, m in checks) + ("; path NOT_SUPPORTED" if unsupported else ""))
sys.exit(0 if ok else 1)
PY
