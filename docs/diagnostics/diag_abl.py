import os, sys, json, copy, statistics
from zerogate.contracts.run import DsConfig, RunSpec
run_spec = RunSpec.read("results/cpu-tiny/vm/deepspeed/run_spec.json")
ds = DsConfig.read("results/cpu-tiny/vm/deepspeed/ds_config.json")
os.environ.update(run_spec.env)
import torch
from zerogate.predict import compute as C
from zerogate.predict import microbench as mb
from zerogate.runtime import module_overhead as mo
variant = sys.argv[1]
raw = copy.deepcopy(ds.raw)
z = raw["zero_optimization"]
if variant == "persist_all": z["stage3_param_persistence_threshold"] = 10**9
if variant in ("z2", "z0"):
    z.pop("offload_param"); z["stage"] = int(variant[1]); z.pop("leaf_module", None)
    for k in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"): z.pop(k, None)
class D: pass
d = D(); d.raw = raw; d.train_micro_batch_size_per_gpu = ds.train_micro_batch_size_per_gpu; d.gradient_accumulation_steps = ds.gradient_accumulation_steps; d.stage = z["stage"]
r = C.measure_forward_backward(run_spec, d, timed=40)
s = sorted(r["samples(s)"])
print(variant, "model engine pass: min %.2f q1 %.2f median %.2f ms" % (s[0]*1e3, s[len(s)//4]*1e3, statistics.median(s)*1e3), flush=True)
config = mb.stack_config(d)
if variant == "persist_all":
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 10**9
for m in (4, 24):
    t = mo.time_engine(config, mo.StackShape(m, 8, 64), 0.75)
    print(variant, f"stack {m}: {t.median*1e3:.3f} ms", flush=True)
