#!/usr/bin/env bash
# usage: 100_copies_torch.sh GPUSCOPE_BIN OUT_DIR
# Issue 42 item 2 on real PyTorch: workloads/torch_copies.py, attached after warm-up, moves
# 2 x 16 MiB host to device (pageable and pinned), 16 MiB device to device and 16 MiB back.
# `gpuscope copies --json -p PID` must count those bytes per direction exactly (the runtime's
# cudaMemcpyAsync, once: not again at the driver), and no failed copy.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
python3 -u "$GPU_TESTS_DIR/workloads/torch_copies.py" 4 >"$OUT/workload.out" 2>&1 &
W=$!
track "$W"
for _ in $(seq 100); do grep -q '^pid ' "$OUT/workload.out" && break; sleep 0.2; done
PID=$(awk '/^pid /{print $2}' "$OUT/workload.out")
[ -n "$PID" ] || fail "workload did not start: $(tail -c 400 "$OUT/workload.out")"
"$GPUSCOPE" copies --json --interval 0.5 -p "$PID" >"$OUT/copies.jsonl" 2>"$OUT/copies.err" &
GS=$!
track "$GS"
wait "$W" || fail "workload: $(tail -c 400 "$OUT/workload.out")"
sleep 1
stop "$GS"
res=$(python3 - "$OUT/copies.jsonl" "$OUT/workload.out" "$PID" <<'PY'
import json, sys
pid = int(sys.argv[3])
want = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]
last = {}
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    x = json.loads(l)
    if x.get("type") == "copy" and x["pid"] == pid:
        last[(x["direction"], x.get("layer", ""))] = x
got, failed, calls = {}, 0, {}
for (d, _), x in last.items():
    got[d] = got.get(d, 0) + x["bytes"]
    calls[d] = calls.get(d, 0) + x["calls"]
    failed += x["failed"]
problems = [f"{d}: {got.get(d, 0)} bytes counted, {b} moved" for d, b in want.items() if got.get(d, 0) != b]
if failed: problems.append(f"{failed} failed copies")
print(f"bytes per direction {dict(sorted(got.items()))} (calls {dict(sorted(calls.items()))}), moved {want}")
if problems: print("PROBLEMS:", "; ".join(problems)); sys.exit(1)
PY
) || fail "$res"
pass "$res"
