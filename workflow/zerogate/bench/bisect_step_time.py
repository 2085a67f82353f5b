"""The default run's step time at several git commits, interleaved, with intervals: a bisect's measurement.

    python -m zerogate.bench.bisect_step_time --runs 2 --out results/bisect A_SHA B_SHA [...]

Each commit is checked out in its own worktree (``/tmp/bisect-<sha>``, made with ``git worktree add`` when
absent) and trains the ``bench`` profile's run (the default profile in 60 optimizer steps, no checkpoints;
written into the worktree as ``config/profiles/bisect.yaml``, since older commits lack ``bench``) through
its own Snakefile, up to ``train/summary.json``. The commits take turns (A B C, then C B A, ...), so a
change in the machine's load falls on all of them alike; another invocation adds runs to those kept. What is
held constant: this interpreter's environment (its
packages, and DeepSpeed's CPU ops prebuilt in its ``torch_extensions``), so only zerogate's code differs.

Each run's step records are copied to ``<out>/<sha>/run<k>/`` and read back as a steps table (the timing
columns only: records of older pipelines hold other fields too); the figures are today's definitions
(zerogate.analysis.measures): each run's slowest-rank median optimizer step with its interval, the runs
of a commit pooled (zerogate.analysis.intervals.pool, the two-stage interval), and each commit's ratio to
the first commit with the ratio's interval. Printed, and written to ``<out>/bisect.json``. Not a test: a
measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from zerogate.analysis.bootstrap import timing_replicates
from zerogate.analysis.columns import LOSS_SCALE, MICRO_STEP_TIME, SKIP_REASON, STEP_TIME, TOKENS_PER_S
from zerogate.analysis.intervals import TIMING_STATISTICS, ratio_interval
from zerogate.contracts.summary import IntervalRule

PROFILE = (
    "extends: cpu-tiny\ndescription: The default profile in 60 optimizer steps, no checkpoints (the bisect "
    "of "
    "its step time).\ntraining:\n  optimizer_steps: 60\ncheckpoint:\n  every_steps: 0\n"
)
MACHINE = "bisect"
RESULTS = Path("results") / "bisect" / MACHINE
# The columns the timing statistics read (measures: the StepRecord's keys), kept from each record.
COLUMNS = [
    "step",
    "rank",
    STEP_TIME,
    MICRO_STEP_TIME,
    TOKENS_PER_S,
    SKIP_REASON,
    LOSS_SCALE,
]
WARMUP_STEPS = 10  # the default profile's training.warmup_steps_excluded


def worktree(repo: Path, sha: str) -> Path:
    path = Path(f"/tmp/bisect-{sha}")
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(path), sha],
            check=True,
            capture_output=True,
        )
    (path / "config/profiles/bisect.yaml").write_text(PROFILE)
    return path


def environment(tree: Path) -> dict[str, str]:
    """This interpreter's packages and prebuilt ops for every commit; the commit's own code first."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(tree / "workflow"),
        "TORCH_EXTENSIONS_DIR": os.environ.get(
            "TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions")
        ),
    }


def train_once(tree: Path, log: Path, attempts: int = 2) -> tuple[float, int]:
    """Train the run once more in ``tree`` (everything before training only the first time): (wall seconds
    of the last attempt, attempts made). A failed attempt (a rank that aborts at exit after its last step
    happens here now and then) is retried once; its log is kept beside."""
    target = str(RESULTS / "train/summary.json")
    for attempt in range(1, attempts + 1):
        again = ["--forcerun", "train"] if (tree / target).exists() else []
        command = [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "2",
            "--config",
            "profile=bisect",
            f"machine={MACHINE}",
            *again,
            "--",
            target,
        ]
        started = time.monotonic()
        with log.open("w") as out:
            done = subprocess.run(
                command, cwd=tree, env=environment(tree), stdout=out, stderr=subprocess.STDOUT
            )
        if not done.returncode:
            return time.monotonic() - started, attempt
        shutil.copy(log, log.with_suffix(f".failed{attempt}.log"))
    raise SystemExit(f"zerogate: error: {tree}: training failed {attempts} times, see {log}")


def read_records(directory: Path) -> pd.DataFrame:
    """The timing columns of a run's per-rank step records (rank<N>.jsonl), as a steps table."""
    frames = [
        pd.read_json(path, lines=True, precise_float=True) for path in sorted(directory.glob("rank*.jsonl"))
    ]
    table = pd.concat(frames, ignore_index=True)
    return (
        table[[c for c in COLUMNS if c in table.columns]].sort_values(["rank", "step"]).reset_index(drop=True)
    )


