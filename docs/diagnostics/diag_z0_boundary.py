"""ZeRO-0's boundary work on a model's gradients, without the collective: DeepSpeed's allreduce_and_copy
(flatten, mul_ by 1/world, copy back) and clip_grad_norm_ (each gradient's .float().norm, then mul_ by the
clip coefficient), timed by two processes at once (the run's two ranks), fp32, one thread each."""
import os, sys, time, json
import torch
import torch.multiprocessing as mp

def worker(rank, cfg, out):
    torch.set_num_threads(1)
    sys.path[:0] = ["workflow", "."]
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(cfg) if os.path.isdir(cfg) else AutoConfig.for_model(**json.load(open(cfg)))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    params = [p for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    grads = [p.grad for p in params]
    numel = sum(g.numel() for g in grads)
    rows = []
    for rep in range(6):
        t = time.perf_counter()
        flat = torch.cat([g.view(-1) for g in grads])
        t1 = time.perf_counter()
        flat.mul_(0.5)
        t2 = time.perf_counter()
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g)); offset += g.numel()
        t3 = time.perf_counter()
        del flat
        norms = [g.detach().float().norm(2) for g in grads]
        total = torch.stack(norms).pow(2).sum().pow(0.5)
        coef = torch.clamp(1.0 / (total + 1e-6), max=1.0)
        t4 = time.perf_counter()
        for g in grads:
            g.mul_(coef)
        t5 = time.perf_counter()
        rows.append([t1 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4])
    json.dump({"numel": numel, "rows": rows}, open(f"{out}.{rank}", "w"))

if __name__ == "__main__":
    cfg = sys.argv[1]
    mp.spawn(worker, args=(cfg, "/tmp/z0b"), nprocs=2)
    for r in (0, 1):
        d = json.load(open(f"/tmp/z0b.{r}"))
        print("rank", r, "elements", d["numel"])
        for row in d["rows"][1:]:
            print("  flatten %.3f  mul %.3f  copy back %.3f | norms %.3f  clip mul %.3f | copies %.3f  norm+clip %.3f" % (*row, sum(row[:3]), sum(row[3:])))
