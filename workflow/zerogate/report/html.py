"""The self-contained HTML report of one run: the seed's claims judged (when given), the gates' verdicts, then the run summary, figures, evaluation,
ledger, deviations, evidence and provenance.

The page is rendered with jinja2 from ``templates/`` beside this module (``report.html.j2``; the sections
are macros in ``sections.html.j2``, the style in ``style.css``); every number in it comes from
zerogate.analysis.measures or the gates' verdicts, nothing is computed here.
"""

from __future__ import annotations

import base64
import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from zerogate.analysis import measures
from zerogate.analysis.claims import both_units
from zerogate.analysis.measures import SpikeRule

TEMPLATES = Path(__file__).parent / "templates"


def fmt(value: Any) -> str:
    """A value as the report prints it: floats to four significant digits, booleans as yes/no, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=False, lstrip_blocks=False)
    env.filters["fmt"] = fmt
    env.filters["both_units"] = lambda n: "—" if n is None else both_units(n)
    env.filters["tojson_plain"] = lambda value: json.dumps(value)
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, default=str)
    env.filters["columns"] = lambda rows: list(dict.fromkeys(key for row in rows for key in row))
    return env


def _section(name: str, *args: Any) -> str:
    """One macro of sections.html.j2, rendered (also used on its own by the tests)."""
    return str(getattr(environment().get_template("sections.html.j2").module, name)(*args))


# The run summary's rows: measures.run_statistics key -> label (the unit comes from the key).
SUMMARY_LABELS = {
    "ranks": "ranks",
    "optimizer_steps": "optimizer steps recorded",
    "warmup_steps_excluded": "warm-up steps excluded from timing",
    "timed_steps": "timed optimizer steps (after warm-up, fp16-skipped excluded)",
    "step_time_median(s)": "median optimizer-step time, slowest rank",
    "step_time_p90(s)": "p90 optimizer-step time, slowest rank",
    "slowest_rank": "slowest rank (by median step time)",
    "micro_step_time_median(s)": "median micro-step time, slowest rank",
    "tokens_per_s": "tokens/s, all ranks (median step)",
    "first_loss": "first loss",
    "final_loss": "final loss",
    "loss_spikes": "loss spikes (the stabiliser's rule)",
    "overflow_skipped_steps": "fp16-overflow-skipped steps, worst rank (— without a loss scaler)",
    "peak_memory_per_rank(GiB)": "peak memory per rank",
    "run_complete": "run complete (every rank, every step)",
    "failed_ranks": "failed ranks",
    "straggler_rank": "straggler (the rank the others wait for; — when none or not measured)",
    "straggler_compute_excess(s)": "straggler's median compute beyond the next slowest rank's",
    "wait_for_straggler_median(s)": "median wait for the straggler per step, longest-waiting rank",
}


def unit_of(key: str) -> str:
    """The unit in a key such as ``step_time_median(s)`` (``s``); empty when the key has none."""
    found = re.search(r"\(([^()]*)\)$", key)
    return found.group(1) if found else ""


def run_summary(steps: pd.DataFrame, warmup_steps: int, spike_rule: SpikeRule,
                run_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Headline numbers of the run: measures.run_statistics, with the run's completion when parse_logs'
    metadata is given. The registry stores this dict as the run's ``summary``."""
    completion = measures.completion_of(run_meta) if run_meta else None
    return measures.run_statistics(steps, warmup_steps, spike_rule, completion)


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary as labelled rows with units (a per-rank value stays a mapping: a small table)."""
    return [{"label": SUMMARY_LABELS.get(key, key), "unit": unit_of(key), "value": value}
            for key, value in summary.items()]


def image(path: str | Path, caption: str) -> dict[str, str]:
    """A PNG inlined into the page (the report is one self-contained file)."""
    return {"caption": caption, "data": base64.b64encode(Path(path).read_bytes()).decode()}


def verdict_table(verdicts: dict[str, Any]) -> str:
    return _section("verdicts", verdicts["gates"])


def deviations_table(deviations: list[dict[str, Any]]) -> str:
    return _section("deviations", deviations)


def failures_section(run_meta: dict[str, Any] | None) -> str:
    """Each failed rank with its last log lines; empty when every rank finished."""
    return _section("failures", (run_meta or {}).get("failures") or [])


def ledger_section(ledger: dict[str, Any] | None, plan: dict[str, Any] | None = None,
                   claimed_plan: dict[str, Any] | None = None, claims: dict[str, Any] | None = None) -> str:
    """The memory ledger: each rank's predicted vs measured peak (the ``peak`` part of
    ledger/ledger_vs_measured.json), the plan's per-scheme table for this run's model and for the claimed
    box with the verdicts on the seed's formulas (claims/verdicts.json), and the model-state terms against
    what each rank held (``rows`` of rank, term, predicted, measured, error); omitted when all are absent."""
    return _section("ledger", ledger or {}, plan, claimed_plan, claims)


def seed_claims_section(claims: dict[str, Any] | None) -> str:
    """The seed's statements with their verdicts on paper and measured here (claims/verdicts.json)."""
    return _section("seed_claims", claims or {})


