#!/usr/bin/env bash
# usage: 99_agent_inside.sh GPUSCOPE_BIN OUT_DIR
# `gpuscope agent` with no bridge running, on the real driver and NVML:
# 1. it runs the bridge itself: device series with the GPU's UUID and model name;
# 2. its ioctl series for a PyTorch process (named gs98torch) equal, request by request, what
#    `gpuscope ioctl` counted for it over the same life, after it has exited; its per-process
#    series follow the agent's one rule for exited processes (docs/agent.md, Bounded
#    cardinality): the first scrape after the agent took it for exited has their final values,
#    the next after that refresh none;
# 3. a thread burning CPU while the process's GPU sits idle shows in
#    gpuscope_starvation_cpu_seconds_total and in /api/starvation/folded.
# Needs in tests/gpu/bin: nothing but the gpuscope binary (python3, torch and curl on the host).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
command -v curl >/dev/null || skip "curl missing"
BPFFS=$(bpffs_dir) || fail "no bpffs could be mounted"
PD=$BPFFS/gs99-$$
mkdir -p "$PD"
D=${WORK:-/tmp/gpuscope-99}
rm -rf "$D"
mkdir -p "$D"
cleanup_pins() { rm -f "$PD"/gpu_* 2>/dev/null || true; rmdir "$PD" 2>/dev/null || true; }

"$GPUSCOPE" ioctl --json -c gs98torch >"$OUT/ioctl.jsonl" 2>"$OUT/ioctl.err" &
IO=$!
track "$IO"
wait_for "$OUT/ioctl.err" 'counting' 30 "$IO" || fail "gpuscope ioctl did not start: $(tail -c 300 "$OUT/ioctl.err")"
"$GPUSCOPE" agent --json --listen 127.0.0.1:0 -c gs98torch --collectors ioctl,starvation,bridge \
  --bridge-pin-dir "$PD" --starvation-min-idle-ms 500 --interval 0.2 >"$OUT/agent.jsonl" 2>"$OUT/agent.err" &
AG=$!
track "$AG"
wait_for "$OUT/agent.jsonl" '"type":"agent"' 60 "$AG" || fail "agent did not start: $(tail -c 400 "$OUT/agent.err")"
PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$OUT/agent.jsonl")
grep -q 'the agent runs one' "$OUT/agent.err" || fail "the agent did not run its bridge: $(tail -c 400 "$OUT/agent.err")"
sleep 1
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/devices.prom" || fail "no scrape"

timeout 150 python3 "$GPU_TESTS_DIR/workloads/torch_small.py" gs98torch 6 >"$OUT/workload.out" 2>&1 &
WL=$!
track "$WL"
wait_for "$OUT/workload.out" '^done' 150 "$WL" || true
sleep 0.5
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/during.prom" || true
curl -sf "http://127.0.0.1:$PORT/api/starvation/folded" >"$OUT/folded.txt" || true
wait_exit "$WL" 30
[[ $WAIT_RC == 0 ]] || fail "workload exited with $WAIT_RC: $(tail -c 400 "$OUT/workload.out")"
# The agent takes the process for exited at its next refresh: every --interval, or every 16th
# one while its governor holds it at level 3 (round 11: CPU 5 % over the default 2 %, so up to
# 3.2 s after the exit). /api/processes (not a scrape) is read every 0.1 s until then; the first
# scrape after it must have the final values, and once the refresh after that scrape has folded
# the process, the next scrape none.
# state_until WANT: the pid's state in /api/processes until it is WANT (or 15 s), each change
# with the time since the exit, into exit_states.txt.
WPID=$(awk '/^pid/ {print $2}' "$OUT/workload.out")
T_EXIT=$(date +%s.%N)
state_until() {
  python3 - "$PORT" "$WPID" "$1" "$T_EXIT" >>"$OUT/exit_states.txt" 2>&1 <<'PY'
import json, sys, time, urllib.request
port, pid, want, t0 = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
last, end = None, time.time() + 15
while time.time() < end:
    try:
        ps = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/processes", timeout=1))["processes"]
        st = next((p.get("state") for p in ps if p.get("pid") == pid), "absent")
    except Exception as e:
        st = f"error {e}"
    if st != last:
        print(f"{(time.time() - t0) * 1000:.0f} ms after the exit: {st}", flush=True)
        last = st
    if st == want:
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PY
}
state_until exited || fail "the agent did not take the exited process for exited within 15 s: $(tr '\n' ';' <"$OUT/exit_states.txt")"
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/after.prom" || fail "no scrape after the workload"
state_until absent || fail "the exited process was not folded after a scrape had its final values: $(tr '\n' ';' <"$OUT/exit_states.txt")"
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/after2.prom" || fail "no second scrape after the workload"
curl -sf "http://127.0.0.1:$PORT/api/health" >"$OUT/health.json" || true
term_wait "$IO"
stop "$AG" 30
cleanup_pins
PID=$(awk '/^pid/ {print $2}' "$OUT/workload.out")
python3 - "$OUT" "$PID" >"$OUT/verdict.txt" 2>&1 <<'PY' || true
import json, re, sys, collections
out, pid = sys.argv[1], int(sys.argv[2])
def series(path, name):
    rows = []
    for line in open(path):
        m = re.match(r'^' + name + r'\{(.*)\} (\S+)$', line.strip())
        if m:
            rows.append((dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))), float(m.group(2))))
    return rows
