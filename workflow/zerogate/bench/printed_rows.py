"""The published figures a formula printed, against the planner's columns: an ``estimator_table`` row against
the planner's DeepSpeed column (zerogate.predict.estimates.deepspeed_estimates, which calls DeepSpeed's
estimators) on the row's parameter counts, or DeepSpeed's estimator itself with the options the row was
printed with where the column does not take them (``zero_init=0``, another buffer factor); a
``paper_figure`` row against the planner's paper column (zerogate.predict.estimates.paper_ledger). Counts
printed rounded give the prediction as an interval."""

from __future__ import annotations

import inspect
from importlib import metadata
from typing import Any

from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from zerogate.analysis.planner_validation import (
    ESTIMATOR_ROUNDING,
    PAPER_ROUNDING,
    PrintedFigure,
    Spread,
    group_of,
    judge_printed,
    printed_by_another_formula,
)
from zerogate.config.published_setups import EstimatorRow, EstimatorSetup, PaperRow
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.planner_validation import FigureCheck, RowCheck
from zerogate.predict.estimates import deepspeed_estimates, paper_ledger
from zerogate.predict.setup import installed_deepspeed, release

# The planner's scheme names (zerogate.predict.setup.SCHEMES) of a row's ZeRO stage and offloads.
PAPER_SCHEMES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def scheme_of(stage: int, offload_optimizer: bool, offload_param: bool) -> str:
    if stage < 2:
        return PAPER_SCHEMES[stage]
    if stage == 2:
        return "zero2_offload_optimizer" if offload_optimizer else "zero2"
    if offload_param:
        return "zero3_offload_all"
    return "zero3_offload_optimizer" if offload_optimizer else "zero3"


def row_check(row: Any, checks: list[FigureCheck], notes: tuple[str, ...] | list[str] = ()) -> RowCheck:
    """A row's judged figures, with what of the row was not told to the planner (``notes``)."""
    return RowCheck(
        id=row.id,
        kind=row.kind,
        group=group_of(row.kind),
        held_out=row.held_out,
        source=row.source.url,
        where=row.source.where,
        checks=checks,
        not_expressed=list(notes),
    )


def count_bounds(value: float | None, resolution: float | None, rounding: str | None) -> tuple[int, int, int]:
    """(lowest, stated, highest) count a printed count stands for."""
    if value is None:
        return 0, 0, 0
    stated = int(value)
    if resolution is None:
        return stated, stated, stated
    if rounding == "truncated":  # int(x / 1e6) "M": the count is at least the printed one, less than one more
        return stated, stated, int(value + resolution) - 1
    half = resolution / 2
    return int(value - half), stated, int(value + half)


def estimator_defaults() -> tuple[float, bool]:
    """The buffer factor and zero_init the planner's DeepSpeed column uses: DeepSpeed's own default factor
    (the column passes none) and zero_init=True (zerogate builds models under zero.Init)."""
    signature = inspect.signature(estimate_zero3_model_states_mem_needs)
    return signature.parameters["additional_buffer_factor"].default, True


def column_figures(setup: EstimatorSetup, total: int, largest: int) -> dict[str, int]:
    """The planner's DeepSpeed column at these counts: per-GPU and per-CPU bytes."""
    # The counts are all the column reads; the shape fields are the ledger's, unused by it.
    counts = ModelCounts(
        total=total,
        largest_layer=largest,
        numels=(total,),
        hidden=0,
        layers=0,
        heads=0,
        vocab=0,
        tied_embeddings=False,
    )
    scheme = scheme_of(setup.zero_stage, setup.offload_optimizer == "cpu", setup.offload_param == "cpu")
    column = deepspeed_estimates(counts, setup.gpus_per_node, setup.nodes)[scheme]
    assert column is not None
    return {"gpu": column.device, "cpu": column.host}


def estimator_with_options(setup: EstimatorSetup, total: int, largest: int) -> dict[str, int]:
    """DeepSpeed's estimator itself with the row's zero_init and buffer factor: per-GPU and per-CPU bytes."""
    offload_optimizer = setup.offload_optimizer == "cpu"
    if setup.zero_stage == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total,
            setup.gpus_per_node,
            setup.nodes,
            cpu_offload=offload_optimizer,
            additional_buffer_factor=setup.estimator_buffer_factor,
        )
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            total,
            largest,
            setup.gpus_per_node,
            setup.nodes,
            cpu_offload=offload_optimizer,
            cpu_offload_params=setup.offload_param == "cpu",
            zero_init=bool(setup.zero_init),
            additional_buffer_factor=setup.estimator_buffer_factor,
        )
    return {"gpu": int(gpu), "cpu": int(cpu)}


def estimator_figures(row: EstimatorRow, total: int, largest: int) -> tuple[dict[str, int], str]:
    """(per-GPU and per-CPU bytes, what computed them) for ``row``'s options at these counts."""
    setup = row.setup
    factor, zero_init = estimator_defaults()
    if setup.estimator_buffer_factor == factor and (
        setup.zero_stage == 2 or setup.zero_init in (None, zero_init)
    ):
        return column_figures(setup, total, largest), "the planner's DeepSpeed column"
    options = f"zero_init={int(bool(setup.zero_init))}, buffer factor {setup.estimator_buffer_factor:g}"
    return (
        estimator_with_options(setup, total, largest),
        f"DeepSpeed's estimator with {options}, options the planner's column does not take",
    )


def check_estimator_row(row: EstimatorRow) -> RowCheck:
    model, published = row.model, row.published
    totals = count_bounds(model.parameters, model.count_resolution, model.count_rounding)
    largests = count_bounds(model.largest_layer_parameters, model.count_resolution, model.count_rounding)
    # DeepSpeed's estimates grow with both counts: the lowest counts give the lowest figures.
    at = [estimator_figures(row, total, largest) for total, largest in zip(totals, largests)]
    predicted_by = at[1][1]
    installed = metadata.version("deepspeed")
    changes = {
        change.figure: change
        for change in row.changed_since_printed
        if installed_deepspeed() >= release(change.deepspeed_version)
    }
    checks = []
    for key, figure, quantity, value in (
        ("gpu", "per_gpu", "per-GPU memory", published.per_gpu_bytes),
        ("cpu", "per_cpu", "per-CPU memory", published.per_cpu_bytes),
    ):
        if value is None:
            continue
        printed = PrintedFigure(
            value,
            published.unit_as_printed,
            published.unit_bytes,
            published.printed_resolution,
            published.printed_rounding,
        )
        spread = Spread(at[0][0][key], at[1][0][key], at[2][0][key])
        check = judge_printed(quantity, ESTIMATOR_ROUNDING, printed, spread, predicted_by)
        if figure in changes:
            change = changes[figure]
            check = printed_by_another_formula(
                check, installed, change.deepspeed_version, change.change, change.formulas
            )
        checks.append(check)
    return row_check(row, checks)


def check_paper_row(row: PaperRow) -> RowCheck:
    ranks = row.setup.gpus_per_node * row.setup.nodes
    figure = paper_ledger(int(row.model.parameters), ranks)[PAPER_SCHEMES[row.setup.zero_stage]]
    published = row.published
    assert figure is not None
    printed = PrintedFigure(
        published.per_gpu_bytes,
        published.unit_as_printed,
        published.unit_bytes,
        published.printed_resolution,
        published.printed_rounding,
    )
    check = judge_printed(
        "per-GPU model states", PAPER_ROUNDING, printed, Spread.exact(figure), "the planner's paper column"
    )
    return row_check(row, [check])
