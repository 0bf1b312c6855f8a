# Real NCCL through torch.distributed (NCCL backend) for checks/93_nccl_torch.sh: a world of
# WORLD ranks on this host (one process per rank, one GPU each, or all on GPU 0 when there is
# one), ITERS steps of all_reduce, all_gather_into_tensor, broadcast and reduce_scatter_tensor
# on float32 tensors of known sizes. Rank SLOW_RANK sleeps SLOW_MS before each step's
# collectives (the straggler). Each rank prints one JSON line with what it called and what
# torch.profiler saw of NCCL's kernels (their count and GPU time), after a "READY pid" line.
# usage: torch_nccl.py WORLD ITERS [SLOW_RANK SLOW_MS]
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ELEMS = {"all_reduce": 1 << 20, "all_gather": 1 << 18, "broadcast": 1 << 16, "reduce_scatter": 1 << 18}


def rank_main(rank, world, iters, slow_rank, slow_ms, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = rank % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", dev))
    print(f"READY {os.getpid()} rank {rank}", flush=True)
    time.sleep(2)  # the tracer attaches to the library this process maps
    ar = torch.ones(ELEMS["all_reduce"], device="cuda")
    ag_in = torch.ones(ELEMS["all_gather"], device="cuda")
    ag_out = torch.empty(ELEMS["all_gather"] * world, device="cuda")
    bc = torch.ones(ELEMS["broadcast"], device="cuda")
    rs_in = torch.ones(ELEMS["reduce_scatter"] * world, device="cuda")
    rs_out = torch.empty(ELEMS["reduce_scatter"], device="cuda")
    calls = {k: 0 for k in ELEMS}
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(iters):
            if rank == slow_rank and slow_ms > 0:
                time.sleep(slow_ms / 1000)
            dist.all_reduce(ar)
            dist.all_gather_into_tensor(ag_out, ag_in)
            dist.broadcast(bc, src=0)
            dist.reduce_scatter_tensor(rs_out, rs_in)
            for k in calls:
                calls[k] += 1
        torch.cuda.synchronize()
    nccl = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "nccl" in e.name.lower()]
    out = {
        "pid": os.getpid(),
        "rank": rank,
        "world": world,
        "device": dev,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
        "calls": calls,
        "bytes_per_call": {k: v * 4 for k, v in ELEMS.items()},
        "profiler_nccl_kernels": len(nccl),
        "profiler_nccl_gpu_us": sum(e.device_time for e in nccl),
    }
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world, iters = int(sys.argv[1]), int(sys.argv[2])
    slow_rank = int(sys.argv[3]) if len(sys.argv) > 3 else -1
    slow_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 0
    port = 29500 + os.getpid() % 1000
    mp.spawn(rank_main, args=(world, iters, slow_rank, slow_ms, port), nprocs=world)
