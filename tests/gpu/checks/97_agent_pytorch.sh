#!/usr/bin/env bash
# usage: 97_agent_pytorch.sh GPUSCOPE_BIN OUT_DIR
# `gpuscope agent` beside PyTorch, scraped with curl every 0.25 s:
# 1. workloads/torch_train.py (already running): the launches scraped across its measured
#    window equal torch.profiler's kernels for the same steps; the top series are recorded.
# 2. workloads/torch_steps.py, a launch-bound loop: step time with the agent off, with the
#    floor (bare counting uprobes on the same driver launch symbols: bin/kernels_overhead
#    --hold), on with kernels only, and on with every collector, interleaved rounds of one run,
#    as ratios of medians (goal: under 1% for kernels), and the agent's added cost over the floor's.
# Needs in tests/gpu/bin: the gpuscope binary and kernels_overhead (build/tests/kernels_overhead);
# python3, torch and curl on the host.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
command -v curl >/dev/null || skip "curl missing"
libcuda_libs
D=${WORK:-/tmp/gpuscope-97}
rm -rf "$D"
mkdir -p "$D/scrapes"

# start_agent PREFIX ARGS...: sets AGENT_PID and PORT.
start_agent() {
  local prefix=$1
  shift
  log "gpuscope agent --json --listen 127.0.0.1:0 $*"
  "$GPUSCOPE" agent --json --listen 127.0.0.1:0 "$@" >"$prefix.jsonl" 2>"$prefix.err" &
  AGENT_PID=$!
  track "$AGENT_PID"
  wait_for "$prefix.jsonl" '"type":"agent"' 60 "$AGENT_PID" || fail "agent did not start: $(tail -c 400 "$prefix.err")"
  PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$prefix.jsonl")
}

# 1. Counts against torch.profiler.
python3 -u -B "$GPU_TESTS_DIR/workloads/torch_train.py" running "$D/go" "$D" >"$D/train.out" 2>"$D/train.err" &
WL=$!
track "$WL"
wait_for "$D/train.out" '^READY ' 120 "$WL" || fail "torch_train not READY: $(tail -c 600 "$D/train.err" | tr '\n' ' ')"
start_agent "$D/agent1" -p "$WL" "${LIBS[@]}" --interval 0.1 -d 150
(
  while alive "$WL"; do
    t=$(date +%s%N)
    curl -sf "http://127.0.0.1:$PORT/metrics" >"$D/scrapes/.tmp" && mv "$D/scrapes/.tmp" "$D/scrapes/$t.prom"
    sleep 0.25
  done
) &
SCRAPER=$!
track "$SCRAPER"
sleep 1
touch "$D/go"
wait_exit "$WL" 150
[[ $WAIT_RC == 0 ]] || fail "torch_train exited with $WAIT_RC: $(tail -c 600 "$D/train.err" | tr '\n' ' ')"
wait "$SCRAPER" 2>/dev/null || true
curl -sf "http://127.0.0.1:$PORT/api/health" >"$OUT/health.json" || true
stop "$AGENT_PID" 30
last=$(ls "$D/scrapes" | sort -n | tail -n1)
cp "$D/scrapes/$last" "$OUT/last_scrape.prom"
r1=0
python3 -B "$GPU_TESTS_DIR/lib/analyze_agent.py" "$D/scrapes" "$D/train.out" "$WL" "$OUT/figures.json" \
  >"$OUT/counts.txt" || r1=$?
cat "$OUT/counts.txt" >&2

# 2. Step time: off, kernels, all, repeated; medians compared within this one run.
ROUNDS=12
FLOOR=$GPU_TESTS_DIR/bin/kernels_overhead
start_steps "$D/step_go" "$ROUNDS"
modes=(off floor kernels all)
for ((r = 0; r < ROUNDS; r++)); do
  mode=${modes[$((r % 4))]}
  case $mode in
    floor)
      [[ -x $FLOOR && -n $LIBCUDA ]] || { echo "$r off" >>"$D/skipped_floor.txt"; mode=off; }
      if [[ $mode == floor ]]; then
        "$FLOOR" --hold --lib "$LIBCUDA" >"$D/floor_r$r.out" 2>&1 &
        AGENT_PID=$!
        track "$AGENT_PID"
        wait_for "$D/floor_r$r.out" 'floor attached' 60 "$AGENT_PID" || fail "floor did not attach: $(cat "$D/floor_r$r.out")"
      fi
      ;;
    kernels) start_agent "$D/agent_r$r" -p "$SW" "${LIBS[@]}" --collectors kernels ;;
    all) start_agent "$D/agent_r$r" -p "$SW" "${LIBS[@]}" ;;
  esac
  echo "$r $mode" >>"$D/modes.txt"
  run_round "$D/step_go" "$r"
  [[ $mode == off ]] || stop "$AGENT_PID" 30
done
wait_exit "$SW" 30
r2=0
PYTHONPATH=$GPU_TESTS_DIR/lib${PYTHONPATH:+:$PYTHONPATH} python3 -B - "$D/steps.out" "$D/modes.txt" >"$OUT/steps.txt" <<'PY' || r2=$?
import step_times, sys
by = step_times.by_mode(sys.argv[1], sys.argv[2])
med = step_times.medians(by)
line = "step time medians: off %.4f ms, kernels %.4f ms (ratio %.4f), all collectors %.4f ms (ratio %.4f)" % (
    med["off"], med["kernels"], med["kernels"] / med["off"], med["all"], med["all"] / med["off"])
if "floor" in med:
    fl = med["floor"] - med["off"]
    line += "; floor (bare uprobes on the same launch symbols) %.4f ms (ratio %.4f); added cost over the floor's: kernels %.2fx, all %.2fx" % (
        med["floor"], med["floor"] / med["off"], (med["kernels"] - med["off"]) / fl if fl > 0 else float("nan"),
        (med["all"] - med["off"]) / fl if fl > 0 else float("nan"))
else:
    line += "; no floor arm (bin/kernels_overhead missing)"
print(line)
PY
cat "$OUT/steps.txt" >&2
summary="$(head -n1 "$OUT/counts.txt"); $(cat "$OUT/steps.txt")"
[[ $r1 == 0 && $r2 == 0 ]] && pass "$summary"
fail "$summary"
