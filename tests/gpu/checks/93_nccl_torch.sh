#!/usr/bin/env bash
# usage: 93_nccl_torch.sh GPUSCOPE_BIN OUT_DIR
# Issue 43 on real NCCL (PyTorch's own libnccl.so.2) through torch.distributed, NCCL backend:
# workloads/torch_nccl.py with a world of NCCL_WORLD ranks (1 on a one-GPU host), 40 steps of
# all_reduce, all_gather, broadcast and reduce_scatter. `gpuscope nccl --json` started before
# it must count every collective of every rank (calls per op equal to what each rank called),
# with bytes per call equal to the tensors' sizes (a world of one: send and receive sizes are
# the same), the communicator's id equal on every rank, its rank and nranks right.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
WORLD=${NCCL_WORLD:-1}
ITERS=40
"$GPUSCOPE" nccl --json --interval 1 -d 120 >"$OUT/nccl.jsonl" 2>"$OUT/nccl.err" &
GS=$!
track "$GS"
sleep 3
timeout 150 python3 -u "$GPU_TESTS_DIR/workloads/torch_nccl.py" "$WORLD" "$ITERS" >"$OUT/workload.out" 2>&1 ||
  fail "workload: $(tail -c 400 "$OUT/workload.out")"
sleep 2.5
stop "$GS"
res=$(python3 - "$OUT/nccl.jsonl" "$OUT/workload.out" "$WORLD" "$ITERS" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ranks = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
world, iters = int(sys.argv[3]), int(sys.argv[4])
ops = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather", "broadcast": "ncclBroadcast",
       "reduce_scatter": "ncclReduceScatter"}
problems, ids = [], set()
for r in ranks:
    mine = [x for x in rows if x["type"] == "collective" and x["pid"] == r["pid"]]
    calls, byts = collections.Counter(), collections.Counter()
    for x in mine:
        calls[x["op"]] += x["calls"]
        byts[x["op"]] += x["bytes"]
        ids.add(x["comm_id"])
        if x["rank"] != r["rank"] or x["nranks"] != world:
            problems.append(f"pid {r['pid']}: rank {x['rank']}/{x['nranks']}, not {r['rank']}/{world}")
    for k, op in ops.items():
        if calls[op] != r["calls"][k]:
            problems.append(f"rank {r['rank']} {op}: {calls[op]} calls counted, {r['calls'][k]} made")
        elif byts[op] != r["calls"][k] * r["bytes_per_call"][k]:
            problems.append(f"rank {r['rank']} {op}: {byts[op]} bytes, {r['calls'][k] * r['bytes_per_call'][k]} expected")
if len(ranks) != world: problems.append(f"{len(ranks)} ranks reported, {world} expected")
if len(ids) != 1 or "?" in ids: problems.append(f"communicator ids {sorted(ids)}")
v = ranks[0]["nccl_version"] if ranks else "?"
print(f"NCCL {v}, world {world}: per rank {iters} x 4 collectives counted with their bytes, communicator "
      f"{sorted(ids)}; profiler saw {ranks[0]['profiler_nccl_kernels'] if ranks else '?'} NCCL kernels "
      f"({ranks[0]['profiler_nccl_gpu_us'] if ranks else 0:.0f} us GPU)")
if problems: print("PROBLEMS:", "; ".join(problems[:8])); sys.exit(1)
PY
) || fail "$res"
pass "$res"
