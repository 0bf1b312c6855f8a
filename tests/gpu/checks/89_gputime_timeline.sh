#!/usr/bin/env bash
# usage: 89_gputime_timeline.sh GPUSCOPE_BIN OUT_DIR
# `gpuscope timeline` of 5 PyTorch training steps (workloads/torch_gputime.py train 5) under
# libgpuscope-cupti.so, with `gpuscope bridge` publishing device counters: the trace is
# checked by tests/integration/check_timeline.py (bin/check_timeline.py): CPU call spans,
# kernel spans on GPU stream tracks, a launch arrow into most kernels, counter tracks. Then the
# same of a timeline attached with -p to a process already running under `gpuscope run`.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
CHECKER=$GPU_TESTS_DIR/bin/check_timeline.py
[[ -f $CHECKER ]] || skip "check_timeline.py missing ($CHECKER)"
[[ -f $(dirname "$GPUSCOPE")/libgpuscope-cupti.so ]] || skip "libgpuscope-cupti.so not beside $GPUSCOPE"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || skip "no torch with CUDA"
"$GPUSCOPE" bridge -d 100 >"$OUT/bridge.out" 2>"$OUT/bridge.err" &
BP=$!
track "$BP"
sleep 1
"$GPUSCOPE" timeline --json -c python3 -d 100 -o "$OUT/timeline.json" >"$OUT/timeline.jsonl" 2>"$OUT/timeline.err" &
TP=$!
track "$TP"
wait_for "$OUT/timeline.err" 'recording a timeline' 60 "$TP" || fail "timeline did not start: $(tail -c 300 "$OUT/timeline.err")"
"$GPUSCOPE" run --always -- python3 -u -B "$GPU_TESTS_DIR/workloads/torch_gputime.py" train 5 >"$OUT/workload.out" \
  2>"$OUT/workload.err" || fail "workload failed: $(tail -c 300 "$OUT/workload.err")"
sleep 1.5
stop "$TP" 60
stop "$BP" 10
cat "$OUT/timeline.jsonl" >&2
pid=$(sed -n 's/^RESULT //p' "$OUT/workload.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
# 10 steps (5 warm-up) of about 17 kernels; most kernels carry an arrow from their launch.
python3 "$CHECKER" "$OUT/timeline.json" --pid "$pid" --gpu --min-cpu 100 --min-kernels 100 --min-flows 100 \
  --counters >"$OUT/result.txt" || fail "$(cat "$OUT/result.txt")"
first="$(cat "$OUT/result.txt"), $(ls -l "$OUT/timeline.json" | awk '{print $5}') bytes"

# 2. Attached late (issue 24): the workload started through `gpuscope run` with nothing
# recording, `timeline -p` attached seconds later: its kernels still carry their launches' arrows.
"$GPUSCOPE" run -- python3 -u -B "$GPU_TESTS_DIR/workloads/torch_gputime.py" train 60000 >"$OUT/late_workload.out" \
  2>"$OUT/late_workload.err" &
RP=$!
track "$RP"
lpid=
for _ in $(seq 100); do
  lpid=$(pgrep -P "$RP" | head -n1) && [[ -n $lpid ]] && break
  sleep 0.1
done
[[ -n $lpid ]] || fail "late: no workload under gpuscope run: $(tail -c 300 "$OUT/late_workload.err")"
track "$lpid"
# The library is loaded at CUDA's start (cuInit); 4 s later the timeline comes to a process
# long running.
for _ in $(seq 600); do
  grep -q libgpuscope-cupti "/proc/$lpid/maps" 2>/dev/null && break
  sleep 0.1
done
grep -q libgpuscope-cupti "/proc/$lpid/maps" || fail "late: the library was not loaded in 60 s"
sleep 4
alive "$lpid" || fail "late: the workload ended early: $(tail -c 300 "$OUT/late_workload.err")"
"$GPUSCOPE" timeline --json -p "$lpid" -d 4 -o "$OUT/late.json" >"$OUT/late.jsonl" 2>"$OUT/late.err" ||
  fail "late: timeline failed: $(tail -c 300 "$OUT/late.err")"
stop "$RP" 30
python3 "$CHECKER" "$OUT/late.json" --pid "$lpid" --gpu --min-cpu 100 --min-kernels 100 --min-flows 100 \
  >"$OUT/late_result.txt" || fail "first: $first; late: $(cat "$OUT/late_result.txt"); $(tail -n1 "$OUT/late.jsonl")"
pass "first: $first; attached late: $(cat "$OUT/late_result.txt"); $(tail -n1 "$OUT/late.jsonl")"
