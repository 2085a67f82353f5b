"""The run registry: one machine-readable JSON summary per run, for diffing and collecting runs.

Fields (schema ``zerogate-run-registry/2``; every path is relative to the repository root):

- ``schema``, ``pipeline_version``, ``run_id``, ``profile``, ``machine``, ``registered_at`` (UTC ISO 8601)
- ``verdict_counts``: ``{"PASS": n, "FAIL": n, "NOT MEASURED": n}``; ``reproduction``: ``{faithful, reasons}``
- ``gates``: one object per gate: ``name, claim, definition, metric, statistic, comparison, threshold,
  unit, measured, verdict, reason`` (the evidence stays in ``gates/verdicts.json``)
- ``summary``: headline numbers, keys with units (:func:`zerogate.analysis.measures.run_statistics`, the
  report's run summary: slowest-rank step times, tokens/s, losses, loss spikes, fp16-skipped steps, peak
  memory per rank as ``{rank: GiB}``, run completion). Schema 2 replaced schema 1's display labels
  (``"median optimizer-step time (s)"``) with these keys (``"step_time_median(s)"``).
- ``run``: parse_logs' run metadata (world size, steps per rank, failed ranks with their last lines)
- ``provenance``: ``config_hash``, ``dataset_sha256``, ``ds_config_sha256``, ``git`` (at training and at
  report), ``packages``, ``machine`` (hostname, CPU, RAM, accelerator), ``recorded_at``
- ``deviations``: the changes from the claim's DeepSpeed config, each with its reason
- ``files``: ``report``, ``verdicts``, ``steps``, ``events``, ``provenance`` and ``figures`` (name -> PNG)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from zerogate.analysis.measures import SpikeRule
from zerogate.hashing import sha256_json
from zerogate.report.html import run_summary

SCHEMA = "zerogate-run-registry/2"
GATE_FIELDS = ("name", "claim", "definition", "metric", "statistic", "comparison", "threshold", "unit",
               "measured", "verdict", "reason")


def registry_record(*, machine: str, verdicts: dict[str, Any], steps: pd.DataFrame, run_meta: dict[str, Any],
                    provenance: dict[str, Any], deviations: list[dict[str, Any]], files: dict[str, Any],
                    warmup_steps: int, spike_rule: SpikeRule) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "pipeline_version": provenance["pipeline_version"],
        "run_id": provenance["run_id"],
        "profile": provenance["profile"],
        "machine": machine,
        "registered_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "verdict_counts": verdicts["counts"],
        "reproduction": verdicts["reproduction"],
        "gates": [{k: g.get(k) for k in GATE_FIELDS} for g in verdicts["gates"]],
        "summary": run_summary(steps, warmup_steps, spike_rule, run_meta) if len(steps) else {},
        "run": run_meta,
        "provenance": {
            "config_hash": provenance["config_hash"],
            "dataset_sha256": provenance["dataset"]["content_sha256"],
            "ds_config_sha256": sha256_json(provenance["ds_config"]),
            "git": provenance["git"],
            "packages": provenance["packages"],
            "machine": provenance["machine"],
            "recorded_at": provenance["recorded_at"],
        },
        "deviations": deviations,
        "files": files,
    }
