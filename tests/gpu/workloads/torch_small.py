#!/usr/bin/env python3
"""A few training steps of a small MLP on the GPU, for checks/50_ioctl_pytorch.sh and
checks/99_agent_inside.sh.

usage: torch_small.py [COMM [BURN_S]]

Prints `pid PID`, runs 20 steps, synchronizes, then with BURN_S burns CPU in a thread for that
many seconds while the GPU sits idle, and prints `done`. COMM names the process (PR_SET_NAME)
before torch starts its threads, which inherit the name.
"""
import ctypes
import os
import sys
import threading
import time

if len(sys.argv) > 1:
    ctypes.CDLL(None).prctl(15, os.fsencode(sys.argv[1]), 0, 0, 0)  # PR_SET_NAME, any bytes
import torch  # noqa: E402

print("pid", os.getpid(), flush=True)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    x = torch.randn(256, 512, device="cuda"); y = torch.randint(0, 10, (256,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
torch.cuda.synchronize()


def burn(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1


if len(sys.argv) > 2:
    t = threading.Thread(target=burn, args=(float(sys.argv[2]),)); t.start(); t.join()
print("done", flush=True)
