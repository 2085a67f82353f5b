"""The self-contained HTML report of one run: the seed's claims judged (when given), the gates' verdicts, then
the run summary, figures, evaluation, ledger, deviations, evidence and provenance.

The page is rendered with jinja2 from ``templates/`` beside this module (``report.html.j2``; the sections
are macros in ``sections.html.j2``, the style in ``style.css``); every number in it comes from the run's
summary (zerogate.contracts.summary, the summarise_run rule), the gates' or the claims' verdicts or another
rule's table: nothing is computed here.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from zerogate.analysis.evidence import RunEvidence
from zerogate.analysis.intervals import pooling_rule
from zerogate.contracts.base import Record
from zerogate.contracts.report import Provenance, VariantsTable
from zerogate.contracts.summary import RankBalance, RunStatistics, RunSummary
from zerogate.units import format_bytes

TEMPLATES = Path(__file__).parent / "templates"


def fmt(value: Any) -> str:
    """A value as the report prints it: floats to four significant digits, booleans as yes/no, None as a
    dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.filters["fmt"] = fmt
    env.filters["bytes"] = format_bytes
    env.filters["as_json"] = lambda value: value.as_json() if isinstance(value, Record) else value
    env.filters["tojson_plain"] = lambda value: json.dumps(value)
    env.filters["tojson_pretty"] = lambda value: json.dumps(value, indent=2, default=str)
    env.filters["columns"] = lambda rows: list(dict.fromkeys(key for row in rows for key in row))
    return env


def section(name: str, *args: Any) -> str:
    """One macro of sections.html.j2 (one section of the report), rendered on its own."""
    return str(getattr(environment().get_template("sections.html.j2").module, name)(*args))


# The run summary's rows: each RunStatistics field -> its label (the unit comes from the field's key).
SUMMARY_LABELS = {
    "ranks": "ranks",
    "optimizer_steps": "optimizer steps recorded",
    "warmup_steps_excluded": "warm-up steps excluded from timing",
    "timed_steps": "timed optimizer steps (after warm-up, fp16-skipped excluded)",
    "step_time_median_s": "median optimizer-step time, slowest rank",
    "step_time_p90_s": "p90 optimizer-step time, slowest rank",
    "slowest_rank": "slowest rank (by median step time)",
    "micro_step_time_median_s": "median micro-step time, slowest rank",
    "tokens_per_s": "tokens/s, all ranks (median step)",
    "first_loss": "first loss",
    "final_loss": "final loss",
    "loss_spikes": "loss spikes (the stabiliser's rule)",
    "overflow_skipped_steps": "fp16-overflow-skipped steps, worst rank (— without a loss scaler)",
    "peak_memory_per_rank_gib": "peak memory per rank",
    "run_complete": "run complete (every rank, every step)",
    "failed_ranks": "failed ranks",
    "straggler_rank": "straggler (the rank the others wait for; — when none or not measured)",
    "straggler_compute_excess_s": "straggler's median compute beyond the next slowest rank's",
    "wait_for_straggler_median_s": "median wait for the straggler per step, longest-waiting rank",
}


def unit_of(key: str) -> str:
    """The unit in a key such as ``step_time_median(s)`` (``s``); empty when the key has none."""
    found = re.search(r"\(([^()]*)\)$", key)
    return found.group(1) if found else ""


# RunStatistics fields that are not rows of the summary: the intervals stand beside their values, and the
# repeats have a section of their own.
NOT_ROWS = ("intervals", "repeats")


def summary_rows(summary: RunStatistics | None) -> list[dict[str, Any]]:
    """The summary as labelled rows with units (a per-rank value stays a mapping: a small table), each
    timing statistic with its interval."""
    if summary is None:
        return []
    return [
        {
            "label": SUMMARY_LABELS.get(name, name),
            "unit": unit_of(RunStatistics.key(name)),
            "value": getattr(summary, name),
            "interval": summary.interval_of(name),
        }
        for name in RunStatistics.model_fields
        if name not in NOT_ROWS
    ]


# The repeats table's columns: RunStatistics fields, each repeat's own value (with its own interval).
REPEAT_COLUMNS = {
    "step_time_median_s": "median step, slowest rank",
    "step_time_p90_s": "p90 step, slowest rank",
    "micro_step_time_median_s": "median micro-step, slowest rank",
    "tokens_per_s": "tokens/s",
    "final_loss": "final loss",
    "run_complete": "complete",
}


def repeats_context(summary: RunSummary, seed: int | None) -> dict[str, Any] | None:
    """The "Repeats" section: each repeat's statistics and peak memory beside the pooled ones; None for a
    run trained once."""
    each, pooled = summary.repeats, summary.statistics
    if len(each) < 2 or pooled is None:
        return None
    columns = [
        {"name": name, "label": label, "unit": unit_of(RunStatistics.key(name))}
        for name, label in REPEAT_COLUMNS.items()
    ]
    rows = [
        {"repeat": index, "seed": None if seed is None else seed + index, "statistics": stats}
        for index, stats in enumerate(each)
    ]
    return {
        "columns": columns,
        "rows": rows,
        "pooled": pooled,
        "ranks": list(summary.peak_memory_spread_gib),
        "memory_spread": summary.peak_memory_spread_gib,
        "pooling": pooled.intervals.pooling if pooled.intervals else pooling_rule(len(each)),
    }


def image(path: str | Path, caption: str) -> dict[str, str]:
    """A PNG inlined into the page (the report is one self-contained file)."""
    return {"caption": caption, "data": base64.b64encode(Path(path).read_bytes()).decode()}


