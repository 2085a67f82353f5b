"""The variant comparison table: one row per ZeRO stage / offload variant and per peer of ZeRO (FSDP2, with
and without its offload) trained on the same model and data through the same loop (zerogate.render.variants
renders them), each row's statistics its run summary's (the summarise_variant rule, the same
zerogate.analysis.summary.summarise as the run's), so the table and a run's report mean the same thing by
"median step time" (the per-rank median, then the slowest rank). Beside each: the planner's
predicted peak for its config and the bytes measured for its scheme (zerogate.train.comms_volume: DeepSpeed's
comms logger, FSDP2's collectives), where those exist; then which variant is fastest and which smallest, and
each peer's loss curve against the ZeRO variant it trains from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from zerogate.analysis import measures
from zerogate.contracts.comms import CommsVolume, VolumeRow
from zerogate.contracts.plan import PeakPrediction
from zerogate.contracts.records import TrainSummary
from zerogate.contracts.report import LossAgreement, VariantRow, VariantsTable
from zerogate.contracts.summary import RunStatistics, RunSummary
from zerogate.render.variants import NOT_RUNNABLE, PEERS, engine_of, what_of, zero_setup
from zerogate.units import GIB

# Each peer's loss curve is set against the ZeRO variant whose config it trains from (FSDP2: ZeRO-3); every
# variant starts from the same initial weights at the same seed (zerogate.model.build.build_model), so the
# curves can agree from the first step. The tolerance comes from these: the same algorithm, optimizer and
# initial weights, only the reduction order of the float sums differs (no offload: the offloads step with
# DeepSpeed's CPU Adam, another implementation; not ZeRO-3: the reference a peer is judged against does not
# set the bar it is judged by).
TOLERANCE_FROM = ("zero0", "zero1", "zero2")
# Below this the ZeRO stages agree to the last bits: a floor so that a bit-identical pair does not demand
# bit-identity of another library (float32's epsilon is 1.2e-7).
TOLERANCE_FLOOR = 1e-6
TOLERANCE_RULE = (
    "the largest of the per-step maximum relative loss differences between any two of ZeRO-0, -1 and "
    "-2 trained here (the same algorithm, optimizer and initial weights in another float32 reduction "
    f"order), at least {TOLERANCE_FLOOR:g}"
)


@dataclass(frozen=True)
class VariantRun:
    """One trained variant: its records (parse.read_rank_metrics: its loss curve), its training run's summary
    and its run summary (the summarise_variant rule: its statistics)."""

    steps: pd.DataFrame
    summary: TrainSummary
    run_summary: RunSummary


@dataclass(frozen=True)
class VariantRuns:
    """What compare_variants reads: each trained variant's run, the planner's predicted peaks (by variant),
    the communication table with the accumulation its rows are read at, the listed variants this machine
    cannot train, and the accelerator they would have trained on."""

    runs: dict[str, VariantRun]
    predictions: dict[str, PeakPrediction] = field(default_factory=dict)
    communication: CommsVolume | None = None
    accumulation: int | None = None
    not_run: list[str] = field(default_factory=list)
    accelerator: str = "cpu"


def offload_note(name: str, accelerator: str) -> str | None:
    """What an offload row measures on the CPU accelerator: the host is the device, so nothing is moved."""
    _, offload_optimizer, offload_param = zero_setup(name)
    if accelerator != "cpu" or not (offload_optimizer or offload_param):
        return None
    if engine_of(name) == "fsdp2":
        return (
            "CPU accelerator: CPUOffloadPolicy moves nothing (parameters, gradients and the optimizer step "
            "are on "
            "the host already; pinned memory is off, it needs an accelerator): this row times FSDP2's "
            "offload "
            "code path, not a transfer"
        )
    return (
        "CPU accelerator: the offload target is the device itself, so nothing crosses a bus; DeepSpeed's CPU "
        "Adam "
        "steps the optimizer"
    )


def variant_row(
    name: str, run: VariantRun, prediction: PeakPrediction | None = None, volume: VolumeRow | None = None
) -> VariantRow:
    """One trained variant: what trained it, then its run summary's statistics, its predicted peak and the
    bytes measured for its scheme (``volume``: the communication table's row at the run's accumulation)."""
    stage, offload_optimizer, offload_param = zero_setup(name)
    return VariantRow(
        variant=name,
        engine=engine_of(name),
        what=what_of(name),
        stage=stage,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        statistics=run.run_summary.statistics,
        wall_time_s=run.summary.wall_time_s,
        predicted_peak_gib=None if prediction is None else prediction.total_bytes / GIB,
        predicted_peak_metric=None if prediction is None else prediction.metric,
        communicated_bytes_per_step=None
        if volume is None or volume.status != "run"
        else volume.measured_volume_bytes,
        note=offload_note(name, run.summary.accelerator),
    )


def not_run_row(name: str, accelerator: str) -> VariantRow:
    """A variant that cannot train on this machine: its reason, no statistics."""
    stage, offload_optimizer, offload_param = zero_setup(name)
    return VariantRow(
        variant=name,
        engine=engine_of(name),
        what=what_of(name),
        stage=stage,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        statistics=None,
        wall_time_s=None,
        not_run=NOT_RUNNABLE[name].reason(accelerator),
    )


def peak_of_largest_rank(statistics: RunStatistics) -> float | None:
    """The variant's memory figure: the peak of its rank with the largest peak."""
    peaks = statistics.peak_memory_per_rank_gib
    return max(peaks.values()) if peaks else None