bad = []
dev = series(f"{out}/devices.prom", "gpuscope_gpu_memory_total_bytes")
if not dev or not dev[0][0].get("UUID", "").startswith("GPU-") or not dev[0][0].get("modelName"):
    bad.append(f"device series from the agent's bridge: {dev}")
sub = collections.Counter()
for l in open(f"{out}/ioctl.jsonl"):
    r = json.loads(l)
    if r.get("type") == "ioctl" and r["pid"] == pid:
        sub[r["name"] or r["request"]] += r["count"]
agent = {l["request"]: int(v) for l, v in series(f"{out}/after.prom", "gpuscope_ioctl_calls_total")}
if not sub:
    bad.append("gpuscope ioctl counted nothing for the workload")
if dict(sub) != agent:
    diff = {k: (sub.get(k, 0), agent.get(k, 0)) for k in set(sub) | set(agent) if sub.get(k, 0) != agent.get(k, 0)}
    bad.append(f"ioctl per request, subcommand vs agent, differ: {diff}")
final = [v for l, v in series(f"{out}/after.prom", "gpuscope_process_ioctl_calls_total") if l["pid"] == str(pid)]
if final != [sum(sub.values())]:
    bad.append(f"the first scrape after the exit has the process's final ioctl count {final}, "
               f"not what gpuscope ioctl counted ({sum(sub.values())})")
if [s for s in series(f"{out}/after2.prom", "gpuscope_process_ioctl_calls_total") if s[0]["pid"] == str(pid)]:
    bad.append("the exited process's ioctl series is still there in the second scrape after its exit")
st = [v for l, v in series(f"{out}/during.prom", "gpuscope_starvation_cpu_seconds_total") if l["pid"] == str(pid)]
folded = [l for l in open(f"{out}/folded.txt") if l.strip()] if st else []
if not st or max(st) < 2:
    bad.append(f"starving CPU seconds of the burning thread: {st}")
if not folded:
    bad.append("no folded stacks")
top = ", ".join(f"{k}:{v}" for k, v in sub.most_common(6))
msg = (f"ioctl per request equal ({sum(sub.values())} calls, {len(sub)} requests; top {top}); "
       f"device {dev[0][0].get('modelName') if dev else '?'}; starving {max(st) if st else 0:.2f} s, "
       f"{len(folded)} folded stacks")
print(("FAIL " if bad else "OK ") + msg + ("; " + "; ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
PY
v=$(tail -n1 "$OUT/verdict.txt")
[[ $v == OK* ]] || fail "${v#FAIL }; states after the exit: $(tr '\n' ';' <"$OUT/exit_states.txt")"
pass "the agent ran its own bridge; ${v#OK }"
