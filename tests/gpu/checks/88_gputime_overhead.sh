#!/usr/bin/env bash
# usage: 88_gputime_overhead.sh GPUSCOPE_BIN OUT_DIR
# What libgpuscope-cupti.so costs a PyTorch loop, as same-run step-time ratios: launch-bound
# (workloads/torch_gputime.py launch) and GPU-bound (gpu). Configurations, interleaved in rounds,
# medians compared: none; idle (injected, no gpuscope attached: only its flag check); recording
# (injected with --always: CUPTI's activity on and every buffer handed over; gpuscope's one
# uprobe per buffer adds a trap per flush, ~10 a second, so it is left out here: no other
# probe of gpuscope may weigh on the ratio). Goals for recording: <= 1.03 launch-bound,
# <= 1.005 GPU-bound. GS88_ROUNDS (default 5) sets the rounds.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
[[ -f $(dirname "$GPUSCOPE")/libgpuscope-cupti.so ]] || skip "libgpuscope-cupti.so not beside $GPUSCOPE"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || skip "no torch with CUDA"
W=$GPU_TESTS_DIR/workloads/torch_gputime.py
: >"$OUT/results.tsv"
one() { # mode config round
  local mode=$1 cfg=$2 steps=400 res
  [[ $mode == gpu ]] && steps=60
  case $cfg in
    none) res=$(python3 -B "$W" "$mode" "$steps") ;;
    idle) res=$("$GPUSCOPE" run -- python3 -B "$W" "$mode" "$steps") ;;
    recording)
      res=$(GPUSCOPE_CUPTI_SUMMARY=$OUT/summary_${mode}_$3.tsv "$GPUSCOPE" run --always -- python3 -B "$W" "$mode" "$steps")
      [[ -s $OUT/summary_${mode}_$3.tsv ]] || fail "$mode: the library recorded no kernels"
      ;;
  esac
  sed -n 's/^RESULT //p' <<<"$res" |
    python3 -c "import json,sys; print('$mode\t$cfg\t%.5f' % json.load(sys.stdin)['median_ms'])" >>"$OUT/results.tsv"
}
for ((round = 1; round <= ${GS88_ROUNDS:-5}; round++)); do
  case $((round % 3)) in
    1) order="none idle recording" ;; 2) order="idle recording none" ;; *) order="recording none idle" ;;
  esac
  for mode in launch gpu; do
    for cfg in $order; do one "$mode" "$cfg" "$round" || fail "$mode/$cfg failed"; done
  done
done
python3 - "$OUT/results.tsv" >"$OUT/result.txt" <<'PY' || fail "$(cat "$OUT/result.txt")"
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, c, v = line.split("\t")
    t[(m, c)].append(float(v))
out, bad = [], []
for mode, goal in (("launch", 1.03), ("gpu", 1.005)):
    none = statistics.median(t[(mode, "none")])
    idle = statistics.median(t[(mode, "idle")]) / none
    rec = statistics.median(t[(mode, "recording")]) / none
    out.append("%s: step %.3f ms, idle %.4fx, recording %.4fx (goal %.3f)" % (mode, none, idle, rec, goal))
    if rec > goal:
        bad.append(mode)
print(("over goal: %s | " % ",".join(bad) if bad else "") + "; ".join(out))
sys.exit(1 if bad else 0)
PY
pass "$(cat "$OUT/result.txt")"
