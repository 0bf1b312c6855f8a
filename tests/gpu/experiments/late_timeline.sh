#!/usr/bin/env bash
# usage: tests/gpu/experiments/late_timeline.sh [OUT_DIR]   (from anywhere; needs bin/gpuscope and
# bin/libgpuscope-cupti.so, torch). A timeline attached with -p to a process that has run CUDA
# for 4 s under `gpuscope run` (nothing recording at its start): arm plain as shipped (launch
# records from CUPTI's callbacks beside its activity records), arm nocb without the callbacks
# (GPUSCOPE_CUPTI_API_CALLBACKS=0: activity records alone, the H200 gave none late), arm kinds
# with GPUSCOPE_CUPTI_API_KINDS=1 and no callbacks. Prints each summary line (flows against GPU
# spans), spans per second and the library's messages. Issue 24, item 2.
cd "$(dirname "$0")/.." && G=bin/gpuscope
O=${1:-/tmp/late}
mkdir -p "$O"
for arm in plain nocb kinds; do
  e=()
  [[ $arm == nocb ]] && e=(GPUSCOPE_CUPTI_API_CALLBACKS=0)
  [[ $arm == kinds ]] && e=(GPUSCOPE_CUPTI_API_KINDS=1 GPUSCOPE_CUPTI_API_CALLBACKS=0)
  env "${e[@]}" $G run -- python3 -u -B workloads/torch_gputime.py train 400000 >"$O/$arm.wl.out" 2>"$O/$arm.wl.err" &
  RP=$!
  for _ in $(seq 100); do lp=$(pgrep -P $RP | head -1); [[ -n $lp ]] && break; sleep 0.1; done
  for _ in $(seq 600); do grep -q libgpuscope-cupti /proc/$lp/maps 2>/dev/null && break; sleep 0.1; done
  t0=$(date +%s.%N)
  sleep 4
  $G timeline --json -v -p $lp -d 3 -o "$O/$arm.json" >"$O/$arm.jsonl" 2>"$O/$arm.err"
  echo "$arm: $(tail -n1 $O/$arm.jsonl)"
  python3 - "$O/$arm.json" <<'PY'
import json, sys, collections
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
c = collections.Counter(e.get("cat") for e in ev)
g = sorted(e["ts"] for e in ev if e.get("cat") == "gpu_kernel")
a = sorted(e["ts"] for e in ev if e.get("cat") == "cuda_api")
print("  cats", dict(c))
if a: print("  api ts %.0f..%.0f ms" % (a[0] / 1e3, a[-1] / 1e3))
if g: print("  gpu ts %.0f..%.0f ms; per second:" % (g[0] / 1e3, g[-1] / 1e3), collections.Counter(int(t / 1e6) for t in g))
PY

  kill -TERM $RP; wait $RP
  echo "  workload stderr: $(grep -i gpuscope $O/$arm.wl.err | tail -3)"
done
