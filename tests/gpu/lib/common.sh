# shellcheck shell=bash disable=SC2034  # WAIT_RC, TRACER_PID, PROBE_LIBS, ... are for the caller
# Shared helpers for the GPU-host checks; sourced by checks/*.sh (which set -euo pipefail) with
# the check's arguments, GPUSCOPE_BIN OUT_DIR: GPUSCOPE is the binary, OUT the folder for the
# check's raw outputs (made here).
# A check prints one last line on stdout: "PASS name: figures", "FAIL name: reason" or
# "SKIP name: reason", and exits 0, 1 or 77. Progress goes to stderr.

GPU_TESTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK_NAME=${CHECK_NAME:-$(basename "$0" .sh)}
GPUSCOPE=$1
OUT=$2
mkdir -p "$OUT"
_GS_PIDS=()

log() { echo "[$CHECK_NAME $(date +%T)] $*" >&2; }
pass() { echo "PASS $CHECK_NAME: $*"; exit 0; }
fail() { echo "FAIL $CHECK_NAME: $*"; exit 1; }
skip() { echo "SKIP $CHECK_NAME: $*"; exit 77; }

# Remember a background process so that the EXIT trap ends it.
track() { _GS_PIDS+=("$1"); }

alive() { kill -0 "$1" 2>/dev/null; }

# stop PID [SECONDS]: SIGTERM (gpuscope ends cleanly on it; a background python ignores
# SIGINT), then SIGKILL after SECONDS (default 10); reaps it.
stop() {
  local pid=$1 t=${2:-10} i
  alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < t * 10; i++)); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then log "pid $pid ignored SIGTERM for ${t}s; killing it"; kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

_cleanup() {
  local p
  for p in "${_GS_PIDS[@]}"; do stop "$p" 3; done
}
trap _cleanup EXIT
trap 'exit 143' TERM INT HUP

# wait_for FILE REGEX SECONDS [PID]: until FILE has a line matching REGEX (grep -E).
# Fails early when PID (the writer) has exited without writing it.
wait_for() {
  local file=$1 re=$2 t=$3 pid=${4:-} i
  for ((i = 0; i < t * 10; i++)); do
    grep -qE -- "$re" "$file" 2>/dev/null && return 0
    if [[ -n $pid ]] && ! alive "$pid"; then
      grep -qE -- "$re" "$file" 2>/dev/null && return 0
      return 1
    fi
    sleep 0.1
  done
  return 1
}

# wait_exit PID SECONDS: waits for a tracked background PID; sets WAIT_RC (124 on timeout).
wait_exit() {
  local pid=$1 t=$2 i
  WAIT_RC=124
  for ((i = 0; i < t * 10; i++)); do alive "$pid" || break; sleep 0.1; done
  alive "$pid" && return 0
  WAIT_RC=0
  wait "$pid" || WAIT_RC=$?
}

# term_wait PID: SIGTERM (gpuscope prints its last rows and exits), then wait_exit PID 30.
term_wait() {
  kill -TERM "$1"
  wait_exit "$1" 30
}

# wait_stop PID...: waits up to 30 s for each PID to exit (a gpuscope with -p ends when its
# process has, after its final rows), then stops those left (5 s).
wait_stop() {
  local p
  for p in "$@"; do wait_exit "$p" 30; done
  for p in "$@"; do stop "$p" 5; done
}

# start_kernels PREFIX ARGS...: "$GPUSCOPE kernels ARGS" in the background, stdout to
# PREFIX.jsonl, stderr to PREFIX.err; waits until it is counting. Sets KP.
start_kernels() {
  local prefix=$1
  shift
  "$GPUSCOPE" kernels "$@" >"$prefix.jsonl" 2>"$prefix.err" &
  KP=$!
  track "$KP"
  wait_for "$prefix.err" 'counting launches' 60 "$KP" || fail "kernels did not start: $(tail -c 400 "$prefix.err")"
}

