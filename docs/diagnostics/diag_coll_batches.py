import sys, time, json
sys.path[:0] = ["workflow", "."]
import zerogate.runtime.collective_timing as ct
orig = ct.time_collective
def patched(kind, elements, world, calls, batches, device="cpu", warmup=3):
    import torch.distributed as dist
    call = ct.collective_call(kind, elements, world, device)
    for _ in range(warmup): call()
    ts=[]
    for _ in range(batches):
        dist.barrier(); t=time.perf_counter()
        for _ in range(calls): call()
        ts.append((time.perf_counter()-t)/calls)
    if dist.get_rank()==0 and elements==1<<20:
        print(kind, " ".join(f"{x*1e3:.2f}" for x in ts), flush=True)
    return min(ts)
ct.time_collective = patched
for rep in range(3):
    t=time.perf_counter(); r=ct.measure(); print("probe", rep, f"{time.perf_counter()-t:.1f}s", flush=True)
