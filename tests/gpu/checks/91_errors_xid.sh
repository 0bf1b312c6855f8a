#!/usr/bin/env bash
# usage: 91_errors_xid.sh GPUSCOPE_BIN OUT_DIR
# Issue 44 on the real driver: bin/oob_app (workloads/oob_app.cu) launches fill_ok three times,
# synchronizes, then launches oob_write, which writes 1 TiB past its allocation. The driver logs
# an Xid for that process (31 on an H100) and the synchronization after it returns the sticky
# cudaErrorIllegalAddress. `gpuscope errors --json` (kernel log from now on, real NVML) must
# give both records naming the process, joined to each other, the sticky one naming oob_write
# as the last kernel launched since the last successful synchronization, the second of them
# printed within 2 s of the fault; and the GPU must be fine afterwards (a new CUDA context
# computes; nothing was reset).
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
PROG=$GPU_TESTS_DIR/bin/oob_app
[[ -x $PROG ]] || skip "oob_app missing (build: nvcc -O2 -cudart shared -gencode arch=compute_90,code=[sm_90,compute_90] -o tests/gpu/bin/oob_app tests/gpu/workloads/oob_app.cu)"
[[ -r /dev/kmsg ]] || skip "/dev/kmsg not readable here"

# Each line of gpuscope's output with the realtime it arrived at, to time the join.
"$GPUSCOPE" errors --json -c oob_app -d 40 2>"$OUT/errors.err" |
  python3 -u -c 'import sys, time
for l in sys.stdin: print(time.time_ns(), l, end="", flush=True)' >"$OUT/errors.timed" &
ER=$!
track "$ER"
for ((i = 0; i < 100; i++)); do grep -q "gpuscope: " "$OUT/errors.err" 2>/dev/null && break; sleep 0.1; done
sleep 2
"$PROG" 2 5 >"$OUT/oob.out" 2>&1 || fail "oob_app: $(tail -c 300 "$OUT/oob.out")"
sleep 2
pkill -INT -f "gpuscope errors --json -c oob_app" || true
wait "$ER" || true
cp "$OUT/errors.err" "$OUT/errors.stderr.txt"
# The GPU serves a new context after the fault.
after=$(timeout 60 python3 -c 'import torch; print(torch.ones(1000, device="cuda").sum().item())' 2>&1 | tail -1)
nvidia-smi --query-gpu=name,pstate,ecc.errors.uncorrected.volatile.total --format=csv,noheader >"$OUT/nvidia-smi.after" 2>&1 || true

res=$(python3 - "$OUT/errors.timed" "$OUT/oob.out" "$after" <<'PY'
import json, sys
lines = []
for raw in open(sys.argv[1]):
    t, _, l = raw.partition(" ")
    if l.startswith("{"):
        lines.append((int(t), json.loads(l)))
oob = open(sys.argv[2]).read().split("\n")
pid = int(next(l.split()[1] for l in oob if l.startswith("pid ")))
fault = int(next(l.split()[1] for l in oob if l.startswith("fault_seen_realtime_ns ")))
mine = [(t, r) for t, r in lines if r.get("pid") == pid]
cuda = [(t, r) for t, r in mine if r["type"] == "cuda_error"]
xids = [(t, r) for t, r in mine if r["type"] == "xid"]
problems = []
if len(cuda) != 1: problems.append(f"{len(cuda)} cuda_error records for pid {pid}")
if not xids: problems.append(f"no xid record for pid {pid}")
if problems:
    print("; ".join(problems), "| records:", [r["type"] for _, r in lines]); sys.exit(1)
tc, c = cuda[0]
tx, x = xids[0]
if c["code"] != 700 or c["code_name"] != "cudaErrorIllegalAddress": problems.append(f"code {c['code']} {c['code_name']}")
if not c["kernels"] or not c["kernels"][0]["kernel"].startswith("oob_write"): problems.append(f"kernels {c['kernels']}")
if c.get("joined") != x["id"] or x.get("joined") != c["id"]: problems.append(f"not joined: cuda {c.get('joined')} xid {x.get('joined')}")
if c["comm"] != "oob_app" or x["comm"] != "oob_app": problems.append(f"comm {c['comm']} / {x['comm']}")
second = max(tc, tx)
lag_s = (second - fault) / 1e9
if lag_s > 2: problems.append(f"joined {lag_s:.2f} s after the fault")
if sys.argv[3].strip() != "1000.0": problems.append(f"GPU after the fault: {sys.argv[3]!r}")
names = [k["kernel"] for k in c["kernels"]]
print(f"Xid {x['xid']} ({x['class']}, {x['action']}) on gpu {x['gpu']} {x['uuid']} {x['pci_bus_id']} and "
      f"{c['code_name']} at {c['api']}, pid {pid}, joined; kernels since the last good sync: {names}; "
      f"both out {lag_s:.2f} s after the fault; GPU after: {sys.argv[3].strip()}")
if problems: print("PROBLEMS:", "; ".join(problems)); sys.exit(1)
PY
) || fail "$res"
pass "$res"
