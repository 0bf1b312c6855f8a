#!/usr/bin/env bash
# usage: 10_trace_pytorch.sh GPUSCOPE_BIN OUT_DIR
# Driver-layer launches traced by gpuscope in a PyTorch program's measured window must add
# up to the kernels the PyTorch profiler (CUPTI) saw: uncaptured cuLaunchKernel[Ex] +
# graph nodes x cuGraphLaunch == profiler kernels. Workload: workloads/torch_mix.py.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
export GPUSCOPE # used by start_tracer
rm -f "$OUT"/{go,workload.out,workload.err,trace.jsonl,trace.err,figures.json}

log "starting workloads/torch_mix.py (warm-up before the tracer attaches)"
python3 -u -B "$GPU_TESTS_DIR/workloads/torch_mix.py" "$OUT/go" "$OUT" >"$OUT/workload.out" 2>"$OUT/workload.err" &
WL_PID=$!
track "$WL_PID"
wait_for "$OUT/workload.out" '^READY ' 100 "$WL_PID" ||
  fail "workload not READY: $(grep -h ERROR "$OUT/workload.out" || true) $(tail -c 600 "$OUT/workload.err" | tr '\n' ' ')"
grep '^READY ' "$OUT/workload.out" >&2

# --lib for the libcudart/libcuda copies the workload has mapped (the tracer would find
# them itself too; copies are de-duplicated by inode).
LIBS=()
while IFS= read -r lib; do
  if [[ -f $lib ]]; then LIBS+=(--lib "$lib"); fi
done < <(python3 -c 'import json,sys; [print(l) for l in json.loads(sys.argv[1]).get("libs", [])]' \
  "$(grep -m1 '^READY ' "$OUT/workload.out" | cut -d' ' -f2-)")
LIBCUDA=$(ld_cache_libcuda)
if [[ -n $LIBCUDA && -f $LIBCUDA ]]; then LIBS+=(--lib "$LIBCUDA"); fi

start_tracer "$OUT/trace" --layer driver -p "$WL_PID" "${LIBS[@]}" -d 180
sleep 1
touch "$OUT/go"
log "workload released; waiting for it to finish"
wait_exit "$WL_PID" 60
[[ $WAIT_RC == 0 ]] || fail "workload exited with $WAIT_RC: $(grep -h ERROR "$OUT/workload.out" || true) $(tail -c 600 "$OUT/workload.err" | tr '\n' ' ')"
log "workload done; stopping the tracer"
stop_tracer "$OUT/trace"
log "tracer stopped; analysing"
grep '"type":"summary"' "$OUT/trace.jsonl" >&2

if python3 -B "$GPU_TESTS_DIR/lib/analyze_pytorch.py" "$OUT/trace.jsonl" "$OUT/workload.out" "$WL_PID" \
  "$OUT/figures.json" >"$OUT/result.txt"; then
  cat "$OUT/result.txt"
  exit 0
fi
cat "$OUT/result.txt"
exit 1
