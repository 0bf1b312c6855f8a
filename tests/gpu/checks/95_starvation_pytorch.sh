#!/usr/bin/env bash
# usage: 95_starvation_pytorch.sh GPUSCOPE_BIN OUT_DIR
# `gpuscope bridge` (real NVML) + `gpuscope starvation` on workloads/torch_starve.py run with
# `python3 -X perf`:
# - starve: the GPU idles while a thread named `preprocess` burns CPU in preprocess_burn().
#   starvation must report that thread, and py::preprocess_burn must lead its flame graph
#   (the heaviest leaf-side Python frame of the folded stacks); the SVG must parse.
# - busy: the same preprocessing off the critical path, GPU kept busy: no rows.
# Also records the shortest stall reported (the issue's "shortest stall detected").
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
start_bridge
results=()
for mode in starve busy; do
  rm -f "$OUT/$mode".*
  python3 -X perf -u -B "$GPU_TESTS_DIR/workloads/torch_starve.py" "$mode" 14 >"$OUT/$mode.workload" 2>&1 &
  WL=$!
  track "$WL"
  wait_for "$OUT/$mode.workload" '^READY ' 90 "$WL" || fail "workload ($mode) not READY: $(tail -c 400 "$OUT/$mode.workload")"
  extra=()
  [[ $mode == starve ]] && extra=(--folded "$OUT/$mode.folded" --svg "$OUT/$mode.svg")
  "$GPUSCOPE" starvation --json -v --pin-dir "$PIN" -p "$WL" --collect-ustack -d 10 "${extra[@]}" \
    >"$OUT/$mode.jsonl" 2>"$OUT/$mode.err" || true
  wait_exit "$WL" 60
  r=0
  python3 - "$mode" "$OUT/$mode.jsonl" "$OUT/$mode.workload" "$OUT/$mode.folded" "$OUT/$mode.svg" >"$OUT/$mode.result" <<'PY' || r=$?
import json, sys, xml.etree.ElementTree as ET
mode, rows_path, wl_path, folded_path, svg_path = sys.argv[1:6]
ready = next(json.loads(l[6:]) for l in open(wl_path) if l.startswith("READY "))
rows = [json.loads(l) for l in open(rows_path) if l.startswith("{")]
rows = [r for r in rows if r.get("type") == "starvation"]
if mode == "busy":
    print(f"busy: {len(rows)} rows (want 0)")
    sys.exit(0 if not rows else 1)
mine = [r for r in rows if r["tid"] == ready["tid"]]
others = {(r["tid"], r.get("thread")) for r in rows if r["tid"] != ready["tid"]}
cpu = sum(r["cpu_time_ns"] for r in mine)
ok = bool(mine) and all(r.get("thread") == "preprocess" for r in mine)
ustack_named = any(any("preprocess_burn" in f for f in r.get("ustack", [])) for r in mine)
weights = {}
for line in open(folded_path):
    stack, _, w = line.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    py = [f for f in frames if f.startswith("py::")]
    leaf_py = py[-1] if py else "(no python frame)"
    weights[leaf_py] = weights.get(leaf_py, 0) + int(w)
lead = max(weights, key=weights.get) if weights else None
ET.parse(svg_path)
min_idle = min((r["idle_ns"] for r in mine), default=None)
print(f"starve: {len(mine)} rows for tid {ready['tid']} (thread preprocess), cpu {cpu/1e9:.2f} s, "
      f"ustack names preprocess_burn: {ustack_named}, flame graph leads with {lead} "
      f"({weights.get(lead, 0)/max(sum(weights.values()),1):.0%} of sampled time), other threads {sorted(others)[:5]}, "
      f"smallest idle_ns in a row {min_idle}")
ok = ok and ustack_named and lead is not None and "preprocess_burn" in lead
sys.exit(0 if ok else 1)
PY
  # The sched_switch hook: off while the GPU is busy, attached again for an idle spell.
  echo "$mode: $(grep -o 'sched_switch hook attached [0-9]* times.*' "$OUT/$mode.err" || echo 'no hook line')" >>"$OUT/$mode.result"
  cat "$OUT/$mode.result" >&2
  results+=("$(tr '\n' ' ' <"$OUT/$mode.result")")
  [[ $r == 0 ]] || { stop "$BR"; fail "${results[*]} | $(tail -c 300 "$OUT/$mode.err" | tr '\n' ' ')"; }
done
# The shortest stall detected: stalls of decreasing length, --min-idle-ms at its floor
# (2 x the bridge's 100 ms poll).
ladder=()
for burn in 0.8 0.5 0.4 0.3 0.25; do
  python3 -X perf -u -B "$GPU_TESTS_DIR/workloads/torch_starve.py" starve 6 "$burn" >"$OUT/ladder.workload" 2>&1 &
  WL=$!
  track "$WL"
  wait_for "$OUT/ladder.workload" '^READY ' 90 "$WL" || fail "ladder workload not READY"
  "$GPUSCOPE" starvation --json --pin-dir "$PIN" -p "$WL" --min-idle-ms 200 -d 6 >"$OUT/ladder_$burn.jsonl" 2>/dev/null || true
  wait_exit "$WL" 60
  tid=$(sed -n 's/^READY .*"tid": \([0-9]*\).*/\1/p' "$OUT/ladder.workload")
  stalls=$(sed -n 's/^DONE .*"stalls": \([0-9]*\).*/\1/p' "$OUT/ladder.workload")
  rows=$(grep -c "\"tid\":$tid," "$OUT/ladder_$burn.jsonl" || true)
  ladder+=("${burn}s stalls x${stalls}: ${rows} rows")
done
echo "ladder (--min-idle-ms 200): ${ladder[*]}" | tee "$OUT/ladder.result" >&2
stop "$BR"
pass "${results[*]} | ladder (--min-idle-ms 200): ${ladder[*]}"
