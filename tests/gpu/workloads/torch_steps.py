#!/usr/bin/env python3
"""Launch-bound PyTorch training steps for checks/97_agent_pytorch.sh (agent on against off).

usage: torch_steps.py GO_PREFIX ROUNDS STEPS [SECONDS]

A small MLP on a small batch, so that each step's time is the host's launch path, not the
GPU's work. Warms up, prints READY, then for each round r waits for the file GO_PREFIX<r>,
runs STEPS steps and prints `ROUND {"round": r, "step_ms": [...]}` (per-step times of
blocks of 10 steps, synchronized at each block's end). With SECONDS, a round runs blocks of 10
steps until SECONDS have passed instead (checks/82: a round that spans a whole duty period holds
exactly one recording window). TORCH_STEPS_WARM=1: unmeasured steps run while it waits.
TORCH_STEPS_CAL=1: after each block, a fixed pure-Python loop (no CUDA call, so nothing probed)
is timed too, and the ROUND line has its times in "cal_ms": how fast the CPU ran that block. Some
GPU hosts switch between two CPU speeds for seconds at a time; a step time divided by its block's
calibration compares arms across them.
"""
import json
import os
import sys
import time

import torch


def main():
    go, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    warm = os.environ.get("TORCH_STEPS_WARM") == "1"
    cal = os.environ.get("TORCH_STEPS_CAL") == "1"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def calibrate():
        t = time.perf_counter()
        acc = 0
        for i in range(8000):
            acc += i * i % 7
        return (time.perf_counter() - t) * 1000.0

    for _ in range(50):
        step()
    torch.cuda.synchronize()
    print("READY", json.dumps({"pid": os.getpid()}), flush=True)
    for r in range(rounds):
        # TORCH_STEPS_WARM=1: steps go on while waiting (their times not kept), so that the CPU
        # and GPU stay in the state of a running job, not of one idle for seconds between rounds.
        while not os.path.exists(f"{go}{r}"):
            if not warm:
                time.sleep(0.02)
                continue
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        times, cals = [], []
        start = time.perf_counter()
        while (time.perf_counter() - start < seconds) if seconds else len(times) < steps // 10:
            t = time.perf_counter()
            for _ in range(10):
                step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 100.0)  # ms per step
            if cal:
                cals.append(calibrate())
        line = {"round": r, "step_ms": times}
        if cal:
            line["cal_ms"] = cals
        print("ROUND", json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
