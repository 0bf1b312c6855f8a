#!/usr/bin/env bash
# usage: 82_gputime_duty.sh GPUSCOPE_BIN OUT_DIR
# GPU time always on, within budget: workloads/torch_steps.py (launch-bound), one process per
# arm, each started through `gpuscope run` (off: plain python3). Rounds of GS82_SECONDS (default
# 10 s, the default duty period: any such round holds exactly one recording window), arms
# interleaved and rotated each round (GS82_ROUNDS, default 4); per arm, the median over rounds of
# the round's mean step time (a mean: a median of steps would hide the window's slow tenth).
#   off      nothing injected
#   floor    bin/libcupti-floor.so (workloads/cupti_floor.c): CUPTI's concurrent-kernel activity
#            alone, from cuInit on; the floor of exact kernel times
#   exact    libgpuscope-cupti.so, `gpuscope agent --collectors gputime --gputime-duty 1`:
#            exact recording as gpuscope does it (one uprobe per buffer, no launch probe)
#   kernels  libgpuscope-cupti.so, `gpuscope kernels -p` attached: exact, plus kernels' own
#            uprobe on every launch (for the record; no goal)
#   duty     libgpuscope-cupti.so, `gpuscope agent --collectors gputime` at its default duty
# Goals: duty <= 1.03x off; exact <= 1.03x floor. Checked too: every recording arm recorded, and
# the duty arm's kernels per step are 5-20 % of the exact arm's (the library's own summaries).
# Where the host has 16 CPUs, the workloads run on CPUs 1-3 (one of them busy at a time) and
# gpuscope on 4-15, as in check 84.
# About 5 minutes with the defaults.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
LIB=$(dirname "$GPUSCOPE")/libgpuscope-cupti.so
FLOOR=$GPU_TESTS_DIR/bin/libcupti-floor.so
[[ -f $LIB ]] || skip "libgpuscope-cupti.so not beside $GPUSCOPE"
[[ -f $FLOOR ]] || skip "bin/libcupti-floor.so missing (build/tests/libcupti-floor.so)"
command -v curl >/dev/null || skip "curl missing"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || skip "no torch with CUDA"
ROUNDS=${GS82_ROUNDS:-4}
SECS=${GS82_SECONDS:-10}
D=${WORK:-/tmp/gpuscope-82}
rm -rf "$D"
mkdir -p "$D"
W=$GPU_TESTS_DIR/workloads/torch_steps.py
ARMS=(off floor exact kernels duty)
declare -A PY PORT
PIN_WL=() PIN_GS=()
if (($(nproc) >= 16)); then PIN_WL=(taskset -c 1-3) PIN_GS=(taskset -c 4-15); fi

for arm in "${ARMS[@]}"; do
  steps=(python3 -u -B "$W" "$D/go_${arm}_" "$ROUNDS" 0 "$SECS")
  case $arm in
    off) "${PIN_WL[@]}" "${steps[@]}" >"$D/$arm.out" 2>"$D/$arm.err" & ;;
    floor) "${PIN_WL[@]}" "$GPUSCOPE" run --cupti-lib "$FLOOR" -- "${steps[@]}" >"$D/$arm.out" 2>"$D/$arm.err" & ;;
    *) GPUSCOPE_CUPTI_SUMMARY=$OUT/summary_$arm.tsv "${PIN_WL[@]}" "$GPUSCOPE" run -- "${steps[@]}" \
      >"$D/$arm.out" 2>"$D/$arm.err" & ;;
  esac
  track $!
