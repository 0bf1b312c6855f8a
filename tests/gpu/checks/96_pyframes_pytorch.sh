#!/usr/bin/env bash
# usage: 96_pyframes_pytorch.sh GPUSCOPE_BIN OUT_DIR
# CPython frames read from the interpreter (no -X perf): `gpuscope bridge` (real NVML) +
# `gpuscope starvation --collect-ustack` on workloads/torch_starve.py started with plain
# `python3` (Ubuntu's 3.12 with PyTorch). The thread `preprocess` stalling the GPU in
# preprocess_burn() must be named in its rows as `py::preprocess_burn (…/torch_starve.py:LINE)`
# under `py::stall_worker`, and preprocess_burn must lead the flame graph. Then the same with
# `-X perf`: the interpreter walk wins over the perf map (no `py::name:file` perf-map frames).
# Also prints the walk's counters (-v) and, with bin/pyframes_overhead beside gpuscope and
# tests/fixtures/python/burn.py in the tree, the walk's cost per sample on this interpreter.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
python3 -c 'import torch' 2>/dev/null || skip "no PyTorch for python3"
start_bridge
results=()
for mode in plain xperf; do
  rm -f "$OUT/$mode".*
  flags=(-u -B)
  [[ $mode == xperf ]] && flags+=(-X perf)
  python3 "${flags[@]}" "$GPU_TESTS_DIR/workloads/torch_starve.py" starve 14 >"$OUT/$mode.workload" 2>&1 &
  WL=$!
  track "$WL"
  wait_for "$OUT/$mode.workload" '^READY ' 90 "$WL" || fail "workload ($mode) not READY: $(tail -c 400 "$OUT/$mode.workload")"
  "$GPUSCOPE" starvation --json -v --pin-dir "$PIN" -p "$WL" --collect-ustack -d 10 \
    --folded "$OUT/$mode.folded" --svg "$OUT/$mode.svg" >"$OUT/$mode.jsonl" 2>"$OUT/$mode.err" || true
  wait_exit "$WL" 60
  r=0
  python3 - "$mode" "$OUT/$mode.jsonl" "$OUT/$mode.workload" "$OUT/$mode.folded" "$OUT/$mode.err" \
    "$GPU_TESTS_DIR/workloads/torch_starve.py" >"$OUT/$mode.result" <<'PY' || r=$?
import json, re, sys
mode, rows_path, wl_path, folded_path, err_path, script = sys.argv[1:7]
src = open(script).read().splitlines()
def lines_of(fn):
    start = next(i for i, l in enumerate(src) if l.startswith(f"def {fn}("))
    end = next((i for i in range(start + 1, len(src)) if src[i] and not src[i][0].isspace()), len(src))
    return range(start + 1, end + 1)
ready = next(json.loads(l[6:]) for l in open(wl_path) if l.startswith("READY "))
rows = [json.loads(l) for l in open(rows_path) if l.startswith("{")]
mine = [r for r in rows if r.get("type") == "starvation" and r["tid"] == ready["tid"]]
pat = re.compile(r"^py::(\S+) \((.+):(\d+)\)$")
named = 0
bad = []
perf_frames = 0
for r in mine:
    py = [pat.match(f) for f in r.get("ustack", [])]
    perf_frames += sum(1 for f in r.get("ustack", []) if re.match(r"^py::[^ ]+:/", f))
    py = [m for m in py if m]
    if not py:
        continue
    fns = [m.group(1) for m in py]
    if "preprocess_burn" not in fns:
        continue
    i = fns.index("preprocess_burn")
    m = py[i]
    ok = m.group(2) == script and int(m.group(3)) in lines_of("preprocess_burn") and \
        i + 1 < len(fns) and fns[i + 1] in ("stall_worker", "worker")
    named += ok
    if not ok:
        bad.append(r["ustack"])
weights = {}
for line in open(folded_path):
    stack, _, w = line.rstrip("\n").rpartition(" ")
    py = [f for f in stack.split(";") if f.startswith("py::")]
    leaf = py[-1].split(" (")[0] if py else "(no python frame)"
    weights[leaf] = weights.get(leaf, 0) + int(w)
lead = max(weights, key=weights.get) if weights else None
share = weights.get(lead, 0) / max(sum(weights.values()), 1)
err = open(err_path).read()
walks = re.search(r"(\d+) Python walks", err)
print(f"{mode}: {len(mine)} rows for tid {ready['tid']}, {named} name py::preprocess_burn with file:line under "
      f"stall_worker, flame graph leads with {lead} ({share:.0%}), perf-map frames in rows {perf_frames}, "
      f"walks {walks.group(1) if walks else '?'}" + (f", bad stacks {bad[:1]}" if bad else "") +
      (" [no layout]" if "no interpreter layout" in err else ""))
ok = mine and named == len([r for r in mine if any("preprocess_burn" in f for f in r.get("ustack", []))]) and named > 0 \
    and lead == "py::preprocess_burn" and perf_frames == 0 and not bad
sys.exit(0 if ok else 1)
PY
  cat "$OUT/$mode.result" >&2
  results+=("$(cat "$OUT/$mode.result")")
  [[ $r == 0 ]] || { stop "$BR"; fail "${results[*]} | $(tail -c 300 "$OUT/$mode.err" | tr '\n' ' ')"; }
done
stop "$BR"
# The walk's cost per sample on this host's interpreter, when the bench was copied beside gpuscope.
BENCH=$(dirname "$GPUSCOPE")/pyframes_overhead
BURN=$GPU_TESTS_DIR/../fixtures/python/burn.py
if [[ -x $BENCH && -f $BURN ]]; then
  "$BENCH" --python "$(command -v python3)" --script "$BURN" --seconds 5 --depths 0 --depths 30 --depths 100 \
    >"$OUT/bench.jsonl" 2>"$OUT/bench.err" || fail "pyframes_overhead: $(tail -c 300 "$OUT/bench.err")"
  cost=$(python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(", ".join("%d frames +%.1f us (%.2fx)" % (j["depth_frames"], j["walk_ns"] / 1000, j["ratio"]) for j in rows))
PY
)
  results+=("walk cost per sample: $cost")
else
  results+=("walk cost not measured (no $BENCH or $BURN)")
fi
pass "${results[*]}"
