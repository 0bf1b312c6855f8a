#!/usr/bin/env bash
# usage: [AGENT_ARGS="--collectors …"] bench/agent_figures.sh BUILD_DIR
# The agent's footprint (docs/agent.md), on the stand-in libraries:
# Every collector (the default list); no bridge runs here without NVML.
# 1. RSS and BPF map memory (memlock of its map fds) with 100 traced processes alive;
# 2. its userspace CPU while one process launches through cuLaunchKernel as fast as it can for
#    10 s, scraped every second (the BPF side per launch is measured by bench/kernels_overhead).
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
L=$B/tests/fixtures/standin/lib
D=$(mktemp -d /tmp/gs-agent-figures.XXXXXX)
ln -s "$B/tests/fixtures/standin/standin_app" "$D/agfig"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -USR1 "$p" 2>/dev/null || true; done
  [[ -n ${AG:-} ]] && kill -INT "$AG" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
"$B/gpuscope" agent --json --listen 127.0.0.1:0 -c agfig --lib "$L/libcuda.so.1" --lib "$L/libcudart.so.13" \
  --bridge-pin-dir "${PIN_DIR:-/sys/fs/bpf}" ${AGENT_ARGS:-} >"$D/agent.jsonl" 2>"$D/agent.err" &
AG=$!
for _ in $(seq 100); do grep -q '"type":"agent"' "$D/agent.jsonl" 2>/dev/null && break; sleep 0.1; done
PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$D/agent.jsonl")
metric() { curl -s "127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15) / t }' "/proc/$AG/stat"; }
memlock() {
  local fd sum=0 v
  for fd in /proc/"$AG"/fdinfo/*; do
    v=$(awk '$1 == "memlock:" { print $2 }' "$fd" 2>/dev/null || true)
    if [[ -n $v ]] && grep -q '^map_type:' "$fd" 2>/dev/null; then sum=$((sum + v)); fi
  done
  echo $sum
}
echo "rss_idle_bytes $(metric process_resident_memory_bytes)"
for _ in $(seq 100); do
  "$D/agfig" prestart 3 >/dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 200); do
  [[ $(curl -s "127.0.0.1:$PORT/metrics" | awk '$1 == "gpuscope_exported_processes{state=\"running\"}" { print $2 }') == 100 ]] && break
  sleep 0.1
done
echo "processes $(curl -s "127.0.0.1:$PORT/metrics" | awk '$1 == "gpuscope_exported_processes{state=\"running\"}" { print $2 }')"
echo "rss_100_processes_bytes $(metric process_resident_memory_bytes)"
echo "bpf_map_memlock_bytes $(memlock)"
for p in "${pids[@]}"; do kill -USR1 "$p" 2>/dev/null || true; done
wait "${pids[@]}" 2>/dev/null || true
pids=()
c0=$(cpu_s)
"$D/agfig" driver_loop 10000 >"$D/loop.out" &
LP=$!
for _ in $(seq 10); do curl -s "127.0.0.1:$PORT/metrics" >/dev/null; sleep 1; done
wait $LP
c1=$(cpu_s)
calls=$(sed -n 's/.*calls=\([0-9]*\).*/\1/p' "$D/loop.out")
echo "traced: $(cat "$D/loop.out")"
python3 -c "import sys; c=float(sys.argv[2])-float(sys.argv[1]); n=int(sys.argv[3]); print(f'launches_per_s {n/10:.0f} agent_cpu_s {c:.3f} agent_cpu_share_of_core {c/10:.4f}')" "$c0" "$c1" "$calls"
