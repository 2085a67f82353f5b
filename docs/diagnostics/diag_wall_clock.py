# DeepSpeed's own wall-clock breakdown (wall_clock_breakdown: true; engine timers fwd, bwd, bwd_inner,
# bwd_allreduce, step and the ZeRO-1/2 optimizer's optimizer_allgather, optimizer_gradients, optimizer_step) of
# the diagnostic profiles diag-qwen3-z{0,1,2}-wc (the qwen3 step-time point at ZeRO-0, 1 and 2), rank 0, median of
# steps 3-5, beside each profile's predicted terms. Run in the clone that trained them.
import re, json, statistics, sys
for st in (0, 1, 2):
    d = f"results/diag-qwen3-z{st}-wc/vm"
    rows = []
    cur = {}
    for line in open(f"{d}/logs/train.log", errors="replace"):
        if "[Rank 0] time (ms)" not in line: continue
        seg = line.split("[Rank 0] time (ms) |")[1]
        kv = dict((k.strip(), float(v)) for k, v in re.findall(r"(\w+): ([\d.]+)", seg))
        if "fwd" in kv and "fwd_microstep" not in kv:
            cur.update(kv); rows.append(cur); cur = {}
        elif "fwd_microstep" not in kv:
            cur.update(kv)
    keys = ["fwd", "bwd", "bwd_inner", "bwd_allreduce", "step", "optimizer_allgather", "optimizer_gradients", "optimizer_step"]
    steady = rows[2:5]
    med = {k: statistics.median(r.get(k, float("nan")) for r in steady) for k in keys}
    st_json = json.load(open(f"{d}/plan/plan_predicted.json"))["step_time"]
    import pandas as pd
    steps = pd.read_parquet(f"{d}/parsed/steps.parquet")
    per = steps[steps.step > 2].groupby("rank")["step_time(s)"].median().max()
    collectives = steps[steps.step > 2].groupby("rank")["collectives(s)"].median().round(3).to_dict()
    print(f"ZeRO-{st}: {len(rows)} steps; measured {per:.3f} s; predicted {st_json['low(s)']:.3f}-{st_json['high(s)']:.3f}; collectives by rank {collectives}")
    print("   DeepSpeed timers, steps 3-5 median (ms): " + ", ".join(f"{k} {med[k]:.0f}" for k in keys))
    for t in st_json["terms"]:
        print(f"      {t['name']:40s} {t['per']:10s} {t['low(s)']*1e3:7.0f}-{t['high(s)']*1e3:7.0f} ms")
