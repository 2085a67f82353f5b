"""A grid point's model, eager (no DeepSpeed), one micro-step's forward with loss and backward at the run's
micro-batch, sequence and threads, timed, and torch's profiler's self CPU time by ATen op, grouped; beside it
the point's predicted terms (plan/plan_predicted.json) per micro-step. Usage, from a clone where the point's
predict_step_time ran: PYTHONPATH=workflow:. .venv/bin/python docs/diagnostics/diag_eager_split.py <profile id>
(e.g. planner-grid-gemma2-z3off-mb8-s128-ckpt-smallbuckets, or cpu-tiny)."""

import json
import sys
import time
from collections import defaultdict

from zerogate.contracts.run import RunSpec

point = sys.argv[1]
spec = RunSpec.read(f"results/{point}/vm/deepspeed/run_spec.json")
import torch  # noqa: E402

torch.set_num_threads(spec.threads_per_rank)
from zerogate.model.build import apply_training_features, build_model, planned_model_config  # noqa: E402

config = planned_model_config(spec.model, spec.vocab_size, spec.seq_len)
model = build_model(config)
apply_training_features(model, spec.training)
model.train()
rows = spec.training.micro_batch_per_rank
ids = torch.randint(0, config.vocab_size, (rows, spec.seq_len), generator=torch.Generator().manual_seed(0))
batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def step():
    model(**batch).loss.backward()
    for p in model.parameters():
        p.grad = None


for _ in range(3):
    step()
n = 8
t = time.perf_counter()
for _ in range(n):
    step()
eager = (time.perf_counter() - t) / n
print(f"{point}: threads {spec.threads_per_rank}, eager micro-step {eager:.4f} s")

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        step()
groups = defaultdict(float)
by_op = defaultdict(float)
for e in prof.key_averages():
    s = e.self_cpu_time_total / 1e6 / 3
    name = e.key
    by_op[name] += s
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul"):
        groups["products (mm/addmm/bmm)"] += s
    elif "attention" in name or "sdpa" in name or "flash" in name:
        groups["attention kernels"] += s
    else:
        groups["the rest"] += s
for k, v in sorted(groups.items(), key=lambda kv: -kv[1]):
    print(f"  {k:28s} {v:.4f} s")
print("  top ops:")
for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:25]:
    print(f"    {k:40s} {v:.4f} s")

plan = json.load(open(f"results/{point}/vm/plan/plan_predicted.json"))
g = plan["step_time"]["accumulation"]
print(f"predicted terms per micro-step (the optimizer step's / G={g}):")
for term in plan["step_time"]["terms"]:
    lo, hi = term["low(s)"], term["high(s)"]
    if lo is None:
        print(f"  {term['name']:50s} missing")
        continue
    print(f"  {term['name']:50s} {lo / g:.4f} to {hi / g:.4f} s  ({term['kind']}, per {term.get('per', '?')})")
