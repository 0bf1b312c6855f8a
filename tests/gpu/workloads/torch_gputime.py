#!/usr/bin/env python3
"""Timed PyTorch steps for the GPU-time checks (86-89).

usage: torch_gputime.py MODE STEPS      MODE: launch | gpu | train
  launch: 40 tiny elementwise ops a step (launch-bound);
  gpu:    4 bf16 matmuls of 8192^2 a step (GPU-bound);
  train:  an MLP training step (Linear-ReLU-Linear, cross-entropy, SGD).
Warms up, then runs STEPS steps, each ended by a synchronize. Prints
`RESULT {"median_ms": ..., "steps": ..., "pid": ...}`."""
import json
import os
import statistics
import sys
import time

import torch

mode, steps = sys.argv[1], int(sys.argv[2])
dev = "cuda"
if mode == "launch":
    x = torch.randn(256, device=dev)

    def step():
        global x
        for _ in range(40):
            x = x * 1.0001
elif mode == "gpu":
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def step():
        for _ in range(4):
            torch.mm(a, b)
elif mode == "train":
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xb = torch.randn(256, 512, device=dev)
    yb = torch.randint(0, 10, (256,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
else:
    sys.exit("unknown mode " + mode)

for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(steps):
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print("RESULT", json.dumps({"median_ms": statistics.median(times) * 1e3, "steps": steps, "pid": os.getpid()}),
      flush=True)
