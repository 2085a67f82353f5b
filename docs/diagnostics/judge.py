import json, sys
import pandas as pd
from zerogate.analysis.measures import step_time, timed_steps
root = sys.argv[1]
from pathlib import Path
from zerogate.config.profile import load_profile_chain, resolve_profile
from zerogate.config.settings import profile_settings


def warmup_of(point):
    """training.warmup_steps_excluded of the profile the clone ran: cpu-tiny, or a grid point's written file."""
    written = Path(f"{root}/results/bench/vm/bench/planner_grid/profiles/{point}.yaml")
    name = str(written) if written.is_file() else point
    chain = load_profile_chain(Path(root) / "config/profiles", name, "judge.py", "profile")
    return profile_settings(resolve_profile(chain)).training.warmup_steps_excluded


# The default and every grid point whose profile the clone wrote (both grids), in name order.
import glob, os
pts = ["cpu-tiny"] + sorted(os.path.basename(f)[:-5] for f in glob.glob(f"{root}/results/bench/vm/bench/planner_grid/profiles/*.yaml"))
rows, split = [], []
for p in pts:
    d = json.load(open(f"{root}/results/{p}/vm/plan/plan_predicted.json"))["step_time"]
    steps = pd.read_parquet(f"{root}/results/{p}/vm/parsed/steps.parquet")
    # The profile's own warm-up (training.warmup_steps_excluded, read from its resolved settings). The earlier
    # measure, every judgement before planner-grid-steady: the median of steps 1-3, none excluded.
    warm = warmup_of(p)
    m = step_time(steps, warm).value
    first3 = step_time(steps[steps["step"] <= 3], 0).value if p != "cpu-tiny" else float("nan")
    lo, hi = d["low(s)"], d["high(s)"]; mid = (lo + hi) / 2
    inside = "yes" if lo <= m <= hi else ("no, above" if m > hi else "no, below")
    err = (mid - m) / m
    ok = "yes" if inside == "yes" and abs(err) <= 0.2 else "NO"
    b = pd.read_csv(f"{root}/results/{p}/vm/benchmarks/train.tsv", sep="\t")
    cores = b["cpu_time"].iloc[0] / b["s"].iloc[0]
    name = "default (cpu-tiny)" if p == "cpu-tiny" else p.replace("planner-grid-", "")
    inside3 = "yes" if lo <= first3 <= hi else ("no, above" if first3 > hi else "no, below")
    ok3 = "yes" if inside3 == "yes" and abs((mid - first3) / first3) <= 0.2 else "NO"
    rows.append(f"| `{name}` | {lo:.4g} | {hi:.4g} | {mid:.4g} | {m:.4g} | {inside} | {err*100:+.0f} % | {ok} | {first3:.4g} | {inside3} | {(mid-first3)/first3*100:+.0f} % | {ok3} | {cores:.2f} |")
    # split: collectives measured vs predicted
    t = timed_steps(steps, warm)
    col = [c for c in t.columns if c.startswith("collectives(s)")]
    calls = [c for c in t.columns if "collective_calls" in c or c.startswith("collective_calls")]
    slow = t.groupby("rank")["step_time(s)"].median().idxmax() if "step_time(s)" in t.columns else None
    r = t[t["rank"] == slow] if slow is not None else t
    cm = r[col[0]].median() if col else float("nan")
    terms = d["terms"]
    cl = sum(x["low(s)"] for x in terms if x["kind"] == "collective" and x["low(s)"] is not None)
    ch = sum(x["high(s)"] for x in terms if x["kind"] == "collective" and x["high(s)"] is not None)
    split.append(f"| `{name}` | {m:.4g} | {cm:.3g} | {cl:.3g}-{ch:.3g} | {m-cm:.4g} | {lo-cl:.4g}-{hi-ch:.4g} |")
print("\n".join(rows)); print(); print("\n".join(split))
