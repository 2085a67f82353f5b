"""The comparison of several runs as one long CSV (rule compare_runs): per group, one row per run and compared
quantity, one per run and gate, then one per run that is not comparable (zerogate.analysis.compare)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from zerogate.analysis.compare import Comparison, Run, gate_rows, injection_of, quantity_rows

# The CSV's columns: one row per (run, statistic) in a group, one per gate verdict, one per run not
# comparable.
TABLE_COLUMNS = [
    "group",
    "comparable",
    "not comparable because",
    "machine",
    "run id",
    "profile",
    "config hash",
    "fault injection",
    "dataset hash",
    "DeepSpeed config hash",
    "reference machine",
    "statistic",
    "unit",
    "value",
    "low",
    "high",
    "reference value",
    "ratio",
    "ratio low",
    "ratio high",
    "beyond_noise",
    "noise basis",
    "gate",
    "verdict",
]


NOISE_BASIS = {True: "interval of the ratio (both runs bootstrapped)", False: "no interval for this quantity"}


def comparison_table(comparison: Comparison) -> pd.DataFrame:
    """The CSV, long: per group, one row per run and compared quantity (its value and interval, the
    reference's value, the ratio with its interval and ``beyond_noise``: true or false on every row of a
    timing statistic with an interval, empty where the quantity has none), then one row per run and gate
    (its verdict); then each run not comparable with its reason."""
    rows = []
    for number, group in enumerate(comparison.groups, start=1):
        reference = group.runs[group.machines.index(group.reference)]
        base = {"group": number, "comparable": True, "reference machine": group.reference}
        for quantity in quantity_rows(group):
            for run in group.runs:
                cell, ref = quantity["cells"][run.machine], quantity["cells"][reference.machine]
                interval, ratio_interval = cell["interval"], cell["ratio_interval"]
                noisy = cell["beyond_noise"] is not None
                rows.append(
                    base
                    | _run_columns(run)
                    | {
                        "statistic": quantity["label"],
                        "unit": quantity["unit"],
                        "value": cell["value"],
                        "low": interval.low if interval else None,
                        "high": interval.high if interval else None,
                        "reference value": ref["value"],
                        "ratio": cell["ratio"],
                        "ratio low": ratio_interval.low if ratio_interval else None,
                        "ratio high": ratio_interval.high if ratio_interval else None,
                        "beyond_noise": cell["beyond_noise"],
                        "noise basis": NOISE_BASIS[noisy],
                    }
                )
        for gate in gate_rows(group):
            for run in group.runs:
                rows.append(
                    base
                    | _run_columns(run)
                    | {"gate": gate["gate"], "verdict": gate["verdicts"][run.machine]}
                )
    for straggler in comparison.stragglers:
        rows.append(
            {"group": None, "comparable": False, "not comparable because": straggler.reason}
            | _run_columns(straggler.run)
        )
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"group": "Int64", "beyond_noise": "boolean"})
    return table


def _run_columns(run: Run) -> dict[str, Any]:
    registry = run.registry
    return {
        "machine": run.machine,
        "run id": run.run_id,
        "profile": run.profile,
        "config hash": registry.provenance.config_hash if registry else None,
        "fault injection": injection_of(run),
        "dataset hash": registry.provenance.dataset_sha256 if registry else None,
        "DeepSpeed config hash": registry.provenance.ds_config_sha256 if registry else None,
    }
