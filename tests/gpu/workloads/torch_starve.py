#!/usr/bin/env python3
"""PyTorch workload for checks/95_starvation_pytorch.sh. Run with `python3 -X perf`.

usage: torch_starve.py MODE SECONDS [BURN_S]      MODE: starve | busy

Holds GPU memory, then for SECONDS:
- starve: a step of GPU work (matmuls, synchronized), then waits for a thread named
  `preprocess` that burns CPU in preprocess_burn() for BURN_S. The GPU sits idle while that
  thread runs: the stall `gpuscope starvation` must name.
- busy: the same preprocessing runs on its own thread all the time, off the critical path,
  while the main thread keeps the GPU busy with asynchronous launches (synchronizing only
  every few hundred), so the GPU never idles and there is nothing to report.
Prints `READY {json}` (pid, tid of the preprocess thread) and `DONE {json}` (stalls made).
"""
import ctypes
import json
import os
import sys
import threading
import time

import torch

BURN_S = 1.6
libc = ctypes.CDLL(None, use_errno=True)


def name_thread(name):
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: the thread's comm


def preprocess_burn(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(2000):
            x += i * i % 7
    return x


info = {}


def worker(seconds, ready):
    name_thread("preprocess")
    info["tid"] = threading.get_native_id()
    ready.set()
    preprocess_burn(seconds)


def stall_worker(go, done, ready):
    """One long-lived thread (one TID): burns BURN_S each time it is asked to."""
    name_thread("preprocess")
    info["tid"] = threading.get_native_id()
    ready.set()
    while True:
        go.wait()
        go.clear()
        preprocess_burn(BURN_S)
        done.set()


def main():
    global BURN_S
    mode, secs = sys.argv[1], float(sys.argv[2])
    if len(sys.argv) > 3:
        BURN_S = float(sys.argv[3])
    hold = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    end = time.time() + secs
    stalls = 0
    if mode == "busy":
        ready = threading.Event()
        t = threading.Thread(target=worker, args=(secs + 2, ready), daemon=True)
        t.start()
        ready.wait()
        print("READY", json.dumps({"pid": os.getpid(), "tid": info["tid"], "mode": mode}), flush=True)
        n = 0
        while time.time() < end:
            a @ a
            n += 1
            if n % 200 == 0:
                torch.cuda.synchronize()
    else:
        go, done, ready = threading.Event(), threading.Event(), threading.Event()
        threading.Thread(target=stall_worker, args=(go, done, ready), daemon=True).start()
        ready.wait()
        print("READY", json.dumps({"pid": os.getpid(), "tid": info["tid"], "mode": mode}), flush=True)
        while time.time() < end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
            done.clear()
            go.set()
            done.wait()
            stalls += 1
    torch.cuda.synchronize()
    print("DONE", json.dumps({"stalls": stalls, "held_bytes": hold.numel()}), flush=True)


if __name__ == "__main__":
    main()
