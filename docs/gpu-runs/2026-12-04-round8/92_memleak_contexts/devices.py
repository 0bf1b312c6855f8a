import ctypes, json, os, sys, time
ctypes.CDLL(None).prctl(15, b"gs_ctxtorch", 0, 0, 0)  # PR_SET_NAME: gpuscope -c picks this process
print("READY", os.getpid(), flush=True)
while not os.path.exists(sys.argv[1]): time.sleep(0.05)
import torch
def quiet(tag):
    torch.cuda.synchronize(); time.sleep(2.5)
    print("POINT", json.dumps({"tag": tag, "reserved": torch.cuda.memory_reserved(0)}), flush=True)
    time.sleep(2.5)
x = torch.zeros(1, device="cuda"); quiet("init")
a = torch.empty(300 << 20, dtype=torch.uint8, device="cuda"); quiet("300MiB")
b = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); quiet("+1GiB")
c = [torch.empty((7 + i) << 20, dtype=torch.uint8, device="cuda") for i in range(10)]; quiet("+10 small")
del b; torch.cuda.empty_cache(); quiet("-1GiB, empty_cache")
