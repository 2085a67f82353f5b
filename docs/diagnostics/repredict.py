"""A finished grid's points predicted again by the current ledger from their own files (plan, run spec, DeepSpeed
config, probe, micro-benchmarks), beside what the clone predicted then: a post-hoc reading of a change, never
a check. Run from the repository with PYTHONPATH=workflow:. ; argument: the grid's clone."""
import json, sys, glob, os
from zerogate.config.machines import target_machine
from zerogate.contracts.microbench import Microbench
from zerogate.contracts.plan import Plan
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.predict.microbench_rates import rates_from_microbench
from zerogate.predict.planner import with_measured_compute

root = sys.argv[1]
for d in sorted(glob.glob(f"{root}/results/*/vm")):
    p = f"{d}/plan"
    if not os.path.exists(f"{p}/plan_predicted.json"):
        continue
    machine, _ = target_machine(None, f"{d}/probe/hardware.json", "vm")
    new = with_measured_compute(Plan.read(f"{p}/plan.json"), RunSpec.read(f"{d}/deepspeed/run_spec.json"),
                                DsConfig.read(f"{d}/deepspeed/ds_config.json"), machine, None,
                                rates_from_microbench(Microbench.read(f"{p}/microbench.json"), f"{p}/microbench.json"))
    old = Plan.read(f"{p}/plan_predicted.json")
    o, n = old.step_time, new.step_time
    def terms(st):
        return {t.name: (t.low_s, t.high_s) for t in st.terms}
    ot, nt = terms(o), terms(n)
    name = d.split("/")[-2].replace("planner-grid-", "").replace("-smallbuckets", "")
    print(f"{name:34s} old {o.low_s:.3f}-{o.high_s:.3f}  new {n.low_s:.3f}-{n.high_s:.3f}")
    for k in nt:
        if ot.get(k) != nt[k] and nt[k][0] is not None:
            a = ot.get(k)
            print(f"    {k:45s} {a[0]:.4f}-{a[1]:.4f} -> {nt[k][0]:.4f}-{nt[k][1]:.4f}")