done
for arm in "${ARMS[@]}"; do
  wait_for "$D/$arm.out" '^READY ' 180 || fail "$arm: torch_steps not READY: $(tail -c 400 "$D/$arm.err" | tr '\n' ' ')"
  PY[$arm]=$(sed -n 's/^READY //p' "$D/$arm.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
done

# start_agent ARM ARGS...: an agent on the arm's process, gputime only; sets PORT[ARM].
start_agent() {
  local arm=$1 pid
  shift
  log "gpuscope agent -p ${PY[$arm]} --collectors gputime $*"
  "${PIN_GS[@]}" "$GPUSCOPE" agent --json --listen 127.0.0.1:0 -p "${PY[$arm]}" --collectors gputime "$@" \
    >"$D/agent_$arm.jsonl" 2>"$D/agent_$arm.err" &
  pid=$!
  track "$pid"
  wait_for "$D/agent_$arm.jsonl" '"type":"agent"' 60 "$pid" || fail "$arm: agent did not start: $(tail -c 400 "$D/agent_$arm.err")"
  PORT[$arm]=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$D/agent_$arm.jsonl")
}
start_agent exact --gputime-duty 1
start_agent duty
"${PIN_GS[@]}" "$GPUSCOPE" kernels --json --interval 5 -p "${PY[kernels]}" >"$D/kernels.jsonl" 2>"$D/kernels.err" &
KP=$!
track "$KP"
wait_for "$D/kernels.err" 'counting' 60 "$KP" || fail "kernels did not start: $(tail -c 400 "$D/kernels.err")"
sleep 2 # each library is told at its client's start; its thread reads the word every 100 ms

for ((r = 0; r < ROUNDS; r++)); do
  for ((i = 0; i < ${#ARMS[@]}; i++)); do
    arm=${ARMS[$(((i + r) % ${#ARMS[@]}))]}
    echo "$r $arm" >>"$D/order.txt"
    touch "$D/go_${arm}_$r"
    wait_for "$D/$arm.out" "^ROUND \\{\"round\": $r," $((SECS * 3 + 60)) "${PY[$arm]}" ||
      fail "$arm: round $r did not finish: $(tail -c 400 "$D/$arm.err" | tr '\n' ' ')"
  done
done
for arm in exact duty; do
  curl -sf "http://127.0.0.1:${PORT[$arm]}/metrics" >"$OUT/scrape_$arm.prom" || fail "$arm: no scrape"
done
for arm in "${ARMS[@]}"; do # not children here (gpuscope run's): polled, not waited for
  for ((i = 0; i < 600; i++)); do alive "${PY[$arm]}" || break; sleep 0.1; done
  alive "${PY[$arm]}" && fail "$arm: torch_steps did not exit after its rounds"
done
stop "$KP" 30
cp "$D"/*.out "$D"/*.err "$D/kernels.jsonl" "$D/order.txt" "$OUT/" 2>/dev/null || true

python3 -B - "$OUT" <<'PY' >"$OUT/result.txt" || fail "$(cat "$OUT/result.txt")"
import json, re, statistics, sys
out = sys.argv[1]
arms = ["off", "floor", "exact", "kernels", "duty"]
mean, steps = {}, {}
for a in arms:
    per_round = []
    steps[a] = 0
    for line in open(f"{out}/{a}.out"):
        if line.startswith("ROUND "):
            v = json.loads(line[6:])["step_ms"]
            per_round.append(statistics.mean(v))
            steps[a] += 10 * len(v)
    mean[a] = statistics.median(per_round)

def summary(a):  # the library's own count of kernels recorded (GPUSCOPE_CUPTI_SUMMARY)
    try:
        return sum(int(l.split("\t")[0]) for l in open(f"{out}/summary_{a}.tsv") if l.strip())
    except FileNotFoundError:
        return 0

def gauge(a, name):
    for l in open(f"{out}/scrape_{a}.prom"):
        if l.startswith(name + " "):
            return float(l.split()[1])
    return None

def scraped(a):
    return sum(float(l.rsplit(" ", 1)[1]) for l in open(f"{out}/scrape_{a}.prom")
               if l.startswith("gpuscope_kernel_duration_seconds_count{"))

bad = []
m = re.search(r"gpuscope-cupti-floor: (\d+) kernel records, (\d+) dropped", open(f"{out}/floor.err").read())
floor_n = int(m.group(1)) if m else 0
exact_n, duty_n = summary("exact"), summary("duty")
kern_gpu = 0
for l in open(f"{out}/kernels.jsonl"):
    j = json.loads(l)
    if j.get("type") == "kernel":
        kern_gpu = max(kern_gpu, j.get("gpu_kernels", 0))
if not floor_n:
    bad.append("the floor library recorded nothing")
if not exact_n or not scraped("exact") or gauge("exact", "gpuscope_gputime_duty_ratio") != 1:
    bad.append("exact arm: %d kernels recorded, %d scraped, duty gauge %s" % (
        exact_n, scraped("exact"), gauge("exact", "gpuscope_gputime_duty_ratio")))
if not kern_gpu:
    bad.append("kernels arm: no GPU time in gpuscope kernels")
share = (duty_n / steps["duty"]) / (exact_n / steps["exact"]) if exact_n and steps["duty"] and steps["exact"] else 0
if not 0.05 <= share <= 0.2 or gauge("duty", "gpuscope_gputime_duty_ratio") != 0.1:
    bad.append("duty arm recorded %.3f of the exact arm's kernels per step (duty gauge %s)" % (
        share, gauge("duty", "gpuscope_gputime_duty_ratio")))
r = {a: mean[a] / mean["off"] for a in arms}
exact_floor = mean["exact"] / mean["floor"]
if r["duty"] > 1.03:
    bad.append("duty %.4fx off (goal 1.03)" % r["duty"])
if exact_floor > 1.03:
    bad.append("exact %.4fx the floor (goal 1.03)" % exact_floor)
added = (mean["exact"] - mean["off"]) / (mean["floor"] - mean["off"]) if mean["floor"] > mean["off"] else float("nan")
line = ("step %.4f ms off; floor %.4fx, exact %.4fx (%.4fx the floor, added cost %.2fx the floor's), "
        "kernels %.4fx, duty %.4fx; duty recorded %.3f of exact's kernels per step; "
        "kernels/step floor %.1f exact %.1f" % (
            mean["off"], r["floor"], r["exact"], exact_floor, added, r["kernels"], r["duty"], share,
            floor_n / max(steps["floor"], 1), exact_n / max(steps["exact"], 1)))
json.dump({"mean_step_ms": mean, "ratio_to_off": r, "exact_to_floor": exact_floor, "duty_share": share,
           "steps": steps, "recorded": {"floor": floor_n, "exact": exact_n, "duty": duty_n, "kernels": kern_gpu}},
          open(f"{out}/figures.json", "w"), indent=1)
print(("FAILED: %s | " % "; ".join(bad) if bad else "") + line)
sys.exit(1 if bad else 0)
PY
pass "$(cat "$OUT/result.txt")"
