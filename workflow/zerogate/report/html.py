"""The self-contained HTML report of one run: verdicts first, then figures, deviations, provenance."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from zerogate.analysis.gates import timed_steps

STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:0.5rem 0 1.5rem;width:100%;font-size:0.92rem}
th,td{border:1px solid #ccc;padding:0.35rem 0.5rem;text-align:left;vertical-align:top}
th{background:#f2f2f2} .PASS{background:#d8f3dc;font-weight:bold} .FAIL{background:#ffd6d6;font-weight:bold}
.NOT.MEASURED,.NOT-MEASURED{background:#fff3bf;font-weight:bold} img{max-width:100%}
code,pre{background:#f6f6f6;font-size:0.85rem} pre{padding:0.6rem;overflow-x:auto}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:0.5rem 0.8rem}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return _e(value)


def verdict_table(verdicts: dict[str, Any]) -> str:
    rows = []
    for gate in verdicts["gates"]:
        css = gate["verdict"].replace(" ", "-")
        measured = "—" if gate["measured"] is None else f"{_fmt(gate['measured'])} {_e(gate['unit'])}"
        rows.append(
            f"<tr><td><b>{_e(gate['name'])}</b><br><small>claim: {_e(gate['claim'])}</small></td>"
            f"<td>{measured}</td><td>{_e(gate['comparison'])} {_fmt(gate['threshold'])} {_e(gate['unit'])}</td>"
            f"<td class='{css}'>{_e(gate['verdict'])}</td><td>{_e(gate['definition'])}"
            f"{'<br><i>' + _e(gate['reason']) + '</i>' if gate['reason'] else ''}</td></tr>"
        )
    return (
        "<table id='verdicts'><thead><tr><th>gate</th><th>measured</th><th>threshold</th><th>verdict</th>"
        "<th>definition</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def run_summary(steps: pd.DataFrame, warmup_steps: int) -> dict[str, Any]:
    """Headline numbers of the run (per rank where they differ); timing after warm-up and without
    fp16-overflow-skipped steps."""
    timed = timed_steps(steps, warmup_steps)
    first = steps[steps["rank"] == steps["rank"].min()].sort_values("step")
    return {
        "ranks": int(steps["rank"].nunique()),
        "optimizer steps": int(steps["step"].max()),
        "median optimizer-step time (s)": float(timed.groupby("rank")["step_time(s)"].median().max()),
        "p90 optimizer-step time (s)": float(timed.groupby("rank")["step_time(s)"].quantile(0.9).max()),
        "median micro-step time (s)": float(timed.groupby("rank")["micro_step_time(s)"].median().max()),
        "tokens/s (all ranks, median step)": float(timed.groupby("step")["tokens_per_s"].sum().median()),
        "first loss": float(first["loss"].iloc[0]),
        "final loss": float(first["loss"].iloc[-1]),
        "peak memory per rank (GiB)": {
            int(r): round(float(v), 3) for r, v in steps.groupby("rank")["memory/device_peak(GiB)"].max().items()
        },
    }


def _image(path: str | Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"<figure><img alt='{_e(alt)}' src='data:image/png;base64,{data}'><figcaption>{_e(alt)}</figcaption></figure>"


def _kv_table(pairs: dict[str, Any]) -> str:
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in pairs.items()) + "</table>"


def deviations_table(deviations: list[dict[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td><code>{_e(d['path'])}</code></td><td>{_e(d['kind'])}</td><td><code>{_e(json.dumps(d['claim']))}</code></td>"
        f"<td><code>{_e(json.dumps(d['rendered']))}</code></td><td>{'yes' if d['changes_experiment'] else 'no'}</td>"
        f"<td>{_e(d['reason'])}</td></tr>"
        for d in deviations
    )
    return (
        "<table id='deviations'><thead><tr><th>key</th><th>kind</th><th>claim</th><th>this run</th>"
        "<th>changes the experiment</th><th>reason</th></tr></thead><tbody>" + rows + "</tbody></table>"
    )


def failures_section(run_meta: dict[str, Any] | None) -> str:
    """Each failed rank with its last log lines; empty when every rank finished."""
    if not run_meta or not run_meta.get("failures"):
        return ""
    items = "".join(
        f"<h3>rank {_e(f['rank'])}: {_e(f['kind'])}</h3><p>{_e(f['message'])}</p>"
        f"<pre>{_e(chr(10).join(f['last_lines']))}</pre>"
        for f in run_meta["failures"]
    )
    return f"<h2>Failures</h2><div id='failures'>{items}</div>"


def ledger_section(ledger: dict[str, Any] | None) -> str:
    """The memory ledger's prediction against what each rank held (ledger/ledger_vs_measured.json from the
    compare_ledger rule: ``rows`` of rank, term, predicted, measured, error); omitted when absent."""
    rows = (ledger or {}).get("rows")
    if not rows:
        return ""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows)
    worst = ledger.get("max_abs_model_state_error(%)")
    verdict = ledger.get("within_5_percent")
    headline = (
        f"<p>Scheme {_e(ledger.get('scheme'))}, {_e(ledger.get('parameters'))} parameters, {_e(ledger.get('ranks'))}"
        f" ranks: largest model-state error {_fmt(worst)} % ({'within' if verdict else 'outside'} 5 %).</p>"
        if worst is not None
        else ""
    )
    return (
        f"<h2>Ledger vs measured</h2>{headline}<table id='ledger'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def evaluation_section(records: list[dict[str, Any]] | None) -> str:
    """Validation loss before, during and after training, and exact match on held-out items before and
    after (train/eval.jsonl, zerogate.train.evaluate); omitted when the run recorded none."""
    if not records:
        return ""
    rows = []
    for record in records:
        exact = (
            f"{record['exact_match/correct']}/{record['exact_match/items']} ({record['exact_match/accuracy']:.0%})"
            if "exact_match/items" in record
            else "—"
        )
        rows.append(
            f"<tr><td>{_e(record['phase'])}</td><td>{_e(record['step'])}</td>"
            f"<td>{_fmt(record.get('validation/loss'))}</td><td>{_e(record.get('validation/rows'))}</td>"
            f"<td>{exact}</td></tr>"
        )
    return (
        "<h2>Evaluation</h2><table id='evaluation'><thead><tr><th>when</th><th>after step</th>"
        "<th>validation loss (nats/token)</th><th>validation rows</th><th>exact match, held-out items</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def timers_section(timers: pd.DataFrame | None) -> str:
    """DeepSpeed's own wall-clock breakdown (rank 0), median per timer, when the run logged it."""
    if timers is None or not len(timers):
        return ""
    numbers = timers.drop(columns=["rank", "step", "line"], errors="ignore")
    medians = {f"{name} (ms, median of {int(col.notna().sum())})": float(col.median())
               for name, col in numbers.items() if col.notna().any()}
    return "<h2>DeepSpeed wall-clock breakdown</h2>" + _kv_table(medians)


