import json, glob, sys
root = sys.argv[1]
pts = ["cpu-tiny"] + [f"planner-grid-{p}" for p in ["pythia70m-z3-mb4-s256-smallbuckets","opt125m-z2-mb2-s256-ckpt-smallbuckets","qwen3-z3all-mb2-s512-smallbuckets","phi3-z1off-mb4-s256-smallbuckets","gemma2-z3off-mb8-s128-ckpt-smallbuckets","olmo2-z0-mb2-s256-smallbuckets"]]
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
