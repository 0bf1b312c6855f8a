#!/usr/bin/env bash
# usage: syscall_tax.sh GPUSCOPE_BIN
# What an enabled syscalls tracepoint (gpuscope ioctl's hooks) costs processes that make no
# ioctl: the host's clocksource (a clock_gettime that leaves the vDSO is a syscall), a pure
# Python loop of getppid() and of time.perf_counter() with and without `gpuscope ioctl`
# running, and how many syscalls the host makes per step of workloads/torch_steps.py (raw_tp
# sys_enter run counts with kernel.bpf_stats_enabled, minus the same time idle).
set -uo pipefail
G=$1
HERE=$(cd "$(dirname "$0")/.." && pwd)
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource) (available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
echo "tools: strace=$(command -v strace || echo none) perf=$(command -v perf || echo none)"
bench() {
  python3 - <<'PY'
import os, time
def per(f, n=200000):
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e9
r = [(per(os.getppid), per(time.perf_counter), per(time.time)) for _ in range(5)]
print("getppid %.0f ns  perf_counter %.0f ns  time.time %.0f ns" % tuple(sorted(x[i] for x in r)[2] for i in range(3)))
PY
}
for rep in 1 2; do
  echo "rep $rep none:        $(bench)"
  "$G" ioctl -d 60 >/dev/null 2>/tmp/ioc.err &
  P=$!
  sleep 2
  echo "rep $rep ioctl (tp):  $(bench)  [$(head -c 160 /tmp/ioc.err)]"
  kill -INT $P; wait $P 2>/dev/null
  "$G" ioctl --raw-syscalls -d 60 >/dev/null 2>&1 &
  P=$!
  sleep 2
  echo "rep $rep ioctl (raw): $(bench)"
  kill -INT $P; wait $P 2>/dev/null
done
# Syscalls per step, host-wide.
D=$(mktemp -d)
python3 -u -B "$HERE/workloads/torch_steps.py" "$D/go" 1 400 >"$D/steps.out" 2>"$D/steps.err" &
W=$!
for _ in $(seq 120); do grep -q READY "$D/steps.out" && break; sleep 0.5; done
"$G" ioctl --raw-syscalls -d 120 >/dev/null 2>&1 &
P=$!
sleep 2
KNOB=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 >/proc/sys/kernel/bpf_stats_enabled
runs() { local n=0; for f in /proc/$P/fdinfo/*; do v=$(awk '/^run_cnt:/ {print $2}' "$f" 2>/dev/null); n=$((n + ${v:-0})); done; echo $n; }
a=$(runs); t0=$(date +%s.%N); sleep 1; b=$(runs); t1=$(date +%s.%N)
touch "$D/go0"
for _ in $(seq 600); do grep -q '^ROUND' "$D/steps.out" && break; sleep 0.05; done
c=$(runs)
echo "$KNOB" >/proc/sys/kernel/bpf_stats_enabled
kill -INT $P; wait $P 2>/dev/null
wait $W
python3 - "$a" "$b" "$c" "$t0" "$t1" "$D/steps.out" <<'PY'
import json, sys
a, b, c = map(int, sys.argv[1:4]); idle_s = float(sys.argv[5]) - float(sys.argv[4])
st = [json.loads(l[6:]) for l in open(sys.argv[6]) if l.startswith("ROUND ")][0]["step_ms"]
steps = len(st) * 10; dur_s = sum(st) * 10 / 1000
idle_rate = (b - a) / 2 / idle_s  # enter + exit programs: two runs a syscall
print("host syscalls: idle %.0f/s; during %d steps (%.2f s): %.0f a step, %.0f a step above idle" % (
    idle_rate, steps, dur_s, (c - b) / 2 / steps, ((c - b) / 2 - idle_rate * dur_s) / steps))
PY
rm -rf "$D"
