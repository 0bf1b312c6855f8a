#!/usr/bin/env bash
# usage: tests/gpu/run.sh GPUSCOPE_BIN [OUT_DIR]   (ONLY="40 50" runs just the checks whose
#        names start with those numbers)
# Runs every tests/gpu/checks/*.sh on the GPU host (as root; mounts nothing). Each check
# gets the binary and OUT_DIR/<check>/ for its raw outputs (traces, workload output,
# profiler traces, figures.json) and prints PASS/FAIL/SKIP; its full log is kept in
# OUT_DIR/<check>.log. Ends with "N passed, M failed, K skipped"; exits 1 if any failed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 GPUSCOPE_BIN [OUT_DIR]" >&2; exit 2; }
BIN=$(realpath "$1")
OUT=$(mkdir -p "${2:-/tmp/gpuscope-gpu}" && cd "${2:-/tmp/gpuscope-gpu}" && pwd)
[[ -x $BIN ]] || { echo "not executable: $BIN" >&2; exit 2; }
[[ $(id -u) == 0 ]] || echo "warning: not root; gpuscope needs root (or CAP_BPF+CAP_PERFMON)" >&2

# Per-check wall-clock limits (seconds). A device call is limited to 10 minutes: use ONLY to
# run a few checks per call.
declare -A LIMIT=([10_trace_pytorch]=210 [20_trace_known_launch]=90 [30_trace_overhead]=150
  [40_latency_malloc]=120 [80_kernels_pytorch]=300 [85_kernels_overhead]=560 [90_memleak]=240 [92_memleak_contexts]=200 [94_issue40_names_bridge]=240 [95_starvation_pytorch]=200 [96_pyframes_pytorch]=200 [50_ioctl_pytorch]=150 [60_uvm_unavailable]=60 [70_bridge_nvml]=150 [97_agent_pytorch]=420 [99_agent_inside]=240
  [81_trace_names]=240 [82_gputime_duty]=420 [83_latency_probes]=560 [84_agent_cost_table]=580 [86_gputime_spin]=150 [87_gputime_pytorch]=240 [88_gputime_overhead]=540 [89_gputime_timeline]=200 [98_deploy_anomaly_gpu]=240 [79_graphics_survey]=150 [91_errors_xid]=120 [93_nccl_torch]=300 [100_copies_torch]=120)
passed=0 failed=0 skipped=0
{
  echo "date: $(date -Is)"
  echo "gpuscope: $BIN ($("$BIN" --version 2>&1 || true))"
  echo "kernel: $(uname -r)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  fi
} | tee "$OUT/host.txt"

for check in "$HERE"/checks/*.sh; do
  name=$(basename "$check" .sh)
  if [[ -n ${ONLY:-} && " $ONLY " != *" ${name%%_*} "* ]]; then continue; fi
  limit=${LIMIT[$name]:-120}
  echo "== $name (limit ${limit}s)"
  rc=0
  CHECK_NAME=$name timeout -k 10 "$limit" bash "$check" "$BIN" "$OUT/$name" 2>&1 | tee "$OUT/$name.log" || rc=$?
  verdict=$(grep -E "^(PASS|FAIL|SKIP) $name:" "$OUT/$name.log" | tail -n1 || true)
  if [[ $rc == 0 && $verdict == PASS* ]]; then
    passed=$((passed + 1))
  elif [[ $rc == 77 && $verdict == SKIP* ]]; then
    skipped=$((skipped + 1))
  else
    failed=$((failed + 1))
    if [[ $verdict != FAIL* ]]; then
      case $rc in
        124 | 137) why="timed out after ${limit}s" ;;
        *) why="exited with $rc without a verdict" ;;
      esac
      echo "FAIL $name: $why" | tee -a "$OUT/$name.log"
    fi
  fi
done
echo "$passed passed, $failed failed, $skipped skipped" | tee "$OUT/summary.txt"
echo "raw outputs: $OUT" >&2
[[ $failed == 0 ]]
