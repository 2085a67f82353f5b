import os, sys, json, copy, statistics
from zerogate.contracts.run import DsConfig, RunSpec
run_spec = RunSpec.read("results/cpu-tiny/vm/deepspeed/run_spec.json")
ds = DsConfig.read("results/cpu-tiny/vm/deepspeed/ds_config.json")
os.environ.update(run_spec.env)
import torch
from zerogate.predict import microbench as mb
from zerogate.runtime import module_overhead as mo
from zerogate.runtime.launch import start_one_rank_world, remove_own_shm_buffers
stage = int(sys.argv[1])
raw = copy.deepcopy(ds.raw); z = raw["zero_optimization"]
if stage < 3:
    z.pop("offload_param"); z["stage"] = stage; z.pop("leaf_module", None)
    for k in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"): z.pop(k, None)
class D: pass
d = D(); d.raw = raw
config = mb.stack_config(d)
port = start_one_rank_world("gloo")
try:
    for w in (8, 32, 76, 128):
        e = mo.time_engine(config, mo.StackShape(24, w, 64), 0.75)
        g = mo.time_eager(mo.StackShape(24, w, 64), 0.5)
        print(f"z{stage} 24 x {w}x{w} ({24*w*w} el): engine {e.median*1e3:.3f} eager {g.median*1e3:.3f} diff {(e.median-g.median)*1e3:.3f} ms", flush=True)
finally:
    remove_own_shm_buffers(port)
