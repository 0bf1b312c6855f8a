#!/usr/bin/env python3
"""Launch-bound PyTorch training steps for checks/97_agent_pytorch.sh (agent on against off).

usage: torch_steps.py GO_PREFIX ROUNDS STEPS

A small MLP on a small batch, so that each step's time is the host's launch path, not the
GPU's work. Warms up, prints READY, then for each round r waits for the file GO_PREFIX<r>,
runs STEPS steps and prints `ROUND {"round": r, "step_ms": [...]}` (per-step times of
blocks of 10 steps, synchronized at each block's end).
"""
import json
import os
import sys
import time

import torch


def main():
    go, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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

    for _ in range(50):
        step()
    torch.cuda.synchronize()
    print("READY", json.dumps({"pid": os.getpid()}), flush=True)
    for r in range(rounds):
        while not os.path.exists(f"{go}{r}"):
            time.sleep(0.02)
        times = []
        for _ in range(steps // 10):
            t = time.perf_counter()
            for _ in range(10):
                step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 100.0)  # ms per step
        print("ROUND", json.dumps({"round": r, "step_ms": times}), flush=True)


if __name__ == "__main__":
    main()
