# The operator chain's cost per op and per byte at tensors of 1.5 MiB to 204 MiB (2 and 6 links), one thread.
import torch, time, sys
sys.path.insert(0,"workflow")
from zerogate.runtime.operator_dispatch import chain_step
torch.set_num_threads(1)
def t(links, numel, n):
    f = chain_step(links, numel)
    f(); f()
    s=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-s)/n
for numel in [393216, 1572864, 4*2**20, 16*2**20, 51*2**20]:
    n = max(2, int(2e8/numel))
    a, b = t(2, numel, n), t(6, numel, n)
    per_op = (b-a)/(4*2)
    print(f"{numel:>10d} el ({numel*4/2**20:.1f} MiB): per op {per_op*1e3:.3f} ms, per byte {per_op/(numel*4*2)*1e9:.4f} ns (2 tensors read+write per op)", flush=True)
