# A vocabulary-wide head's three products (Pythia-70M's, 1024 tokens), one thread: the whole product, on 77 rows (the
# old row cut), and on 3814 of its 50304 columns (a slice cut along its largest dimension). No zerogate code.
import torch, time
torch.set_num_threads(1)
def rate(m,n,k,kind):
    # forward: x (m x k) @ W^T (k x n) with W n x k
    if kind=="forward":
        x=torch.randn(m,k); w=torch.randn(n,k); f=lambda: torch.nn.functional.linear(x,w)
    elif kind=="backward_weight":
        dy=torch.randn(k,m); x=torch.randn(k,n); f=lambda: dy.t().mm(x)
    else:
        dy=torch.randn(m,k); w=torch.randn(k,n); f=lambda: dy.mm(w)
    f(); f()
    n_=3; t=time.perf_counter()
    for _ in range(n_): f()
    s=(time.perf_counter()-t)/n_
    return 2*m*n*k/s/1e9
T,H,V=1024,512,50304
print("fwd full", rate(T,V,H,"forward"))
print("fwd 77 rows", rate(77,V,H,"forward"))
print("fwd 3814 cols", rate(T,3814,H,"forward"))
# backward_weight: (V x T) @ (T x H): m=V n=H k=T
print("bw full", rate(V,H,T,"backward_weight"))
print("bw 77 rows(k)", rate(V,H,77,"backward_weight"))
print("bw 3814 (m)", rate(3814,H,T,"backward_weight"))
# backward_input: (T x V) @ (V x H): m=T n=H k=V
print("bi full", rate(T,H,V,"backward_input"))
print("bi 77 rows", rate(77,H,V,"backward_input"))
print("bi 3814 k", rate(T,H,3814,"backward_input"))
