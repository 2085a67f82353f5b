import torch, time, sys
torch.set_num_threads(1)
a = torch.randn(512, 1024); b = torch.randn(1024, 2048)
x = torch.randn(16*1024*1024)
def rate(f, secs=4.0):
    f(); n=0; t0=time.perf_counter()
    while time.perf_counter()-t0 < secs: f(); n+=1
    return n/(time.perf_counter()-t0)
r = rate(lambda: a @ b)
r2 = rate(lambda: x * 1.0001)
print(sys.argv[1], f"matmul {r*2*512*1024*2048/1e9:.1f} GFLOP/s   mul64MB {r2*16*1024*1024*8/1e9:.2f} GB/s", flush=True)
