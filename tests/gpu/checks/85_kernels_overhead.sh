#!/usr/bin/env bash
# usage: 85_kernels_overhead.sh GPUSCOPE_BIN OUT_DIR
# Host-side cost of real kernel launches under `gpuscope kernels` (counting in BPF at the
# driver layer alone, one probe per launch) against a bare counting uprobe on the driver's
# launch symbols, and against today's runtime+driver counting (--count-layer both), in one run (tests/gpu/bin/kernels_overhead, built
# from bench/kernels_overhead.cpp). Two workloads: runtime launches (cudaLaunchKernel, which
# reaches cuLaunchKernel) and driver-only launches (cuLaunchKernel, as cuBLAS makes them).
# The bench's JSON also says how often each of gpuscope's BPF programs ran per launch, in a
# separate run with BPF stats on: a naming probe that fires on every launch shows there.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
need_prog launch_loop BENCH=kernels_overhead
# More rounds (GS85_ROUNDS) narrow the medians; the workload is pinned to one CPU where the host
# has several, so that a migration does not land in one mode's rounds only.
ROUNDS=${GS85_ROUNDS:-5}
PIN=()
if command -v taskset >/dev/null && (($(nproc) >= 4)); then PIN=(taskset -c $(($(nproc) - 2))); fi
summary="rounds $ROUNDS${PIN:+, workload on CPU ${PIN[2]}}; "
for mode in runtime driver; do
  arg=""
  [[ $mode == driver ]] && arg=" driver"
  timeout $((40 * ROUNDS)) "$BENCH" --json --gpuscope "$GPUSCOPE" --rounds "$ROUNDS" --workload "${PIN[*]}${PIN:+ }$PROG 1000$arg" "${PROBE_LIBS[@]}" \
    >"$OUT/overhead_$mode.json" 2>"$OUT/overhead_$mode.err" ||
    fail "kernels_overhead ($mode) failed: $(tail -c 300 "$OUT/overhead_$mode.err")"
  cat "$OUT/overhead_$mode.json" >&2
  summary+="$mode: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); n=j["ns_per_call"]; p=j.get("programs_per_call",{}); print("none %.0f bare(driver launch symbols) %.0f kernels %.0f kernels_both %.0f ns, total %.3fx, added %.3fx, added driver/both %.3fx, programs per launch: %s" % (n["none"], n["bare"], n["kernels"], n.get("kernels_both", 0), j["total_ratio"], j["added_cost_ratio"], j.get("added_cost_driver_vs_both", 0), " ".join("%s=%.2f/%.0fns" % (k, v["runs"], v["ns_per_run"]) for k, v in sorted(p.items()) if v["runs"] >= 0.01)))' "$OUT/overhead_$mode.json"); "
done
pass "$summary"
