import torch, time, sys
torch.set_num_threads(1)
def bench(fn, n):
    for _ in range(3): fn(0)
    t=time.perf_counter()
    for i in range(n): fn(i)
    return (time.perf_counter()-t)/n
for (T,I,O) in [(1024,512,2048),(1024,2048,512),(1024,512,512),(2048,384,1536),(1024,640,2048)]:
    flop=2*T*I*O
    K = max(2, int(1.5e9 // ((T*I+O*I+T*O)*4)))  # ~1.5 GB of distinct operands
    xs=[torch.randn(T,I) for _ in range(K)]; ws=[torch.randn(O,I) for _ in range(K)]
    n=max(10,int(2.0/(flop/150e9)))
    for rep in range(2):
        warm=bench(lambda i: torch.nn.functional.linear(xs[0],ws[0]), n)
        cold=bench(lambda i: torch.nn.functional.linear(xs[i%K],ws[i%K]), n)
        dys=[torch.randn(T,O) for _ in range(K)]
        wbw=bench(lambda i: dys[0].t().mm(xs[0]), n)
        cbw=bench(lambda i: dys[i%K].t().mm(xs[i%K]), n)
        del dys
        print(f"{T}x{I}x{O} K={K}: fwd warm {flop/warm/1e9:.0f} cold {flop/cold/1e9:.0f} GFLOP/s; bwd_w warm {flop/wbw/1e9:.0f} cold {flop/cbw/1e9:.0f}", flush=True)
