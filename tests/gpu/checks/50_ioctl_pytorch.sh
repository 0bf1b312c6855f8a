#!/usr/bin/env bash
# usage: 50_ioctl_pytorch.sh GPUSCOPE_BIN OUT_DIR
# /dev/nvidia* ioctls during PyTorch start-up and a few training steps: counts per escape code.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
"$GPUSCOPE" ioctl --json -d 120 >"$OUT/ioctl.jsonl" 2>"$OUT/ioctl.err" &
IO=$!
track "$IO"
sleep 3
alive "$IO" || fail "gpuscope ioctl exited early: $(tail -c 300 "$OUT/ioctl.err")"
timeout 120 python3 "$GPU_TESTS_DIR/workloads/torch_small.py" >"$OUT/workload.out" 2>&1 ||
  fail "workload failed: $(tail -c 300 "$OUT/workload.out")"
term_wait "$IO"
PID=$(awk '/^pid/ {print $2}' "$OUT/workload.out")
python3 - "$OUT/ioctl.jsonl" "$PID" <<'PY'
import json, sys, collections
pid = int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
io = [r for r in rows if r.get("type") == "ioctl" and r["pid"] == pid]
mm = [r for r in rows if r.get("type") == "mmap" and r["pid"] == pid]
by = collections.Counter()
for r in io: by[(r["device"], r["name"])] += r["count"]
total = sum(by.values())
top = ", ".join(f"{n}@{d}:{c}" for (d, n), c in by.most_common(8))
errs = sum(r["errors"] for r in io)
named = sum(r["count"] for r in io if r["name"])
ok = total > 0
print(("PASS" if ok else "FAIL") + f" 50_ioctl_pytorch: pid {pid}: {total} ioctls ({errs} errors) on {len(set(r['dev'] for r in io))} devices, "
      f"{sum(r['count'] for r in mm)} mmaps; {named}/{total} named; top: {top}")
sys.exit(0 if ok else 1)
PY
