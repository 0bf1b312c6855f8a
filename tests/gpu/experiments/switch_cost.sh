#!/usr/bin/env bash
# usage: switch_cost.sh GPUSCOPE NVML_STANDIN_LIB [ROUNDS]
# What starvation's sched_switch hook costs a context switch of a GPU process's thread, on the
# build machine: workloads/pingpong.c (two threads on CPU 0, two switches a round trip) is
# listed as a GPU process holding 1 GiB by a bridge on the stand-in NVML
# (build/tests/fixtures/nvml/lib/libnvidia-ml.so.1), and timed with no gpuscope, under the agent
# with starvation alone (default --starvation-min-idle-ms 1000) while its GPU is idle (its threads
# counted as starving) and busy (60 %: nothing to count, the hook is off), and under the agent with
# kernels alone (hooks elsewhere). Arms interleaved,
# ROUNDS each (default 4); prints every run and each arm's median.
set -uo pipefail
G=$1
NVML=$2
ROUNDS=${3:-4}
HERE=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $G && -f $NVML && $ROUNDS =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: switch_cost.sh GPUSCOPE NVML_STANDIN_LIB [ROUNDS]" >&2
  exit 2
}
D=$(mktemp -d)
PIN=/sys/fs/bpf/gs-switch-cost-$$
cleanup() {
  exec 3>&-
  [[ -n ${P:-} ]] && kill "$P" 2>/dev/null
  [[ -n ${A:-} ]] && kill -INT "$A" 2>/dev/null
  [[ -n ${B:-} ]] && kill -INT "$B" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$PIN" "$D"
}
trap cleanup EXIT
cc -O2 -pthread -o "$D/pingpong" "$HERE/workloads/pingpong.c" || exit 1
arm() { # MODE UTIL
  A=
  B=
  mkfifo "$D/go"
  PINGPONG_WAIT=1 "$D/pingpong" 50000 7 <"$D/go" >"$D/pp.out" &
  P=$!
  exec 3>"$D/go"
  for _ in $(seq 50); do grep -q ready "$D/pp.out" && break; sleep 0.1; done
  printf 'device 0 util %s memutil 10 mem_total 85899345920 mem_free 42949672960 mem_used 42949672960\nprocess 0 %s 1073741824\n' \
    "$2" "$P" >"$D/nvml.txt"
  if [[ $1 != none ]]; then
    mkdir -p "$PIN"
    NVML_STANDIN_FILE=$D/nvml.txt "$G" bridge --nvml "$NVML" --pin-dir "$PIN" >"$D/bridge.out" 2>&1 &
    B=$!
    sleep 1.5
    "$G" agent --bridge-pin-dir "$PIN" --collectors "$1" --listen 127.0.0.1:0 >"$D/agent.out" 2>&1 &
    A=$!
    sleep 3
    kill -0 "$A" 2>/dev/null || {
      echo "switch_cost.sh: the agent did not stay up: $(tail -c 300 "$D/agent.out")" >&2
      exit 1
    }
  fi
  echo go >&3
  wait "$P"
  P=
  exec 3>&-
  rm -f "$D/go"
  echo "$1 util=$2 $(tail -n1 "$D/pp.out")"
  [[ -n $A ]] && kill -INT "$A" && wait "$A"
  [[ -n $B ]] && kill -INT "$B" && wait "$B"
  A=
  B=
  rm -rf "$PIN"
}
for ((r = 0; r < ROUNDS; r++)); do
  for m in "none 0" "starvation 0" "starvation 60" "kernels 60"; do
    # In this shell, not a pipeline's: a failed arm's exit then runs cleanup with its pids.
    # shellcheck disable=SC2086
    arm $m >>"$D/runs.txt"
    tail -n1 "$D/runs.txt"
  done
done
echo "medians of the runs' medians, ns per round trip (two switches):"
awk '{k = $1 " " $2; v[k] = v[k] " " $8} END {for (k in v) print k, v[k]}' "$D/runs.txt" | sort |
  while read -r mode util vals; do
    med=$(tr ' ' '\n' <<<"$vals" | grep . | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    echo "  $mode $util: $med"
  done
