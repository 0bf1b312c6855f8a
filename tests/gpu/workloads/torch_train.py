#!/usr/bin/env python3
"""PyTorch training loop for checks/80_kernels_pytorch.sh.

usage: torch_train.py MODE GO_FILE OUT_DIR      MODE: before | running

- before:  prints READY before its first CUDA call, so that `gpuscope kernels` attaches
           before cuBLAS, the allocator or any kernel handle exists;
- running: warms up first (CUDA context, cuBLAS, every kernel of the loop, the CUDA graph),
           then prints READY, so that gpuscope attaches to a process already running.

Then it waits for GO_FILE, warms up (mode before), and runs the measured window inside one
torch.profiler session (CUDA activity): STEPS training steps (MLP, AdamW foreach, MSE) and
REPLAYS replays of a captured CUDA graph. Around the window it synchronizes and stays quiet
for QUIET_S, stamping CLOCK_REALTIME at both ends (t0, t1), so that gpuscope's cumulative
counts read during the quiet periods bound exactly the window's launches.
Prints `RESULT {json}`: stamps, the kernels of one graph replay (profiled alone), and the
profiler's kernels by name in the window (those CUPTI marks as graph kernels apart).
"""
import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

STEPS, REPLAYS, QUIET_S = 20, 10, 1.5


def now():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


def emit(tag, obj):
    print(tag, json.dumps(obj, sort_keys=True), flush=True)


def kernels_of(prof, path):
    """Kernel events of the kineto trace: name -> count, split by whether CUPTI says the
    kernel ran inside a graph."""
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f).get("traceEvents", [])
    plain, graph = {}, {}
    for e in events:
        if e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        in_graph = any("graph" in k.lower() and v not in (0, -1, None, "") for k, v in args.items())
        d = graph if in_graph else plain
        d[e["name"]] = d.get(e["name"], 0) + 1
    return plain, graph


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512),
                                torch.nn.LayerNorm(512)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randn(256, 512, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    static = torch.randn(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.relu(static * 2 + 1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gout = torch.relu(static * 2 + 1)
    graph.replay()
    torch.cuda.synchronize()
    return step, graph, gout


def warm(step, graph, out_dir):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    # CUPTI's first session costs launches of its own; take it here, with one graph replay
    # on its own to learn the nodes per replay.
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    plain, g = kernels_of(prof, os.path.join(out_dir, "replay_profile.json"))
    for k, v in g.items():
        plain[k] = plain.get(k, 0) + v
    return plain


def main():
    mode, go, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode not in ("before", "running"):
        sys.exit("MODE must be before or running")
    replay = None
    if mode == "running":
        step, graph, _ = build()
        replay = warm(step, graph, out_dir)
    emit("READY", {"pid": os.getpid(), "mode": mode, "torch": torch.__version__})
    while not os.path.exists(go):
        time.sleep(0.05)
    if mode == "before":
        step, graph, _ = build()
        replay = warm(step, graph, out_dir)

    torch.cuda.synchronize()
    time.sleep(QUIET_S)
    t0 = now()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    t1 = now()
    time.sleep(QUIET_S)
    plain, g = kernels_of(prof, os.path.join(out_dir, "window_profile.json"))
    emit("RESULT", {"t0_ns": t0, "t1_ns": t1, "quiet_s": QUIET_S, "steps": STEPS, "replays": REPLAYS,
                    "graph_nodes": sum(replay.values()),
                    "graph_kernel_names": replay, "profiler_plain": plain, "profiler_graph": g})


if __name__ == "__main__":
    main()
