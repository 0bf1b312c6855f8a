#!/usr/bin/env bash
# usage: 86_gputime_spin.sh GPUSCOPE_BIN OUT_DIR
# Exact GPU time through libgpuscope-cupti.so (bin/libgpuscope-cupti.so beside bin/gpuscope):
# bin/spin_kernels (workloads/spin_kernels.cu) spins on %globaltimer for 50, 200, 1000 and
# 5000 us, 20 launches each, after 20 launches of spin<0> (no spin). A kernel's known time is
# its spin plus the GPU's fixed cost of running any kernel, which every CUPTI span includes:
# the mean of spin<0> in the same run (about 0.5 us on the H200, 1% of 50 us, so it is not
# left out). Every kernel span of `gpuscope timeline` and the mean and max of `gpuscope
# kernels` must be within 1% of the known time, and kernels' GPU-record count must equal the
# launches it counted. The raw error (against the spin alone) is reported too.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
PROG=$GPU_TESTS_DIR/bin/spin_kernels
[[ -x $PROG ]] || skip "spin_kernels missing ($PROG)"
[[ -f $(dirname "$GPUSCOPE")/libgpuscope-cupti.so ]] || skip "libgpuscope-cupti.so not beside $GPUSCOPE"
probe_libs_for "$PROG" "$OUT/ldd.txt"
"$GPUSCOPE" kernels --json --interval 1 -c spin_kernels -d 100 >"$OUT/kernels.jsonl" 2>"$OUT/kernels.err" &
KP=$!
track "$KP"
"$GPUSCOPE" timeline --json -c spin_kernels -d 100 -o "$OUT/spin.json" >"$OUT/timeline.jsonl" 2>"$OUT/timeline.err" &
TP=$!
track "$TP"
wait_for "$OUT/kernels.err" 'counting launches' 60 "$KP" || fail "kernels did not start: $(tail -c 300 "$OUT/kernels.err")"
wait_for "$OUT/timeline.err" 'recording a timeline' 60 "$TP" || fail "timeline did not start: $(tail -c 300 "$OUT/timeline.err")"
"$GPUSCOPE" run --always -- "$PROG" >"$OUT/spin.out" 2>"$OUT/spin.err" || fail "spin_kernels failed: $(tail -c 300 "$OUT/spin.err")"
sleep 1.5
stop "$KP" 30
stop "$TP" 60
python3 - "$OUT/kernels.jsonl" "$OUT/spin.json" >"$OUT/result.txt" <<'PY' || fail "$(cat "$OUT/result.txt")"
import json, re, sys
want = {50: 50e3, 200: 200e3, 1000: 1000e3, 5000: 5000e3}
errs, figs = [], []
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("type") == "kernel" and "spin<" in j["kernel"]:
        rows[j["kernel"]] = j  # the last print wins
z = [j for k, j in rows.items() if re.search(r"spin<0u?>", k)]
if not z or "gpu_time_ns" not in z[0] or z[0]["gpu_kernels"] != 20:
    print("kernels: no GPU time for 20 launches of spin<0>"); sys.exit(1)
fixed = z[0]["gpu_mean_ns"]
figs.append("fixed cost (spin<0>): mean %.0f ns, max %.0f ns" % (fixed, z[0]["gpu_max_ns"]))
raw = {us: ns for us, ns in want.items()}
want = {us: ns + fixed for us, ns in want.items()}
for us, ns in want.items():
    r = [j for k, j in rows.items() if re.search(r"spin<%du?>" % us, k)]
    if not r or "gpu_time_ns" not in r[0]:
        errs.append("kernels: no GPU time for spin<%d>" % us); continue
    j = r[0]
    mean, mx = j["gpu_mean_ns"], j["gpu_max_ns"]
    figs.append("%dus: mean %.1f max %.1f us (%+.2f%%, raw %+.2f%%), %d records / %d launches" % (
        us, mean / 1e3, mx / 1e3, 100 * (mean - ns) / ns, 100 * (mean - raw[us]) / raw[us], j["gpu_kernels"], j["launches"]))
    if abs(mean - ns) > 0.01 * ns or abs(mx - ns) > 0.01 * ns:
        errs.append("spin<%d>: mean %.0f max %.0f ns, not within 1%%" % (us, mean, mx))
    if j["gpu_kernels"] != j["launches"] or j["launches"] != 20:
        errs.append("spin<%d>: %d records, %d launches, 20 made" % (us, j["gpu_kernels"], j["launches"]))
doc = json.load(open(sys.argv[2]))
spans = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_kernel"]
for us, ns in want.items():
    d = [e["dur"] * 1e3 for e in spans if re.search(r"spin<%du?>" % us, e["name"])]
    bad = [x for x in d if abs(x - ns) > 0.01 * ns]
    if len(d) != 20 or bad:
        errs.append("timeline spin<%d>: %d spans, %d outside 1%% (%s)" % (us, len(d), len(bad), bad[:3]))
    elif d:
        figs.append("timeline %dus: %.1f..%.1f us" % (us, min(d) / 1e3, max(d) / 1e3))
print(("; ".join(errs) + " | " if errs else "") + "; ".join(figs))
sys.exit(1 if errs else 0)
PY
pass "$(cat "$OUT/result.txt")"