def evidence_section(verdicts: dict[str, Any]) -> str:
    items = "".join(
        f"<details><summary>{_e(g['name'])}: {_e(g['verdict'])}</summary><pre>{_e(json.dumps(g['evidence'], indent=2, default=str))}</pre></details>"
        for g in verdicts["gates"]
    )
    return "<h2>Evidence per gate</h2>" + items


FIGURE_CAPTIONS = {
    "loss": "Training loss per optimizer step, raw and smoothed; overflow, crash and stabiliser events marked",
    "step_time": "Optimizer-step wall time per rank, and its distribution after warm-up",
    "memory": "Peak memory per rank per optimizer step, with the claim threshold",
    "loss_scale": "fp16 dynamic loss scale over the run",
}


def render_html(
    *,
    verdicts: dict[str, Any],
    steps: pd.DataFrame,
    provenance: dict[str, Any],
    deviations: list[dict[str, Any]],
    figures: dict[str, str | Path],
    warmup_steps: int,
    run_meta: dict[str, Any] | None = None,
    ledger: dict[str, Any] | None = None,
    evaluation: list[dict[str, Any]] | None = None,
    timers: pd.DataFrame | None = None,
) -> str:
    reproduction = verdicts["reproduction"]
    counts = verdicts["counts"]
    status = (
        "<p>This run <b>is</b> a faithful reproduction of the claim's configuration and hardware.</p>"
        if reproduction["faithful"]
        else "<div class='note'><p>This run is <b>not</b> a faithful reproduction of the claim; the gates are "
        "judged on this machine with the profile's thresholds. Why:</p><ul>"
        + "".join(f"<li>{_e(r)}</li>" for r in reproduction["reasons"])
        + "</ul></div>"
    )
    git = provenance["git"]["at_training"] or {}
    key_facts = {
        "pipeline version": provenance["pipeline_version"],
        "run id": provenance["run_id"],
        "recorded at": provenance["recorded_at"],
        "profile": provenance["profile"],
        "config hash (sha256)": provenance["config_hash"],
        "git commit at training": f"{git.get('commit')}{' (uncommitted changes)' if git.get('dirty') else ''}",
        "dataset hash (sha256)": provenance["dataset"]["content_sha256"],
        "machine": provenance["machine"]["hostname"],
        "accelerator": f"{provenance['machine']['accelerator']['kind']} x "
        f"{provenance['machine']['accelerator']['count'] or 'CPU'}",
        "CPU": provenance["machine"]["cpu"]["model"],
        **{f"package {k}": v for k, v in provenance["packages"].items()},
    }
    title = f"zerogate report — {provenance['profile']} on {provenance['machine']['hostname']}"
    summary = run_summary(steps, warmup_steps)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<p>zerogate v{_e(provenance['pipeline_version'])} · run <code>{_e(provenance['run_id'])}</code> ·
{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['NOT MEASURED']} NOT MEASURED</p>
<h2>Verdicts</h2>
{verdict_table(verdicts)}
{status}
{failures_section(run_meta)}
<h2>Run summary</h2>
{_kv_table(summary)}
<h2>Figures</h2>
{"".join(_image(path, FIGURE_CAPTIONS[name]) for name, path in figures.items() if path)}
{evaluation_section(evaluation)}
{ledger_section(ledger)}
{timers_section(timers)}
<h2>Deviations from the claim's DeepSpeed config</h2>
{deviations_table(deviations)}
{evidence_section(verdicts)}
<h2>Provenance</h2>
{_kv_table(key_facts)}
<details><summary>Full provenance (JSON)</summary><pre>{_e(json.dumps(provenance, indent=2))}</pre></details>
</body></html>
"""
