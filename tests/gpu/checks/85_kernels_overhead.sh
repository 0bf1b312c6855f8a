#!/usr/bin/env bash
# usage: 85_kernels_overhead.sh GPUSCOPE_BIN OUT_DIR
# Host-side cost of real kernel launches under `gpuscope kernels` (counting in BPF) against
# bare counting uprobes on the same sites, in one run (tests/gpu/bin/kernels_overhead, built
# from bench/kernels_overhead.cpp). Two workloads: runtime launches (cudaLaunchKernel, which
# reaches cuLaunchKernel) and driver-only launches (cuLaunchKernel, as cuBLAS makes them).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
GPUSCOPE=$1
OUT=$2
PROG=$GPU_TESTS_DIR/bin/launch_loop
BENCH=$GPU_TESTS_DIR/bin/kernels_overhead
mkdir -p "$OUT"
[[ -x $PROG ]] || skip "launch_loop missing ($PROG)"
[[ -x $BENCH ]] || skip "kernels_overhead missing ($BENCH)"
probe_libs_for "$PROG" "$OUT/ldd.txt"
summary=""
for mode in runtime driver; do
  arg=""
  [[ $mode == driver ]] && arg=" driver"
  timeout 200 "$BENCH" --json --gpuscope "$GPUSCOPE" --rounds 5 --workload "$PROG 1000$arg" "${PROBE_LIBS[@]}" \
    >"$OUT/overhead_$mode.json" 2>"$OUT/overhead_$mode.err" ||
    fail "kernels_overhead ($mode) failed: $(tail -c 300 "$OUT/overhead_$mode.err")"
  cat "$OUT/overhead_$mode.json" >&2
  summary+="$mode: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); n=j["ns_per_call"]; print("none %.0f bare %.0f kernels %.0f ns, total %.3fx, added %.3fx" % (n["none"], n["bare"], n["kernels"], j["total_ratio"], j["added_cost_ratio"]))' "$OUT/overhead_$mode.json"); "
done
pass "$summary"
