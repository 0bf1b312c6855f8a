#!/usr/bin/env bash
# usage: tests/gpu/experiments/agent_memory.sh [OUT_DIR]   (needs bin/gpuscope, torch, curl).
# Where the agent's memory beside a PyTorch loop goes (issue 23: 54 MB against 50 steady). One
# torch_steps loop; beside it, at once, an agent per arm (the default collectors, each collector
# alone, the default under glibc tunables), trace and kernels, each with -p on the loop. Every 5 s
# up to HOLD (default 30) each one's VmRSS; at the end each one's VmHWM, its largest mappings
# (size and resident) and, for agents, the heap gauges of /metrics. All on stdout.
cd "$(dirname "$0")/.." && G=$PWD/bin/gpuscope
O=${1:-/tmp/agent-memory}
HOLD=${HOLD:-30}
mkdir -p "$O"
LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
LIBS=()
[[ -n $LIBCUDA ]] && LIBS=(--lib "$LIBCUDA")
pids=()
# Pins on bpffs: /sys/fs/bpf where it is one, else one mounted for the run (the GPU host's sysfs
# is a container's, without /sys/fs/bpf).
BPFFS=/sys/fs/bpf
if ! mountpoint -q $BPFFS 2>/dev/null; then
  BPFFS=/run/gpuscope-gpu-bpffs
  mkdir -p $BPFFS
  mountpoint -q $BPFFS || mount -t bpf bpf $BPFFS
fi
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rmdir $BPFFS/gsmem-* 2>/dev/null' EXIT
for ((r = 0; r < 400; r++)); do touch "$O/go$r"; done
# WL: another workload that prints READY (a dry run where there is no torch).
${WL:-python3 -u -B workloads/torch_steps.py "$O/go" 400 400} >"$O/steps.out" 2>"$O/steps.err" &
W=$!
pids+=("$W")
for _ in $(seq 1200); do grep -q '^READY' "$O/steps.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^READY' "$O/steps.out" || { echo "torch_steps not READY: $(tail -c 300 "$O/steps.err")"; exit 1; }
declare -A PID
PIN=()
if (($(nproc) >= 16)); then PIN=(taskset -c 4-15); fi
arm() { # NAME ENV... -- ARGS...
  local name=$1 e=()
  shift
  while [[ $1 != -- ]]; do e+=("$1"); shift; done
  shift
  env "${e[@]}" "${PIN[@]}" "$G" "$@" >"$O/$name.out" 2>"$O/$name.err" &
  PID[$name]=$!
  pids+=($!)
}
# ag NAME [ENV...] -- [ARGS...]: an agent with a bridge of its own (NVML loaded in each, as in a
# lone agent).
ag() {
  local n=$1 e=() dir
  shift
  while [[ $1 != -- ]]; do e+=("$1"); shift; done
  shift
  dir=$BPFFS/gsmem-${n//[:+]/-}
  mkdir -p "$dir"
  arm "$n" "${e[@]}" -- agent --json --listen 127.0.0.1:0 -p $W "${LIBS[@]}" --bridge-pin-dir "$dir" "$@"
}
ag agent --
for c in kernels memleak latency ioctl gputime starvation bridge; do
  ag "agent:$c" -- --collectors $c
done
ag agent+tunables GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072 --
ag agent+arena1 GLIBC_TUNABLES=glibc.malloc.arena_max=1 --
arm trace -- trace -p $W "${LIBS[@]}"
arm kernels -- kernels -p $W "${LIBS[@]}" --interval 5
names=(agent agent:kernels agent:memleak agent:latency agent:ioctl agent:gputime agent:starvation agent:bridge agent+tunables agent+arena1 trace kernels)
for ((t = 5; t <= HOLD; t += 5)); do
  sleep 5
  line="t=${t}s"
  for n in "${names[@]}"; do
    line+=" $n=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/${PID[$n]}/status" 2>/dev/null || echo gone)"
  done
  echo "$line"
done
for n in "${names[@]}"; do
  p=${PID[$n]}
  echo "== $n: $(grep -E '^(VmRSS|VmHWM|RssAnon|RssFile|Threads)' /proc/"$p"/status 2>/dev/null | tr -s ' \t' ' ' | tr '\n' ';')"
  python3 - "$p" <<'PY'
import re, sys
rows, cur = [], None
try:
    for l in open(f"/proc/{sys.argv[1]}/smaps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)", l)
        if m:
            cur = [int(m.group(2), 16) - int(m.group(1), 16), m.group(3), m.group(4) or "[anon]", 0]
            rows.append(cur)
        elif l.startswith("Rss:"):
            cur[3] = int(l.split()[1])
except OSError as e:
    print("  ", e)
anon = [r for r in rows if r[2] == "[anon]" and r[3] > 0]
print("   [anon] mappings with pages: %d, resident %d kB" % (len(anon), sum(r[3] for r in anon)))
for r in sorted(rows, key=lambda r: -r[3])[:10]:
    print("  %7d kB of %8d kB %s %s" % (r[3], r[0] // 1024, r[1], r[2].split("/")[-1]))
PY
  if [[ $n == agent* ]]; then
    port=$(grep -o '"port":[0-9]*' "$O/$n.out" | head -1 | cut -d: -f2)
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/metrics" >"$O/$n.prom"
    echo "   /metrics: $(wc -c <"$O/$n.prom") bytes, $(grep -vc '^#' "$O/$n.prom") samples"
    grep -E '^(gpuscope_heap_bytes|gpuscope_symbol_table|gpuscope_kernel_names|gpuscope_series)' "$O/$n.prom" | sed 's/^/   /'
  fi
  grep -v '^$' "$O/$n.err" | tail -2 | cut -c1-300 | sed 's/^/   err: /'
done
