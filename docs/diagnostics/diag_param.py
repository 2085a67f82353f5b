import os, json, torch
os.environ["DS_ACCELERATOR"]="cpu"
torch.set_num_threads(1)
from zerogate.contracts.run import DsConfig
from zerogate.predict import microbench as mb
from zerogate.runtime import module_overhead as mo
from zerogate.runtime.launch import start_one_rank_world, remove_own_shm_buffers
raw = json.load(open("results/cpu-tiny/vm/deepspeed/ds_config.json"))
class D: pass
d = D(); d.raw = raw
config = mb.stack_config(d)
port = start_one_rank_world("gloo")
orig = mo.stack
def stack_bias(modules, width, bias):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=bias) for _ in range(modules)])
try:
    for rep in range(2):
        for modules in (4, 24):
            for bias in (False, True):
                mo.stack = lambda m, w, b=bias: stack_bias(m, w, b)
                s = mo.time_engine(config, modules, 8, 64, 0.75)
                e = mo.time_eager(modules, 8, 64, 0.4)
                print(modules, bias, f"engine {s.median*1e3:.3f} ms [{s.q1*1e3:.3f},{s.q3*1e3:.3f}]  eager {e.median*1e3:.3f}", flush=True)
finally:
    remove_own_shm_buffers(port)
