import os, sys, copy, cProfile, pstats, io, time
sys.path[:0] = ["workflow", "."]

from zerogate.contracts.run import DsConfig, RunSpec
run_spec = RunSpec.read("results/cpu-tiny/vm/deepspeed/run_spec.json")
ds = DsConfig.read("results/cpu-tiny/vm/deepspeed/ds_config.json")
os.environ.update(run_spec.env)
import torch
torch.set_num_threads(run_spec.threads_per_rank)
from zerogate.runtime.launch import start_one_rank_world, one_rank_config
from zerogate.model.build import apply_training_features, build_model, planned_model_config
from zerogate.runtime.engines import DeepSpeedEngine
from zerogate.runtime import module_overhead as mo
from zerogate.predict import microbench as mb
variant, what = sys.argv[1], sys.argv[2]
raw = copy.deepcopy(ds.raw)
z = raw["zero_optimization"]
if variant in ("z2", "z0", "eager"):
    z.pop("offload_param"); z["stage"] = 0 if variant == "eager" else int(variant[1]); z.pop("leaf_module", None)
    for k in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"): z.pop(k, None)
start_one_rank_world(run_spec.backend)
config = one_rank_config(raw)
N = 300
if what == "model":
    mc = planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len)
    model = build_model(mc, config)
    apply_training_features(model, run_spec.training)
    if variant == "eager":
        model.train()
    else:
        eng = DeepSpeedEngine(model, config); eng.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, mc.vocab_size, (1, run_spec.seq_len), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    def step():
        if variant == "eager":
            model(**batch).loss.backward()
            for p in model.parameters(): p.grad = None
        else:
            eng.forward_backward(batch, False); eng.micro_step()
    print("params", len(list(model.parameters())), "modules", len(list(model.modules())))
else:
    class D: pass
    d = D(); d.raw = raw; d.train_micro_batch_size_per_gpu = 1; d.gradient_accumulation_steps = 8; d.stage = z["stage"]
    cfg = mb.stack_config(d)
    m, p = int(sys.argv[3]), int(sys.argv[4])
    model = mo.stack(mo.StackShape(m, 8, 64, p))
    import deepspeed
    e, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    step = mo.engine_step(e, 64, 8)
for _ in range(20): step()
t = time.perf_counter()
for _ in range(N): step()
print(variant, what, "ms/pass %.3f" % ((time.perf_counter() - t) / N * 1e3))
pr = cProfile.Profile(); pr.enable()
for _ in range(N): step()
pr.disable()
s = io.StringIO(); ps = pstats.Stats(pr, stream=s); ps.sort_stats("tottime").print_stats(45)
print(s.getvalue())
s = io.StringIO(); ps = pstats.Stats(pr, stream=s); ps.sort_stats("cumtime").print_stats(40)
print(s.getvalue())
s = io.StringIO(); ps = pstats.Stats(pr, stream=s); ps.print_callees("engine.py.*\\(backward\\)"); ps.print_callees("stage_1_and_2.py.*\\(backward\\)"); ps.print_callees("independent_gradient_partition_epilogue"); ps.print_callees("engine.py.*\\(forward\\)")
print(s.getvalue())
