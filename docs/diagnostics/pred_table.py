import json, glob, sys
root = sys.argv[1]
# The default and every grid point whose profile the clone wrote (both grids), in name order.
import os
pts = ["cpu-tiny"] + sorted(os.path.basename(f)[:-5] for f in glob.glob(f"{root}/results/bench/vm/bench/planner_grid/profiles/*.yaml"))
for p in pts:
    d = json.load(open(f"{root}/results/{p}/vm/plan/plan_predicted.json"))
    st = d["step_time"]; terms = {t["name"]: t for t in st["terms"]}
    mb = json.load(open(f"{root}/results/{p}/vm/plan/microbench.json"))
    fwd = [r for r in mb["matmuls"] if r["kind"] == "forward"]
    flop = sum(r["count"] * r["flop_per_call(flop)"] for r in fwd); secs = sum(r["count"] * r["seconds_per_call(s)"] for r in fwd)
    disp = terms.get("operator dispatch and engine hooks"); ops = terms.get("functional operators")
    name = "default (cpu-tiny)" if p == "cpu-tiny" else p.replace("planner-grid-", "")
    lo, hi = st["low(s)"], st["high(s)"]
    print(f"| `{name}` | {d['scheme']} | {st['accumulation']} | {lo:.4g} | {hi:.4g} | {(lo+hi)/2:.4g} | {st['deciding_term']} | {ops['low(s)']:.3g} to {ops['high(s)']:.3g} | {disp['low(s)']:.3g} to {disp['high(s)']:.3g} | {flop/secs/1e9:.0f} | {mb['cpu_share']} |  missing: {st['missing']}")