def communication_section(table: dict[str, Any] | None, claims: dict[str, Any] | None = None) -> str:
    """Measured vs theory communication volume per scheme (comms/volume.json, zerogate.analysis.comms) with
    the seed's 1.5x statement as judged (claims/verdicts.json)."""
    return _section("communication", table or {}, claims)


def evaluation_section(records: list[dict[str, Any]] | None) -> str:
    """Validation loss before, during and after training, and exact match on held-out items before and
    after (train/eval.jsonl, zerogate.train.evaluate); omitted when the run recorded none."""
    return _section("evaluation", records or [])


def timer_medians(timers: pd.DataFrame | None) -> dict[str, float]:
    """DeepSpeed's own wall-clock breakdown (rank 0), median per timer, when the run logged it."""
    if timers is None or not len(timers):
        return {}
    numbers = timers.drop(columns=["rank", "step", "line"], errors="ignore")
    return {f"{name} (ms, median of {int(col.notna().sum())})": float(col.median())
            for name, col in numbers.items() if col.notna().any()}


FIGURE_CAPTIONS = {
    "loss": "Training loss per optimizer step, raw and smoothed; loss spikes, overflow, crash and stabiliser events marked",
    "step_time": "Optimizer-step wall time per rank, and its distribution over the timed steps with the slowest-rank median",
    "memory": "Peak memory per rank per optimizer step, with the claim threshold",
    "loss_scale": "fp16 dynamic loss scale over the run",
}


def key_facts(provenance: dict[str, Any]) -> dict[str, Any]:
    git = provenance["git"]["at_training"] or {}
    machine = provenance["machine"]
    return {
        "pipeline version": provenance["pipeline_version"],
        "run id": provenance["run_id"],
        "recorded at": provenance["recorded_at"],
        "profile": provenance["profile"],
        "config hash (sha256)": provenance["config_hash"],
        "git commit at training": f"{git.get('commit')}{' (uncommitted changes)' if git.get('dirty') else ''}",
        "dataset hash (sha256)": provenance["dataset"]["content_sha256"],
        "machine": machine["hostname"],
        "accelerator": f"{machine['accelerator']['kind']} x {machine['accelerator']['count'] or 'CPU'}",
        "CPU": machine["cpu"]["model"],
        **{f"package {k}": v for k, v in provenance["packages"].items()},
    }


def render_html(
    *,
    verdicts: dict[str, Any],
    steps: pd.DataFrame,
    provenance: dict[str, Any],
    deviations: list[dict[str, Any]],
    figures: dict[str, str | Path],
    warmup_steps: int,
    spike_rule: SpikeRule,
    run_meta: dict[str, Any] | None = None,
    ledger: dict[str, Any] | None = None,
    evaluation: list[dict[str, Any]] | None = None,
    timers: pd.DataFrame | None = None,
    claims: dict[str, Any] | None = None,
    plan: dict[str, Any] | None = None,
    claimed_plan: dict[str, Any] | None = None,
    ranks_figure: str | Path | None = None,
    communication: dict[str, Any] | None = None,
) -> str:
    title = f"zerogate report — {provenance['profile']} on {provenance['machine']['hostname']}"
    return environment().get_template("report.html.j2").render(
        title=title,
        provenance=provenance,
        counts=verdicts["counts"],
        verdicts=verdicts,
        reproduction=verdicts["reproduction"],
        failures=(run_meta or {}).get("failures") or [],
        nodes=(run_meta or {}).get("nodes") or [],
        summary=summary_rows(run_summary(steps, warmup_steps, spike_rule, run_meta)),
        images=[image(path, FIGURE_CAPTIONS[name]) for name, path in figures.items() if path],
        evaluation=evaluation or [],
        ledger=ledger or {},
        claims=claims or {},
        plan=plan,
        claimed_plan=claimed_plan,
        communication=communication or {},
        timers=timer_medians(timers),
        deviations=deviations,
        key_facts=key_facts(provenance),
        ranks=ranks_context(steps, warmup_steps, run_meta, ranks_figure),
    )


RANKS_CAPTION = ("Median compute, communication and wait per optimizer step per rank, and each rank's wait per "
                 "timed step")


def ranks_context(steps: pd.DataFrame, warmup_steps: int, run_meta: dict[str, Any] | None,
                  figure: str | Path | None = None) -> dict[str, Any]:
    """The "Ranks" section's content: measures.rank_balance over the run's world size (parse_logs' metadata),
    its per-rank table, and the compute-vs-wait figure when given."""
    balance = measures.rank_balance(steps, warmup_steps, (run_meta or {}).get("world_size"))
    rows = [{"rank": rank, "compute(s)": balance.compute[rank], "wait(s)": balance.wait[rank],
             "communication(s)": balance.communication, "step_time(s)": balance.step_time[rank],
             "wait_total(s)": balance.wait_total[rank], "wait_share(%)": 100 * balance.wait_share[rank]}
            for rank in balance.ranks] if balance.measured else []
    return {"balance": balance, "rows": rows, "margin_percent": 100 * balance.margin,
            "image": image(figure, RANKS_CAPTION) if figure else None}


def ranks_section(steps: pd.DataFrame, warmup_steps: int, run_meta: dict[str, Any] | None = None,
                  figure: str | Path | None = None) -> str:
    """The "Ranks" section alone (tests): who waits for whom."""
    return _section("ranks", ranks_context(steps, warmup_steps, run_meta, figure))
