"""Mutation score of the judging code: mutmut over the modules of zerogate.analysis that define the run's
statistics and gates and read its logs (MUTATED), killed by the gate, measures, summary, parse and
launcher-log unit tests (property-based ones and the real-log corpus included). A benchmark, not a test:
minutes to tens of minutes, printed as figures; not on CI's default path.

    make bench-mutation            # or: PYTHONPATH=workflow python -m zerogate.bench.mutation [--max-children
    N]

mutmut names a mutant's module after its file path, with only a leading ``src/`` stripped, and puts
``mutants/src`` first on sys.path; zerogate lives under ``workflow/``. So the run happens in a staging
copy, build/mutation/, with the package at src/zerogate and the tests and config beside it, and without
PYTHONPATH (which would import the unmutated package). The score is killed / (killed + survived); mutants
that time out count as killed (mutmut's own convention), those no test reaches (``no tests``) are listed
apart and count as survivors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
STAGE = REPO / "build" / "mutation"
MUTATED = [
    f"src/zerogate/analysis/{module}.py"
    for module in (
        "gates",
        "gate_measures",
        "measures",
        "health",
        "loss_trend",
        "rank_balance",
        "intervals",
        "summary",
        "parse",
        "launcher_log",
        "launcher_messages",
        "launcher_events",
        "launcher_failures",
        "launcher_skips",
    )
]
TESTS = [
    "tests/unit/test_gates.py",
    "tests/unit/test_gates_findings.py",
    "tests/unit/test_gates_properties.py",
    "tests/unit/test_gates_evidence.py",
    "tests/unit/test_measures.py",
    "tests/unit/test_summary.py",
    "tests/unit/test_intervals.py",
    "tests/unit/test_parse.py",
    "tests/unit/test_ranks.py",
    "tests/unit/test_floor_comms.py",
    "tests/unit/test_launcher_log.py",
    "tests/unit/test_log_corpus.py",
    "tests/unit/test_judge_log.py",
]
# Left out per mutant: the cross-consumer agreement test and the figure and report tests render figures and
# HTML (seconds each), and the layering test and the gloo probe start subprocesses; all still run in the unit
# suite.
DESELECTED = [
    "tests/unit/test_measures.py::test_every_consumer_gives_the_same_number",
    "tests/unit/test_measures.py::test_analysis_and_report_never_load_torch",
    "tests/unit/test_ranks.py::test_the_ranks_figure_draws_the_measures_numbers",
    "tests/unit/test_floor_comms.py::test_gloo_probe_between_two_local_ranks_measures_every_kind",
    "tests/unit/test_floor_comms.py::test_report_shows_the_floor_terms_beside_the_measured_step_and_each_figures_basis",
    # judge_log's rule runs Snakemake (seconds each); its functions are tested without it.
    "tests/unit/test_judge_log.py::test_judge_log_writes_a_summary_and_page_per_log_from_a_clean_checkout",
    "tests/unit/test_judge_log.py::test_judge_log_refuses_a_binary_log_with_one_line_before_writing",
    "tests/unit/test_judge_log.py::test_judge_log_needs_nothing_but_the_log_and_stays_out_of_the_default_dag",
]
PYPROJECT = """\
[tool.mutmut]
source_paths = ["src"]
only_mutate = {mutated}
pytest_add_cli_args_test_selection = {tests}
pytest_add_cli_args = {pytest_args}
also_copy = ["config"]

[tool.pytest.ini_options]
testpaths = ["tests"]
markers = ["integration: runs Snakemake and DeepSpeed end to end (minutes)"]
"""


def stage() -> None:
    """A fresh staging copy: src/zerogate, tests, config and the mutmut settings."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "workflow" / "zerogate", STAGE / "src" / "zerogate", ignore=ignore)
    shutil.copytree(REPO / "tests", STAGE / "tests", ignore=ignore)
    shutil.copytree(REPO / "config", STAGE / "config", ignore=ignore)
    pytest_args = ["-p", "no:cacheprovider", "-q", "-x"] + [
        arg for test in DESELECTED for arg in ("--deselect", test)
    ]
    (STAGE / "pyproject.toml").write_text(
        PYPROJECT.format(
            mutated=json.dumps(MUTATED), tests=json.dumps(TESTS), pytest_args=json.dumps(pytest_args)
        )
    )


def run(max_children: int, examples: int) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["ZEROGATE_PROPERTY_EXAMPLES"] = str(examples)  # fewer hypothesis examples per mutant
    mutmut = [sys.executable, "-m", "mutmut"]
    done = subprocess.run([*mutmut, "run", "--max-children", str(max_children)], cwd=STAGE, env=env)
    return done.returncode


def score() -> dict[str, object]:
    """Counts per mutmut status from ``mutmut results --all true``, and the score."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=STAGE,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    statuses: dict[str, list[str]] = {}
    for line in listed.splitlines():
        if ":" not in line:
            continue
        name, status = (part.strip() for part in line.rsplit(":", 1))
        statuses.setdefault(status, []).append(name)
    killed = len(statuses.get("killed", [])) + len(statuses.get("timeout", []))
    survived = sum(
        len(v) for k, v in statuses.items() if k not in ("killed", "timeout", "skipped", "not checked")
    )
    return {
        "counts": {k: len(v) for k, v in sorted(statuses.items())},
        "score(%)": round(100 * killed / (killed + survived), 1) if killed + survived else None,
        "survivors": sorted(n for k, v in statuses.items() if k not in ("killed", "timeout") for n in v),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--examples", type=int, default=10, help="hypothesis examples per property test")
    parser.add_argument("--report-only", action="store_true", help="score the last run in build/mutation")
    args = parser.parse_args()
    if not args.report_only:
        stage()
        run(args.max_children, args.examples)
    result = score()
    print(json.dumps({k: v for k, v in result.items() if k != "survivors"}, indent=2))
    print("surviving mutants (inspect one with: cd build/mutation && python -m mutmut show NAME):")
    for name in result["survivors"]:
        print("  ", name)


if __name__ == "__main__":
    main()
