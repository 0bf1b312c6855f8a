#!/usr/bin/env bash
# usage: 80_kernels_pytorch.sh GPUSCOPE_BIN OUT_DIR
# `gpuscope kernels` on a PyTorch training loop (workloads/torch_train.py), twice: attached
# before the process's first CUDA call, and attached to a process that has already run the
# loop. In each, the launches of the measured window must equal torch.profiler's kernels
# (graph replays x nodes apart), every named row's count must equal the profiler's count for
# that name, and the share of launches left unnamed is recorded.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
libcuda_libs
summary=()
rc_all=0
for mode in before running; do
  # Raw files stay in WORK (OUT gets the figures, results and tables only).
  D=${WORK:-/tmp/gpuscope-80}/$mode
  mkdir -p "$D"
  rm -f "$D"/{go,workload.out,workload.err,kernels.jsonl,kernels.err,figures.json,table.txt}
  log "mode $mode: starting workloads/torch_train.py"
  python3 -u -B "$GPU_TESTS_DIR/workloads/torch_train.py" "$mode" "$D/go" "$D" >"$D/workload.out" 2>"$D/workload.err" &
  WL=$!
  track "$WL"
  wait_for "$D/workload.out" '^READY ' 120 "$WL" || fail "workload ($mode) not READY: $(tail -c 600 "$D/workload.err" | tr '\n' ' ')"
  log "gpuscope kernels --json --interval 0.25 -p $WL ${LIBS[*]}"
  start_kernels "$D/kernels" -v --json --interval 0.25 -p "$WL" "${LIBS[@]}" -d 150
  # The same process, seen by a second, human-readable instance: the top rows at the end.
  "$GPUSCOPE" kernels --interval 60 --top 15 -p "$WL" "${LIBS[@]}" -d 150 >"$D/table.txt" 2>"$D/table.err" &
  TP=$!
  track "$TP"
  wait_for "$D/table.err" 'counting launches' 60 "$TP" || fail "second kernels did not start"
  touch "$D/go"
  wait_exit "$WL" 120
  [[ $WAIT_RC == 0 ]] || fail "workload ($mode) exited with $WAIT_RC: $(tail -c 600 "$D/workload.err" | tr '\n' ' ')"
  # With -p, gpuscope ends when the process has; give it the final rows.
  wait_stop "$KP" "$TP"
  grep -v '^libbpf' "$D/kernels.err" | grep -E 'counting at|kernels:' >"$D/naming.txt" || true
  cat "$D/naming.txt" >&2
  r=0
  python3 -B "$GPU_TESTS_DIR/lib/analyze_kernels.py" "$D/kernels.jsonl" "$D/workload.out" "$WL" "$mode" \
    "$D/figures.json" >"$D/result.txt" || r=$?
  cat "$D/result.txt" >&2
  for f in figures.json result.txt table.txt naming.txt; do cp "$D/$f" "$OUT/${mode}_$f" 2>/dev/null || true; done
  summary+=("$(head -n1 "$D/result.txt")")
  [[ $r == 0 ]] || rc_all=1
done
if [[ $rc_all == 0 ]]; then pass "${summary[*]}"; fi
fail "${summary[*]}"