# start_tracer OUT_PREFIX ARGS...: "$GPUSCOPE trace --json ARGS" in the background,
# stdout to OUT_PREFIX.jsonl, stderr to OUT_PREFIX.err; waits until it says "tracing".
# Sets TRACER_PID.
start_tracer() {
  local prefix=$1
  shift
  log "gpuscope trace --json $*"
  "$GPUSCOPE" trace --json "$@" >"$prefix.jsonl" 2>"$prefix.err" &
  TRACER_PID=$!
  track "$TRACER_PID"
  if ! wait_for "$prefix.err" 'tracing' 60 "$TRACER_PID"; then
    local how="did not say 'tracing' within 60 s"
    alive "$TRACER_PID" || { wait "$TRACER_PID" && how="exited" || how="exited with $?"; }
    fail "tracer $how: $(tail -c 400 "$prefix.err" | tr '\n' ' ')"
  fi
  grep -m1 'tracing' "$prefix.err" >&2
}

# stop_tracer OUT_PREFIX: ends TRACER_PID and checks that it printed its summary line.
# The summary comes within a poll round of SIGTERM; detaching the uprobes afterwards can
# take ~0.1 s per probe (seen on a 6.18 VM), hence the long wait for the exit itself.
stop_tracer() {
  local i
  if alive "$TRACER_PID"; then
    kill -TERM "$TRACER_PID" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
      grep -q '"type":"summary"' "$1.jsonl" 2>/dev/null && break
      alive "$TRACER_PID" || break
      sleep 0.1
    done
  fi
  stop "$TRACER_PID" 60
  grep -q '"type":"summary"' "$1.jsonl" || fail "tracer printed no summary: $(tail -c 400 "$1.err" | tr '\n' ' ')"
}

# The driver's libcuda.so.1 from the ld cache (x86-64 entry), empty if none.
ld_cache_libcuda() {
  { ldconfig -p 2>/dev/null || true; } | awk '$1 == "libcuda.so.1" && /x86-64/ && !n++ { print $NF }'
}

# libcuda_libs: LIBCUDA (ld_cache_libcuda) and LIBS, "--lib LIBCUDA" where there is one.
libcuda_libs() {
  LIBCUDA=$(ld_cache_libcuda)
  LIBS=()
  if [[ -n $LIBCUDA && -f $LIBCUDA ]]; then LIBS+=(--lib "$LIBCUDA"); fi
}

