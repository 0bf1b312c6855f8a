#!/usr/bin/env bash
# usage: 83_latency_probes.sh GPUSCOPE_BIN OUT_DIR
# Which probed CUDA calls a launch-bound PyTorch loop (workloads/torch_steps.py) makes, and
# what latency's probes cost on it:
# 1. `latency --json -p PID` on every call row of the site table, 4 s of steps: the probes
#    line per row (entries, timed, nested, filtered, unsampled) and the objects probed (-v).
# 2. Step time, interleaved rounds (GS83_ROUNDS, default 8 per arm), medians: off; latency on
#    every call row with entry+return probes (GPUSCOPE_UPROBE_SESSION=0); the same as uprobe
#    sessions; sessions timing 1 launch in 16; latency on its default rows.
# Needs python3 and torch on the host.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
D=${WORK:-/tmp/gpuscope-83}
rm -rf "$D"
mkdir -p "$D"
ALL=cudaMalloc,cudaMallocManaged,cudaMallocAsync,cudaFree,cudaFreeAsync,cudaMemcpy,cudaMemcpyAsync,cudaMemset,cudaLaunchKernel,cudaLaunchKernelExC,cudaGraphLaunch,cudaGraphInstantiate,cudaStreamBeginCapture,cudaStreamEndCapture,cudaStreamCreate,cudaStreamSynchronize,cudaEventCreate,cudaEventRecord,cudaEventSynchronize,cudaDeviceSynchronize,cudaGetDevice,cudaSetDevice,cuLaunchKernel,cuLaunchKernelEx,cuGraphLaunch,cuGraphInstantiateWithFlags,cuStreamBeginCapture_v2,cuStreamEndCapture,cuMemAlloc_v2,cuMemAllocAsync,cuMemFree_v2,cuMemFreeAsync,cuMemCreate,cuMemRelease,cuMemMap,cuMemUnmap,cuMemcpyHtoD_v2,cuMemcpyDtoH_v2,cuMemcpyAsync,cuStreamSynchronize,cuCtxSynchronize,cudaLaunchCooperativeKernel,cuLaunchCooperativeKernel,cudaLaunchHostFunc,cuLaunchHostFunc,cuCtxCreate_v4,cuCtxCreate_v2,cuCtxDestroy_v2,cuDevicePrimaryCtxRetain,cuDevicePrimaryCtxRelease_v2,cuDevicePrimaryCtxReset_v2,cuCtxSetCurrent,cuCtxPushCurrent_v2,cuCtxPopCurrent_v2,cudaDeviceReset
PER=${GS83_ROUNDS:-8}
modes=(off legacy session sampled default)
ROUNDS=$((PER * ${#modes[@]} + 10))

start_steps "$D/go" "$ROUNDS"

# start_latency PREFIX ARGS...: gpuscope latency in the background until it says "timing".
start_latency() {
  local prefix=$1
  shift
  "$GPUSCOPE" latency --json -p "$SW" "$@" >"$prefix.jsonl" 2>"$prefix.err" &
  LAT_PID=$!
  track "$LAT_PID"
  wait_for "$prefix.err" 'timing' 60 "$LAT_PID" || fail "latency did not start: $(tail -c 400 "$prefix.err")"
}

# 1. The probes table: 10 rounds (4000 steps) under latency on every row.
start_latency "$D/probes" --api "$ALL" -v
for ((r = 0; r < 10; r++)); do
  run_round "$D/go" "$r"
done
stop "$LAT_PID" 30
grep -E '"type":"probes"' "$D/probes.jsonl" >"$OUT/probes.jsonl" || true
grep -E 'probe sites|timing|discovery' "$D/probes.err" >"$OUT/objects.txt" || true
cp "$D/probes.jsonl" "$OUT/latency_all.jsonl"

# 2. Step time per arm, interleaved.
: >"$D/modes.txt"
for ((i = 0; i < PER * ${#modes[@]}; i++)); do
  r=$((i + 10))
  mode=${modes[$((i % ${#modes[@]}))]}
  case $mode in
    legacy) GPUSCOPE_UPROBE_SESSION=0 start_latency "$D/r$r" --api "$ALL" ;;
    session) start_latency "$D/r$r" --api "$ALL" ;;
    sampled) start_latency "$D/r$r" --api "$ALL" --sample-launches 16 ;;
    default) start_latency "$D/r$r" ;;
  esac
  echo "$r $mode" >>"$D/modes.txt"
  run_round "$D/go" "$r"
  [[ $mode == off ]] || stop "$LAT_PID" 30
done
wait_exit "$SW" 30
cp "$D/steps.out" "$D/modes.txt" "$OUT/"
PYTHONPATH=$GPU_TESTS_DIR/lib${PYTHONPATH:+:$PYTHONPATH} python3 -B - "$D/steps.out" "$D/modes.txt" "$OUT/probes.jsonl" >"$OUT/figures.txt" <<'PY'
import json, step_times, sys
by = step_times.by_mode(sys.argv[1], sys.argv[2])
med = step_times.medians(by)
print("step time medians: " + ", ".join("%s %.4f ms (%.3fx)" % (m, med[m], med[m] / med["off"]) for m in med))
steps = 4000
for line in open(sys.argv[3]):
    p = json.loads(line)
    print("%-32s %-7s per step: entries %.2f timed %.2f nested %.2f filtered %.2f unsampled %.2f" % (
        p["api"], p["layer"], p["entries"] / steps, p["timed"] / steps, p["nested"] / steps, p["filtered"] / steps,
        p["unsampled"] / steps))
PY
cat "$OUT/figures.txt" >&2
pass "$(head -n1 "$OUT/figures.txt")"
