#!/usr/bin/env python3
"""Known copies through PyTorch, for checks/100_copies_torch.sh.

usage: torch_copies.py [WAIT_S]

Warms CUDA up, prints `pid PID`, waits WAIT_S (default 3) for gpuscope to attach, then moves
tensors of 16 MiB: a pageable and a pinned host tensor to the device (H2D), a device-to-device
copy_ (D2D: same dtype, contiguous, so PyTorch calls cudaMemcpyAsync rather than a kernel) and
one back to the host (D2H). Prints the bytes it moved per direction as one JSON line, then
lingers 2 s.
"""
import json
import os
import sys
import time

import torch

torch.ones(8, device="cuda").sum()
torch.cuda.synchronize()
print("pid", os.getpid(), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3)
n = 1 << 22
pageable = torch.randn(n)
pinned = torch.randn(n).pin_memory()  # pinned by cudaHostAlloc, filled on the CPU: no CUDA copy
d1 = pageable.cuda()
d2 = pinned.cuda(non_blocking=True)
d3 = torch.empty_like(d1)
d3.copy_(d1)
back = d2.cpu()
torch.cuda.synchronize()
size = n * 4
print(json.dumps({"H2D": 2 * size, "D2D": size, "D2H": size}), flush=True)
time.sleep(2)
