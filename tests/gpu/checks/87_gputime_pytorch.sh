#!/usr/bin/env bash
# usage: 87_gputime_pytorch.sh GPUSCOPE_BIN OUT_DIR
# A PyTorch training loop (workloads/torch_gputime.py train) under libgpuscope-cupti.so, with
# `gpuscope kernels` attached before it starts. The library's own records (its
# GPUSCOPE_CUPTI_SUMMARY file: count and GPU ns per kernel name) against gpuscope's: per-kernel
# GPU time within 1%, the same number of kernel records, and records == launches counted.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
[[ -f $(dirname "$GPUSCOPE")/libgpuscope-cupti.so ]] || skip "libgpuscope-cupti.so not beside $GPUSCOPE"
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || skip "no torch with CUDA"
"$GPUSCOPE" kernels --json --interval 1 -c python3 -d 200 >"$OUT/kernels.jsonl" 2>"$OUT/kernels.err" &
KP=$!
track "$KP"
wait_for "$OUT/kernels.err" 'counting launches' 60 "$KP" || fail "kernels did not start: $(tail -c 300 "$OUT/kernels.err")"
rm -f "$OUT/lib_summary.tsv"
GPUSCOPE_CUPTI_SUMMARY=$OUT/lib_summary.tsv "$GPUSCOPE" run --always -- \
  python3 -u -B "$GPU_TESTS_DIR/workloads/torch_gputime.py" train 200 >"$OUT/workload.out" 2>"$OUT/workload.err" ||
  fail "workload failed: $(tail -c 300 "$OUT/workload.err")"
sleep 2
stop "$KP" 30
python3 - "$OUT/kernels.jsonl" "$OUT/lib_summary.tsv" "$OUT/workload.out" >"$OUT/result.txt" <<'PY' || fail "$(cat "$OUT/result.txt")"
import json, sys
pid = json.loads(open(sys.argv[3]).read().split("RESULT", 1)[1])["pid"]
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("type") == "kernel" and j["pid"] == pid:
        rows[j["kernel"]] = j
lib = {}
for line in open(sys.argv[2]):
    n, ns, name = line.rstrip("\n").split("\t", 2)
    lib[name] = (int(n), int(ns))
g_count = sum(j.get("gpu_kernels", 0) for j in rows.values())
g_ns = sum(j.get("gpu_time_ns", 0) for j in rows.values())
launches = sum(j["launches"] for j in rows.values())
l_count = sum(c for c, _ in lib.values())
l_ns = sum(t for _, t in lib.values())
errs = []
if g_count != l_count:
    errs.append("records: gpuscope %d, library %d" % (g_count, l_count))
if abs(g_ns - l_ns) > 0.01 * l_ns:
    errs.append("GPU time: gpuscope %d ns, library %d ns" % (g_ns, l_ns))
if launches != g_count:
    errs.append("launches counted %d != kernel records %d" % (launches, g_count))
matched = 0
for name, (c, t) in lib.items():
    j = rows.get(name)
    if j is None or "gpu_time_ns" not in j:
        continue
    matched += 1
    if j["gpu_kernels"] != c or abs(j["gpu_time_ns"] - t) > 0.01 * t:
        errs.append("%s: gpuscope %d/%d ns, library %d/%d ns" % (name[:60], j["gpu_kernels"], j["gpu_time_ns"], c, t))
print(("; ".join(errs[:5]) + " | " if errs else "") +
      "records %d (library %d), launches %d, GPU %.3f ms (library %.3f), %d of %d names compared one by one" %
      (g_count, l_count, launches, g_ns / 1e6, l_ns / 1e6, matched, len(lib)))
sys.exit(1 if errs else 0)
PY
pass "$(cat "$OUT/result.txt")"