def measure(repo: Path, commits: list[str], runs: int, out: Path) -> list[dict]:
    """``runs`` more runs of each commit, in rounds: the commits in the order given, then the reverse, so a
    load that drifts within a round falls on the first and the last commits alike. A commit's runs are
    numbered on from those already kept under ``out``."""
    trees = {sha: worktree(repo, sha) for sha in commits}
    log = []
    for round_ in range(runs):
        for sha in commits if round_ % 2 == 0 else commits[::-1]:
            tree = trees[sha]
            run = len(list((out / sha).glob("run*")))
            load_before = os.getloadavg()[0]
            wall, attempts = train_once(tree, out / f"{sha}-run{run}.log")
            kept = out / sha / f"run{run}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(tree / RESULTS / "train/metrics", kept)
            benchmark = tree / RESULTS / "benchmarks/train.tsv"
            train_s = float(pd.read_csv(benchmark, sep="\t")["s"].iloc[0]) if benchmark.exists() else None
            log.append(
                {
                    "commit": sha,
                    "run": run,
                    "wall_s": wall,
                    "train_rule_s": train_s,
                    "attempts": attempts,
                    "load_before": load_before,
                    "load_after": os.getloadavg()[0],
                }
            )
            print(
                f"{sha} run {run}: {wall:.0f} s (train rule {train_s} s), load {load_before:.1f} -> "
                f"{log[-1]['load_after']:.1f}",
                flush=True,
            )
    return log


def analyse(commits: list[str], out: Path, rule: IntervalRule) -> list[dict]:
    found, rows = {}, []
    for sha in commits:
        tables = [read_records(path) for path in sorted((out / sha).glob("run*"))]
        each = [timing_replicates([table], WARMUP_STEPS, rule) for table in tables]
        found[sha] = timing_replicates(tables, WARMUP_STEPS, rule)
        name = "step_time_median_s"
        column = list(TIMING_STATISTICS).index(name)
        row = {
            "commit": sha,
            "runs": [
                {"median(s)": float(r.values[column]), "interval(s)": r.interval(name).model_dump()}
                for r in each
            ],
            "pooled_median(s)": float(found[sha].values[column]),
            "pooled_interval(s)": found[sha].interval(name).model_dump(),
        }
        ratio = ratio_interval(found[sha], found[commits[0]], name)
        row["ratio_to_first"] = float(found[sha].values[column] / found[commits[0]].values[column])
        row["ratio_interval"] = ratio.model_dump() if ratio else None
        row["beyond_noise"] = None if ratio is None or sha == commits[0] else not ratio.contains(1.0)
        rows.append(row)
        runs_text = ", ".join(
            f"{r['median(s)']:.4f} [{r['interval(s)']['low']:.4f}, {r['interval(s)']['high']:.4f}]"
            for r in row["runs"]
        )
        print(
            f"{sha}: runs {runs_text}; pooled {row['pooled_median(s)']:.4f} s "
            f"[{row['pooled_interval(s)']['low']:.4f}, {row['pooled_interval(s)']['high']:.4f}]; "
            f"/ {commits[0]} = {row['ratio_to_first']:.3f}"
            + (f" [{ratio.low:.3f}, {ratio.high:.3f}] beyond noise: {row['beyond_noise']}" if ratio else "")
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="+", help="commits to measure; ratios are to the first")
    parser.add_argument("--runs", type=int, default=2, help="more training runs per commit, interleaved")
    parser.add_argument("--out", default="results/bisect", help="where the records and bisect.json go")
    parser.add_argument("--repo", default=".", help="the repository the worktrees come from")
    parser.add_argument("--analyse-only", action="store_true", help="read the records already under --out")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    commits = [
        subprocess.run(
            ["git", "-C", args.repo, "rev-parse", "--short", c], capture_output=True, text=True, check=True
        ).stdout.strip()
        for c in args.commits
    ]
    log = [] if args.analyse_only else measure(Path(args.repo).resolve(), commits, args.runs, out)
    rows = analyse(commits, out, IntervalRule())
    previous = (
        json.loads((out / "bisect.json").read_text()) if (out / "bisect.json").exists() else {"runs": []}
    )
    (out / "bisect.json").write_text(json.dumps({"commits": rows, "runs": previous["runs"] + log}, indent=2))


if __name__ == "__main__":
    main()
