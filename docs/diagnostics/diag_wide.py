import os, json, sys, copy, time, torch
os.environ["DS_ACCELERATOR"]="cpu"
torch.set_num_threads(1)
from zerogate.predict import microbench as mb
from zerogate.runtime import module_overhead as mo
from zerogate.runtime.launch import start_one_rank_world, remove_own_shm_buffers
raw = json.load(open("results/cpu-tiny/vm/deepspeed/ds_config.json"))
variant = sys.argv[1]
z = raw["zero_optimization"]
if variant == "z3": z.pop("offload_param"); z.pop("offload_optimizer")
if variant == "z2": z.pop("offload_param"); z.pop("offload_optimizer"); z["stage"]=2
if variant == "z0": z.pop("offload_param"); z.pop("offload_optimizer"); z["stage"]=0
class D: pass
d = D(); d.raw = raw
config = mb.stack_config(d)
port = start_one_rank_world("gloo")
try:
    for modules, width, rows in ((8, 8, 1), (8, 1024, 1)):
        t0=time.perf_counter()
        s = mo.time_engine(config, modules, width, rows, 1.0)
        t1=time.perf_counter()
        e = mo.time_eager(modules, width, rows, 0.5)
        n = modules*width*width
        print(variant, modules, width, n, f"engine {s.median*1e3:.3f} ms [{s.q1*1e3:.3f},{s.q3*1e3:.3f}]  eager {e.median*1e3:.3f}  wall {t1-t0:.1f}s", flush=True)
finally:
    remove_own_shm_buffers(port)
