#!/usr/bin/env python3
"""PyTorch workload for checks/10_trace_pytorch.sh.

usage: torch_mix.py GO_FILE OUT_DIR

1. Warm-up, before anything is traced: CUDA context, lazy module loading, cuBLAS, the
   elementwise kernels, CUPTI (short profiler sessions that also count the kernels of
   one matmul, one `x*2+1` and one eager run of the graph's ops).
2. Prints `READY {json}` (pid, CUDA libraries mapped) and waits until GO_FILE exists,
   so that the tracer attaches first.
3. Captures the CUDA graph (3 elementwise kernels), traced but OUTSIDE the measured
   window, replays it once (upload) and profiles one more replay on its own.
4. The measured window, inside exactly one torch.profiler session (CUDA activity only),
   in four phases: 50 matmuls 1024x1024, 50 `x*2+1`, 10 fresh tensors of distinct sizes
   (>= 32 MiB, so each needs a new cudaMalloc), 20 graph replays. Before, between and
   after the phases: synchronize and a CLOCK_REALTIME stamp taken 100 ms away from any
   CUDA call, so that clock skew between this process and the tracer cannot move a call
   across a stamp. The first and last stamps (t0, t1) bound the window.
5. Prints `RESULT {json}`: the stamps, the profiler's kernel count, graph nodes, replays,
   and per phase the kernels expected from the step-1/3 per-op profiles.
"""
import json
import os
import signal
import sys
import time

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

MATMULS, ELEMENTWISE, ALLOCS, REPLAYS = 50, 50, 10, 20
MARGIN_S = 0.1


def now():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


def emit(tag, obj):
    print(tag, json.dumps(obj, sort_keys=True), flush=True)


def count_kernels(prof, trace_path):
    """Kernels the profiler saw, from the kineto trace (cat == "kernel"), which keeps
    memcpy/memset apart; prof.events() (device_type CUDA minus Memcpy/Memset) is the
    cross-check. Also counts the CUDA runtime/driver calls CUPTI recorded."""
    try:
        by_events = sum(1 for e in prof.events()
                        if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")))
    except Exception as exc:
        by_events = None
        print("prof.events() failed: %r" % (exc,), file=sys.stderr)
    out = {"by_events": by_events, "by_trace": None, "graph_kernels": None, "runtime": {}, "driver": {}}
    try:
        prof.export_chrome_trace(trace_path)
        with open(trace_path) as f:
            events = json.load(f).get("traceEvents", [])
    except Exception as exc:  # keep going with the prof.events() count
        out["trace_error"] = repr(exc)
        return by_events, out
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    out["by_trace"] = len(kernels)
    out["graph_kernels"] = sum(1 for e in kernels
                               if any("graph" in k.lower() and v not in (0, -1, None, "")
                                      for k, v in (e.get("args") or {}).items()))
    for cat in ("runtime", "driver"):
        for e in events:
            if e.get("cat") == "cuda_" + cat and e.get("ph") == "X":
                out[cat][e["name"]] = out[cat].get(e["name"], 0) + 1
    return len(kernels), out


def profiled(fn, trace_path):
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return count_kernels(prof, trace_path)


def mapped_cuda_libs():
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "x" in parts[1]:
                path = parts[5].strip()
                base = os.path.basename(path)
                if base.startswith(("libcudart.so", "libcuda.so")) and path not in libs:
                    libs.append(path)
    return libs


def main():
    go_file, out_dir = sys.argv[1], sys.argv[2]
    signal.alarm(180)  # watchdog: SIGALRM ends the process if anything hangs
    if not torch.cuda.is_available():
        emit("ERROR", {"error": "torch.cuda.is_available() is False"})
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device=dev)
    b = torch.randn(1024, 1024, device=dev)
    x = torch.randn(1 << 20, device=dev)
    g_in = torch.randn(1 << 16, device=dev)

    def graph_ops(t):  # 3 kernels: mul, add, relu
        return torch.relu(t * 3.0 + t)

    # 1. warm-up (untraced)
    for _ in range(3):
        a @ b
        x * 2 + 1
        graph_ops(g_in)
    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph's docs ask
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            graph_ops(g_in)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    per_op = {}
    per_op["matmul"], _ = profiled(lambda: a @ b, os.path.join(out_dir, "prof_matmul.json"))
    per_op["x*2+1"], _ = profiled(lambda: x * 2 + 1, os.path.join(out_dir, "prof_elementwise.json"))
    graph_nodes, _ = profiled(lambda: graph_ops(g_in), os.path.join(out_dir, "prof_graph_ops_eager.json"))

    # 2. hand over to the tracer
    emit("READY", {"pid": os.getpid(), "libs": mapped_cuda_libs(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)})
    deadline = time.monotonic() + 120
    while not os.path.exists(go_file):
        if time.monotonic() > deadline:
            emit("ERROR", {"error": "no go file within 120 s: " + go_file})
            return 3
        time.sleep(0.01)

    # 3. graph capture (traced, before the measured window)
    capture_t0 = now()
    time.sleep(MARGIN_S)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = graph_ops(g_in)
    torch.cuda.synchronize()
    time.sleep(MARGIN_S)
    capture_t1 = now()
    g.replay()
    torch.cuda.synchronize()
    replay_kernels, replay_info = profiled(g.replay, os.path.join(out_dir, "prof_one_replay.json"))

    # 4. the measured window: one profiler session; a boundary (sync, stamp 100 ms away
    # from any CUDA call) before, between and after the phases
    def boundary():
        torch.cuda.synchronize()
        time.sleep(MARGIN_S)
        stamp = now()
        time.sleep(MARGIN_S)
        return stamp

    keep = []
    p0 = now()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marks = [boundary()]
        for _ in range(MATMULS):
            c = a @ b
        marks.append(boundary())
        for _ in range(ELEMENTWISE):
            e = x * 2 + 1
        marks.append(boundary())
        for i in range(ALLOCS):
            keep.append(torch.empty(((32 + 4 * i) << 20) + 512 * i, dtype=torch.uint8, device=dev))
        marks.append(boundary())
        for _ in range(REPLAYS):
            g.replay()
        marks.append(boundary())
    p1 = now()
    kernels, info = count_kernels(prof, os.path.join(out_dir, "prof_window.json"))
    del c, e, keep, static_out

    # 5. results
    emit("RESULT", {
        "t0": marks[0], "t1": marks[-1], "profile_t0": p0, "profile_t1": p1,
        "phases": ["matmul", "elementwise", "alloc", "graph_replay"], "marks": marks,
        "phase_kernels_from_per_op": [MATMULS * per_op["matmul"], ELEMENTWISE * per_op["x*2+1"], 0,
                                      REPLAYS * replay_kernels],
        "capture_t0": capture_t0, "capture_t1": capture_t1,
        "prof_kernels": kernels, "prof_info": info,
        "graph_nodes": graph_nodes, "graph_replays": REPLAYS,
        "one_replay_kernels": replay_kernels, "one_replay_info": replay_info,
        "per_op_kernels": per_op,
        "expected_from_ops": MATMULS * per_op["matmul"] + ELEMENTWISE * per_op["x*2+1"] + REPLAYS * replay_kernels,
        "steps": {"matmuls": MATMULS, "elementwise": ELEMENTWISE, "allocs": ALLOCS, "replays": REPLAYS},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