def best(rows: list[VariantRow], value) -> str | None:
    """The variant with the lowest ``value`` of its statistics (None for none measured)."""
    found = [(value(row.statistics), row.variant) for row in rows if row.statistics is not None]
    found = [(v, name) for v, name in found if v is not None and np.isfinite(v)]
    return min(found)[1] if found else None


def relative_differences(steps: pd.DataFrame, reference: pd.DataFrame) -> pd.Series:
    """|loss - reference loss| / |reference loss| per optimizer step both recorded (measures.loss_series)."""
    loss, ref = measures.loss_series(steps), measures.loss_series(reference)
    common = loss.index.intersection(ref.index)
    return ((loss[common] - ref[common]).abs() / ref[common].abs()).sort_index()


def tolerance(curves: dict[str, pd.DataFrame]) -> tuple[float | None, list[str]]:
    """(TOLERANCE_RULE's tolerance, the variants it came from); None with fewer than two of TOLERANCE_FROM."""
    names = [name for name in TOLERANCE_FROM if name in curves]
    if len(names) < 2:
        return None, names
    gaps = [
        float(relative_differences(curves[a], curves[b]).max()) for a, b in itertools.combinations(names, 2)
    ]
    return max(TOLERANCE_FLOOR, *gaps), names


def diagnosis(first: float, worst: float, limit: float | None) -> str:
    """What the two numbers say, in words (beyond the tolerance: where the curves part)."""
    if limit is None:
        return "not judged: fewer than two of ZeRO-0, -1, -2 trained to derive the tolerance from"
    if worst <= limit:
        return "agree within the tolerance"
    if first > limit:
        return (
            "differ from the first step, before any update: the initial weights (or the forward) differ, "
            "not the training"
        )
    return "start together and part during training: the updates differ"


def loss_agreement(curves: dict[str, pd.DataFrame]) -> list[LossAgreement]:
    """Each trained peer against the ZeRO variant whose config it trains from, where that was trained,
    judged on the tolerance."""
    limit, sources = tolerance(curves)
    found = []
    for peer in (name for name in PEERS if name in curves):
        reference = PEERS[peer].config_of
        gaps = relative_differences(curves[peer], curves[reference]) if reference in curves else []
        if not len(gaps):
            continue
        worst, first = float(gaps.max()), float(gaps.iloc[0])
        found.append(
            LossAgreement(
                peer=peer,
                reference=reference,
                steps=len(gaps),
                max_relative_difference=worst,
                first_step_relative_difference=first,
                tolerance=limit,
                tolerance_from=sources,
                tolerance_rule=TOLERANCE_RULE,
                within=None if limit is None else bool(worst <= limit),
                diagnosis=diagnosis(first, worst, limit),
            )
        )
    return found


def compare(variants: VariantRuns) -> VariantsTable:
    """One row per variant (each trained variant's statistics from its run summary; the listed variants this
    machine cannot train with their reason), the fastest and the smallest, and the peers' agreement."""
    rows = [
        variant_row(name, run, variants.predictions.get(name), volume_of(variants, name))
        for name, run in variants.runs.items()
    ]
    rows += [not_run_row(name, variants.accelerator) for name in variants.not_run]
    return VariantsTable(
        rows=rows,
        fastest=best(rows, lambda s: s.step_time_median_s),
        smallest=best(rows, peak_of_largest_rank),
        agreement=loss_agreement({name: run.steps for name, run in variants.runs.items()}),
    )


def volume_of(variants: VariantRuns, name: str) -> VolumeRow | None:
    """The communication table's row of variant ``name`` at the run's accumulation (None without them)."""
    if variants.communication is None or variants.accumulation is None:
        return None
    return variants.communication.row(name, variants.accumulation)
