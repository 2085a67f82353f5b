"""Several runs side by side (machines and/or profiles), from their run registries.

Runs whose dataset hash, resolved DeepSpeed config or pipeline version differ from the first run's are
flagged in the table and above it: their numbers are shown, never silently compared as like for like.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from zerogate.errors import InputError  # noqa: E402
from zerogate.report.html import STYLE, _image  # noqa: E402

# What must agree for two runs to be compared as like for like, and where the registry holds it.
COMPARABLE = {
    "dataset hash": ("provenance", "dataset_sha256"),
    "DeepSpeed config": ("provenance", "ds_config_sha256"),
    "pipeline version": ("pipeline_version",),
}


def _get(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        record = record.get(key, {}) if isinstance(record, dict) else {}
    return record or None


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """A run's registry, with its paths resolved against the results tree it sits in."""
    run_dir = Path(run_dir)
    path = run_dir if run_dir.suffix == ".json" else run_dir / "registry.json"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(str(path), "", "no run registry (run the pipeline for that profile and machine first)") from None
    except json.JSONDecodeError as error:
        raise InputError(str(path), "", f"not valid JSON ({error.msg})") from None
    for key in ("run_id", "profile", "machine", "gates", "provenance", "files"):
        if key not in record:
            raise InputError(str(path), key, "missing (not a zerogate run registry?)")
    # Files are recorded relative to the repository that made them: results/<profile>/<machine>/...;
    # read them beside this registry so that copied-in results work.
    record["_dir"] = str(path.parent)
    return record


def _local(record: dict[str, Any], recorded: str) -> Path:
    marker = f"{record['profile']}/{record['machine']}/"
    return Path(record["_dir"]) / recorded.split(marker, 1)[-1] if marker in recorded else Path(recorded)


def read_steps(record: dict[str, Any]) -> pd.DataFrame:
    return pd.read_parquet(_local(record, record["files"]["steps"]))


def flags(runs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per run id, what differs from the first run (the reference)."""
    reference = runs[0]
    result: dict[str, list[str]] = {}
    for run in runs:
        differs = []
        for name, path in COMPARABLE.items():
            mine, theirs = _get(run, path), _get(reference, path)
            if mine != theirs:
                differs.append(f"{name} differs from {reference['run_id']} ({str(mine)[:12]} vs {str(theirs)[:12]})")
        result[run["run_id"]] = differs
    return result


def comparison_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: gate verdicts, step time, peak memory per rank, tokens/s, final loss, deviations."""
    flagged = flags(runs)
    rows = []
    for run in runs:
        summary = run.get("summary", {})
        row = {
            "machine": run["machine"],
            "profile": run["profile"],
            "run id": run["run_id"],
            "median step (s)": summary.get("median optimizer-step time (s)"),
            "p90 step (s)": summary.get("p90 optimizer-step time (s)"),
            "median micro-step (s)": summary.get("median micro-step time (s)"),
            "tokens/s": summary.get("tokens/s (all ranks, median step)"),
            "final loss": summary.get("final loss"),
            "peak memory per rank (GiB)": json.dumps(summary.get("peak memory per rank (GiB)")),
            "deviations": len([d for d in run.get("deviations", []) if d.get("changes_experiment")]),
            "faithful": run.get("reproduction", {}).get("faithful"),
            "verdicts": " / ".join(f"{n} {v}" for v, n in run.get("verdict_counts", {}).items()),
            "comparability": "; ".join(flagged[run["run_id"]]) or "ok",
        }
        row.update({f"gate {g['name']}": g["verdict"] for g in run["gates"]})
        rows.append(row)
    return pd.DataFrame(rows)


def gate_matrix(table: pd.DataFrame) -> pd.DataFrame:
    """Gate verdicts with one row per gate and one column per run (the wide table, turned)."""
    gates = [c for c in table.columns if c.startswith("gate ")]
    matrix = table.set_index("run id")[gates].T
    matrix.index = [g.removeprefix("gate ") for g in matrix.index]
    return matrix.rename_axis("gate").reset_index()


def overlay_figure(runs: list[dict[str, Any]], metric: str, ylabel: str, path: str | Path) -> None:
    """One curve per run (lowest rank; for step time the slowest rank's per-step value)."""
    frames = []
    for run in runs:
        steps = read_steps(run)
        per_step = steps.groupby("step")[metric].max() if metric != "loss" else \
            steps[steps["rank"] == steps["rank"].min()].set_index("step")[metric]
        frames.append(pd.DataFrame({"step": per_step.index, metric: per_step.to_numpy(),
                                    "run": f"{run['profile']} on {run['machine']}"}))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    sns.lineplot(data=pd.concat(frames), x="step", y=metric, hue="run", ax=ax, linewidth=1)
    ax.set(xlabel="optimizer step", ylabel=ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_comparison(runs: list[dict[str, Any]], table: pd.DataFrame, figures: dict[str, str | Path]) -> str:
    flagged = {k: v for k, v in flags(runs).items() if v}
    warning = (
        "<div class='note' id='flags'><p><b>Not like for like:</b> these runs differ from the reference "
        f"run {html.escape(runs[0]['run_id'])} in what they measured; compare their numbers with care.</p><ul>"
        + "".join(f"<li><code>{html.escape(r)}</code>: {html.escape('; '.join(v))}</li>" for r, v in flagged.items())
        + "</ul></div>" if flagged else "<p>All runs share the dataset, the DeepSpeed config and the pipeline version.</p>"
    )
    runs_only = table[[c for c in table.columns if not c.startswith("gate ")]]
    verdict_cells = runs_only.to_html(index=False, table_id="comparison", na_rep="—",
                                      float_format=lambda v: f"{v:.4g}", escape=True)
    gate_cells = gate_matrix(table).to_html(index=False, table_id="gate-verdicts", na_rep="—", escape=True)
    for verdict in ("PASS", "FAIL", "NOT MEASURED"):
        gate_cells = gate_cells.replace(f"<td>{verdict}</td>", f"<td class='{verdict.replace(' ', '-')}'>{verdict}</td>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>zerogate comparison of {len(runs)} runs</title>
<style>{STYLE}</style></head><body>
<h1>zerogate comparison of {len(runs)} runs</h1>
{warning}
<h2>Runs</h2>
{verdict_cells}
<h2>Gate verdicts</h2>
{gate_cells}
<h2>Figures</h2>
{_image(figures['loss'], 'Training loss per optimizer step, one curve per run')}
{_image(figures['step_time'], 'Optimizer-step wall time (slowest rank) per step, one curve per run')}
</body></html>
"""
