import os, sys, json, copy, statistics
from zerogate.contracts.run import DsConfig, RunSpec
run_spec = RunSpec.read("results/cpu-tiny/vm/deepspeed/run_spec.json")
ds = DsConfig.read("results/cpu-tiny/vm/deepspeed/ds_config.json")
os.environ.update(run_spec.env)
import torch
from zerogate.predict import compute as C
variant = sys.argv[1]
raw = copy.deepcopy(ds.raw)
z = raw["zero_optimization"]
if variant == "noleaf": z.pop("leaf_module")
if variant == "nopersist": z["stage3_param_persistence_threshold"] = 0
if variant == "nooffload": z.pop("offload_param")
class D: pass
d = D(); d.raw = raw; d.train_micro_batch_size_per_gpu = ds.train_micro_batch_size_per_gpu; d.gradient_accumulation_steps = ds.gradient_accumulation_steps; d.stage = 3
r = C.measure_forward_backward(run_spec, d, timed=40)
s = sorted(r["samples(s)"])
print(variant, "min %.2f q1 %.2f median %.2f ms" % (s[0]*1e3, s[len(s)//4]*1e3, statistics.median(s)*1e3), flush=True)
