#!/usr/bin/env bash
# usage: trap_cost.sh GPUSCOPE_BIN KERNELS_OVERHEAD_BIN STANDIN_DIR [ROUNDS]
# What one cuLaunchKernel trap costs by the way its probe is attached and by what runs in it:
# the stand-in's driver_loop (cuLaunchKernel 256 at a time, 1.5 s, ns_per_call) under nothing,
# the floor's bare counting program as one perf-event uprobe per site, as one uprobe_multi link
# and as a uprobe session that declines the return (kernels_overhead --hold --floor-attach), and
# under gpuscope's own programs: `kernels`, the agent with kernels, with kernels and latency
# (launches timed by kernels' session programs), and with its default collectors. Each arm runs
# 5 loops a round; the line is the round's sorted ns_per_call. STANDIN_DIR is the build's
# tests/fixtures/standin (its lib/ holds the stand-in libcuda.so.1).
set -uo pipefail
G=$1 FLOOR=$2 S=$3 ROUNDS=${4:-2}
LIB=$S/lib/libcuda.so.1
loops() {
  for _ in 1 2 3 4 5; do
    LD_LIBRARY_PATH=$S/lib "$S/standin_app" driver_loop 1500 | grep -o 'ns_per_call=[0-9.]*' | cut -d= -f2
  done | sort -n | tr '\n' ' '
}
agent() { "$G" agent --lib "$LIB" --listen 127.0.0.1:9477 "$@" >/dev/null 2>&1 & }
[[ -x $G && -x $FLOOR && -f $LIB ]] || { echo "trap_cost.sh: needs GPUSCOPE_BIN, KERNELS_OVERHEAD_BIN and STANDIN_DIR/lib/libcuda.so.1" >&2; exit 2; }
for ((r = 1; r <= ROUNDS; r++)); do
  for arm in none perf multi session kernels agent:kernels agent:kernels,latency agent; do
    case $arm in
      none) pid= ;;
      perf | multi | session) "$FLOOR" --hold --floor-attach "$arm" --lib "$LIB" >/dev/null & pid=$! ;;
      kernels) "$G" kernels --lib "$LIB" --count-layer driver --interval 100 >/dev/null 2>&1 & pid=$! ;;
      agent:*) agent --collectors "${arm#agent:}"; pid=$! ;;
      agent) agent; pid=$! ;;
    esac
    [[ -n $pid ]] && sleep 5
    # An arm whose tool exited (a port taken, probes refused) would time the bare loop.
    [[ -z $pid ]] || kill -0 "$pid" 2>/dev/null || { echo "trap_cost.sh: $arm did not stay up" >&2; exit 1; }
    echo "round $r $arm: $(loops)"
    [[ -n $pid ]] && kill -INT "$pid" && wait "$pid"
  done
done
