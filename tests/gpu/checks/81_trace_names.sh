#!/usr/bin/env bash
# usage: 81_trace_names.sh GPUSCOPE_BIN OUT_DIR
# trace names every launch that kernels names (issue 24, item 1): a PyTorch training loop
# (workloads/torch_train.py, warmed up first, so every handle was handed out before gpuscope
# started), `trace --layer driver` and `kernels` attached side by side. Every cuLaunchKernel[Ex]
# entry in trace must carry a `kernel` field, and every kernel name kernels reports for the
# process must appear in trace. cuBLASLt's GEMMs (cuLaunchKernelEx) are the ones that came
# unnamed: the model's first launch is one, before anything taught the driver's object layout.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
export GPUSCOPE
D=${WORK:-/tmp/gpuscope-81}
rm -rf "$D"
mkdir -p "$D"
libcuda_libs
python3 -u -B "$GPU_TESTS_DIR/workloads/torch_train.py" running "$D/go" "$D" >"$D/workload.out" 2>"$D/workload.err" &
WL=$!
track "$WL"
wait_for "$D/workload.out" '^READY ' 120 "$WL" || fail "workload not READY: $(tail -c 600 "$D/workload.err" | tr '\n' ' ')"
start_tracer "$D/trace" -v --layer driver -p "$WL" "${LIBS[@]}" -d 150
start_kernels "$D/kernels" -v --json --interval 0.25 -p "$WL" "${LIBS[@]}" -d 150
touch "$D/go"
wait_exit "$WL" 120
[[ $WAIT_RC == 0 ]] || fail "workload exited with $WAIT_RC: $(tail -c 600 "$D/workload.err" | tr '\n' ' ')"
wait_stop "$TRACER_PID" "$KP"
grep -v '^libbpf' "$D/trace.err" | grep -E 'kernels:|events' >"$OUT/trace_notes.txt" || true
python3 -B - "$D/trace.jsonl" "$D/kernels.jsonl" "$WL" >"$OUT/result.txt" <<'PY' || true
import collections, json, sys
tr, kn, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
launches = collections.Counter()
unnamed = collections.Counter()
first_unnamed = []
names = set()
order = 0
for line in open(tr):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("pid") != pid or e.get("phase") != "enter" or e.get("api") not in ("cuLaunchKernel", "cuLaunchKernelEx"):
        continue
    order += 1
    launches[e["api"]] += 1
    if "kernel" in e:
        names.add(e["kernel"])
    else:
        unnamed[e["api"]] += 1
        if len(first_unnamed) < 5:
            first_unnamed.append((order, e["api"], e.get("func")))
k_names = set()
for line in open(kn):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("type") == "kernel" and e.get("pid") == pid and not e["kernel"].startswith("["):
        k_names.add(e["kernel"])
missing = sorted(k_names - names)
ok = sum(unnamed.values()) == 0 and not missing and sum(launches.values()) > 0
print("%s trace launches %s, unnamed %s (first: %s); kernels names %d, trace names %d, named by kernels but not by trace %d%s" % (
    "PASS" if ok else "FAIL", dict(launches), dict(unnamed), first_unnamed, len(k_names), len(names), len(missing),
    (": " + "; ".join(m[:120] for m in missing[:5])) if missing else ""))
PY
cat "$OUT/trace_notes.txt" >&2
r=$(cat "$OUT/result.txt")
[[ $r == PASS* ]] && pass "${r#PASS }"
fail "${r#FAIL }"