FIGURE_CAPTIONS = {
    "loss": "Training loss per optimizer step, raw and smoothed; loss spikes, overflow, crash and stabiliser "
    "events marked",
    "step_time": "Optimizer-step wall time per rank, and its distribution over the timed steps with the "
    "slowest-rank median",
    "memory": "Peak memory per rank per optimizer step, with the claim threshold",
    "loss_scale": "fp16 dynamic loss scale over the run",
}


def key_facts(provenance: Provenance) -> dict[str, Any]:
    git = provenance.git.at_training
    machine = provenance.machine
    return {
        "pipeline version": provenance.pipeline_version,
        "run id": provenance.run_id,
        "recorded at": provenance.recorded_at,
        "profile": provenance.profile,
        "config hash (sha256)": provenance.config_hash,
        "git commit at training": f"{git.commit if git else None}"
        f"{' (uncommitted changes)' if git and git.dirty else ''}",
        "dataset hash (sha256)": provenance.dataset.content_sha256,
        "machine": machine.hostname,
        "accelerator": f"{machine.accelerator.kind} x {machine.accelerator.count or 'CPU'}",
        "CPU": machine.cpu.model,
        **{f"package {k}": v for k, v in provenance.packages.items()},
    }


@dataclass(frozen=True)
class ReportFigures:
    """The figures the report inlines: the run's (FIGURE_CAPTIONS' names; the loss scale only for a run
    that had one), the ranks figure, and the variants' loss figure with profile key ``variants``."""

    run: dict[str, str | Path] = field(default_factory=dict)
    ranks: str | Path | None = None
    variants: str | Path | None = None


def render_html(run: RunEvidence, figures: ReportFigures) -> str:
    """The report's page, from what write_report reads of the run (zerogate.analysis.evidence: the run
    summary, the gates' and the claims' verdicts, the provenance, the plans and the other tables) and the
    figures. With repeats (profile key ``repeats``) the run summary is the pooled one and a Repeats section
    lists each repeat's own."""
    provenance, verdicts, summary = run.provenance, run.verdicts, run.run_summary
    meta = run.run_meta
    seed = provenance.resolved_profile.get("training", {}).get("seed")
    pooled = summary.statistics
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            title=f"zerogate report — {provenance.profile} on {provenance.machine.hostname}",
            provenance=provenance,
            counts=verdicts.counts,
            verdicts=verdicts,
            reproduction=verdicts.reproduction,
            failures=meta.failures if meta else [],
            nodes=meta.nodes if meta else [],
            summary=summary_rows(pooled),
            intervals=pooled.intervals if pooled else None,
            repeats=repeats_context(summary, seed),
            images=[image(path, FIGURE_CAPTIONS[name]) for name, path in figures.run.items() if path],
            evaluation=run.evaluation or [],
            ledger=run.ledger,
            claims=run.claims,
            plan=run.plan,
            claimed_plan=run.claimed_plan,
            communication=run.communication,
            timers=summary.deepspeed_timers,
            deviations=run.deviations.deviations,
            key_facts=key_facts(provenance),
            ranks=ranks_context(summary.rank_balance, figures.ranks),
            choices=None if run.variants is None else choices_context(run.variants, figures.variants),
        )
    )


RANKS_CAPTION = (
    "Median compute, communication and wait per optimizer step per rank, and each rank's wait per timed step"
)


def ranks_context(balance: RankBalance, figure: str | Path | None = None) -> dict[str, Any]:
    """The "Ranks" section's content: the run summary's rank balance (over the run's world size), its
    per-rank table, and the compute-vs-wait figure when given."""
    rows = (
        [
            {
                "rank": rank,
                "compute(s)": balance.compute[rank],
                "wait(s)": balance.wait[rank],
                "communication(s)": balance.communication,
                "step_time(s)": balance.step_time[rank],
                "wait_total(s)": balance.wait_total[rank],
                "wait_share(%)": 100 * balance.wait_share[rank],
            }
            for rank in balance.ranks
        ]
        if balance.measured
        else []
    )
    return {
        "balance": balance,
        "rows": rows,
        "margin_percent": 100 * balance.margin,
        "image": image(figure, RANKS_CAPTION) if figure else None,
    }


# The choices table's columns: RunStatistics fields shown per variant (with their intervals where the
# statistic has one).
CHOICE_COLUMNS = {
    "step_time_median_s": "median step, slowest rank",
    "tokens_per_s": "tokens/s",
    "final_loss": "final loss",
}
VARIANT_LOSS_CAPTION = "Training loss per optimizer step of every trained variant, overlaid (peers dashed)"


def choices_context(table: VariantsTable, figure: str | Path | None = None) -> dict[str, Any]:
    """The "Choices" section: the variants' table (zerogate.analysis.variants) as rows, the ranks whose
    peaks it lists, the fastest and the smallest, the peers' loss agreement and the overlaid loss figure."""
    columns = [
        {"name": name, "label": label, "unit": unit_of(RunStatistics.key(name))}
        for name, label in CHOICE_COLUMNS.items()
    ]
    ranks = sorted(
        {rank for row in table.rows if row.statistics for rank in row.statistics.peak_memory_per_rank_gib}
    )
    return {
        "columns": columns,
        "rows": table.rows,
        "ranks": ranks,
        "fastest": table.fastest,
        "smallest": table.smallest,
        "agreement": table.agreement,
        "intervals": next(
            (
                row.statistics.intervals
                for row in table.rows
                if row.statistics is not None and row.statistics.intervals is not None
            ),
            None,
        ),
        "image": image(figure, VARIANT_LOSS_CAPTION) if figure else None,
    }
