#!/usr/bin/env bash
# usage: text_pages.sh GPUSCOPE_BIN KERNELS_OVERHEAD
# Whether attaching probes changes how the CUDA libraries' code is mapped in a PyTorch process.
# A uprobe writes its breakpoint into a private copy of the page in each traced process; where
# the library's code was mapped with huge pages (FilePmdMapped), that mapping is split, and every
# launch may then take iTLB misses that a probe on fewer pages does not. For each executable
# mapping of libcuda, libcudart, libtorch_cuda and cuBLAS in workloads/torch_steps.py: size,
# resident, FilePmdMapped and Anonymous (the private copies), with no gpuscope, with the floor
# (kernels_overhead --hold: the launch symbols alone), and with the agent's default collectors.
set -uo pipefail
G=$1
FLOOR=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $G && -x $FLOOR ]] || {
  echo "usage: text_pages.sh GPUSCOPE_BIN KERNELS_OVERHEAD" >&2
  exit 2
}
echo "thp enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo ?)"
echo "thp defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null || echo ?)"
D=$(mktemp -d)
TORCH_STEPS_WARM=1 python3 -u -B "$HERE/workloads/torch_steps.py" "$D/go" 1 100 >"$D/steps.out" 2>"$D/steps.err" &
W=$!
trap 'kill -INT ${F:-} ${A:-} 2>/dev/null; kill $W 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 240); do grep -q READY "$D/steps.out" && break; sleep 0.5; done
grep -q READY "$D/steps.out" || {
  echo "torch_steps not READY: $(tail -c 300 "$D/steps.err")"
  exit 1
}
LIBCUDA=$(awk '/libcuda\.so/ {print $6; exit}' "/proc/$W/maps")
echo "libcuda: $LIBCUDA on $(stat -f -c %T "$LIBCUDA")"
pages() {
  python3 - "$W" "$1" <<'PY'
import re, sys
pid, label = sys.argv[1], sys.argv[2]
want = re.compile(r"lib(cuda|cudart|torch_cuda|cublas|cublasLt)\.so")
rows, cur = {}, None
for line in open(f"/proc/{pid}/smaps"):
    f = line.split()
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        path = f[5] if len(f) > 5 else ""
        cur = None
        if "x" in f[1] and want.search(path):
            cur = rows.setdefault(path.rsplit("/", 1)[-1], {"maps": 0})
            cur["maps"] += 1
    elif cur is not None and f[0].rstrip(":") in ("Size", "Rss", "FilePmdMapped", "Anonymous", "Private_Dirty"):
        k = f[0].rstrip(":")
        cur[k] = cur.get(k, 0) + int(f[1])
for name, r in sorted(rows.items()):
    print(f"{label:6s} {name:28s} x-maps {r['maps']:2d}  size {r.get('Size', 0):7d} kB  rss {r.get('Rss', 0):7d} kB"
          f"  FilePmdMapped {r.get('FilePmdMapped', 0):6d} kB  Anonymous {r.get('Anonymous', 0):4d} kB")
PY
}
pages none
"$FLOOR" --hold --floor-attach perf --lib "$LIBCUDA" >"$D/floor.out" 2>&1 &
F=$!
for _ in $(seq 120); do grep -q 'floor attached' "$D/floor.out" && break; sleep 0.5; done
grep -q 'floor attached' "$D/floor.out" || {
  echo "the floor did not attach: $(tail -c 300 "$D/floor.out")"
  exit 1
}
sleep 2
pages floor
kill -INT $F
wait $F 2>/dev/null
sleep 1
pages after
"$G" agent -p "$W" --listen 127.0.0.1:0 --json >"$D/agent.out" 2>"$D/agent.err" &
A=$!
sleep 8
kill -0 "$A" 2>/dev/null || {
  echo "the agent did not stay up: $(tail -c 300 "$D/agent.err")"
  exit 1
}
pages agent
echo "agent: $(head -c 400 "$D/agent.out")"
kill -INT $A
wait $A 2>/dev/null
sleep 1
pages after
