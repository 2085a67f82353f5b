import torch, time
torch.set_num_threads(1)
n = 8*128*1536
x = torch.randn(n, requires_grad=True)
y = torch.randn(n)
def t(f, reps=30):
    for _ in range(3):
        out = f(); out.backward(torch.ones_like(out)); x.grad=None
    s=time.perf_counter()
    for _ in range(reps):
        out = f(); out.backward(torch.ones_like(out)); x.grad=None
    return (time.perf_counter()-s)/reps*1e3
ops = {
 "mul": lambda: x*y,
 "add": lambda: x+y,
 "relu": lambda: torch.relu(x),
 "silu": lambda: torch.nn.functional.silu(x),
 "gelu_tanh": lambda: torch.nn.functional.gelu(x, approximate="tanh"),
 "gelu_erf": lambda: torch.nn.functional.gelu(x),
 "tanh": lambda: torch.tanh(x),
 "exp": lambda: torch.exp(x),
 "softmax": lambda: torch.softmax(x.view(-1,128), -1),
 "rsqrt": lambda: torch.rsqrt(x.abs()+1),
}
for k,f in ops.items():
    print(f"{k:10s} fwd+bwd {t(f):7.2f} ms  ({n/1e6:.2f} M elements)")