# need_prog NAME [VAR=BIN...]: PROG=tests/gpu/bin/NAME and each VAR=tests/gpu/bin/BIN, or SKIP for
# the first one missing; then probe_libs_for PROG (OUT/ldd.txt).
need_prog() {
  local a bin
  PROG=$GPU_TESTS_DIR/bin/$1
  [[ -x $PROG ]] || skip "$1 missing ($PROG)"
  for a in "${@:2}"; do
    bin=$GPU_TESTS_DIR/bin/${a#*=}
    [[ -x $bin ]] || skip "${a#*=} missing ($bin)"
    printf -v "${a%%=*}" '%s' "$bin"
  done
  probe_libs_for "$PROG" "$OUT/ldd.txt"
}

# Directories of the CUDA libraries shipped in the Python wheels (nvidia/*/lib, torch/lib).
wheel_lib_dirs() {
  timeout 60 python3 - <<'PY' 2>/dev/null || true
import glob, os
roots = []
try:
    import nvidia
    roots += [p for p in getattr(nvidia, "__path__", [])]
except Exception:
    pass
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib"))):
        print(d)
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        print(os.path.join(os.path.dirname(spec.origin), "lib"))
except Exception:
    pass
PY
}

# probe_libs_for PROG LDD_OUT: makes PROG's libcudart resolvable and sets PROBE_LIBS to
# --lib options for it and for libcuda.so.1, so that probes are in before PROG starts.
# The host has no CUDA toolkit: when libcudart is not in the ld cache, the copies in
# tests/gpu/bin or in the Python wheels (torch's nvidia/cu13/lib) are put on
# LD_LIBRARY_PATH. A runtime linked into PROG is found by the tracer's process scan.
probe_libs_for() {
  local prog=$1 out=$2 d dirs cudart libcuda lp
  ldd "$prog" >"$out" 2>&1 || true
  if grep -q 'libcudart.*not found' "$out"; then
    dirs=$GPU_TESTS_DIR/bin
    while IFS= read -r d; do dirs+=:$d; done < <(wheel_lib_dirs)
    export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log "libcudart not in the ld cache; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$prog" >"$out" 2>&1 || true
  fi
  if grep -q 'libcudart.*not found' "$out"; then
    fail "libcudart not found for $prog: $(tr '\n' ' ' <"$out")"
  fi
  PROBE_LIBS=()
  cudart=$(awk '/libcudart/ && $2 == "=>" && !n++ { print $3 }' "$out")
  if [[ -n $cudart && -f $cudart ]]; then PROBE_LIBS+=(--lib "$cudart"); fi
  libcuda=$(ld_cache_libcuda)
  if [[ -n $libcuda && -f $libcuda ]]; then PROBE_LIBS+=(--lib "$libcuda"); fi
  IFS=: read -ra lp <<<"${LD_LIBRARY_PATH:-}"
  for d in "${lp[@]}"; do
    if [[ -n $d && -f $d/libcuda.so.1 ]]; then PROBE_LIBS+=(--lib "$d/libcuda.so.1"); fi
  done
  return 0
}

# bpffs_dir: prints a bpffs directory for pins. /sys/fs/bpf when it is one (mounted here if the
# directory exists); else a bpffs mounted at /run/gpuscope-gpu-bpffs (the GPU host has no
# /sys/fs/bpf at all: its sysfs is a container's).
bpffs_dir() {
  if [[ -d /sys/fs/bpf ]]; then
    mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
    if mountpoint -q /sys/fs/bpf; then echo /sys/fs/bpf; return; fi
  fi
  local d=/run/gpuscope-gpu-bpffs
  mkdir -p "$d"
  mountpoint -q "$d" || mount -t bpf bpf "$d" || return 1
  echo "$d"
}

# start_bridge: `gpuscope bridge` on the real NVML, polling every 100 ms for up to 200 s, its pins
# in PIN, a fresh folder on bpffs removed at exit, its stderr in OUT/bridge.err. Sets BR.
start_bridge() {
  BPFFS=$(bpffs_dir) || fail "no bpffs could be mounted"
  PIN=$BPFFS/gs$$
  mkdir -p "$PIN"
  trap '_cleanup; rm -rf "$PIN"' EXIT
  "$GPUSCOPE" bridge --pin-dir "$PIN" --poll-interval-ms 100 -d 200 >/dev/null 2>"$OUT/bridge.err" &
  BR=$!
  track "$BR"
  sleep 3
  alive "$BR" || fail "bridge exited: $(tail -c 300 "$OUT/bridge.err")"
}

# start_steps GO ROUNDS [WRAP...]: workloads/torch_steps.py in the background (under WRAP),
# ROUNDS rounds of 400 steps, round R once the file GO<R> exists, its output in D/steps.out and
# D/steps.err; waits until it is READY. Sets SW.
start_steps() {
  local go=$1 rounds=$2
  shift 2
  "$@" python3 -u -B "$GPU_TESTS_DIR/workloads/torch_steps.py" "$go" "$rounds" 400 >"$D/steps.out" 2>"$D/steps.err" &
  SW=$!
  track "$SW"
  wait_for "$D/steps.out" '^READY ' 120 "$SW" || fail "torch_steps not READY: $(tail -c 600 "$D/steps.err" | tr '\n' ' ')"
}

# run_round GO R: runs round R of start_steps' workload and waits for its ROUND line.
run_round() {
  touch "$1$2"
  wait_for "$D/steps.out" "^ROUND \\{\"round\": $2," 120 "$SW" || fail "round $2 did not finish"
}
