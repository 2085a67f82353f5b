"""Comparison variants: only stage and offload differ from the rendered config; ZeRO's peers train from the
config of the ZeRO variant they stand beside; the table per variant (zerogate.analysis.variants, its
statistics from zerogate.analysis.measures), its fastest and smallest, and the peers' loss agreement."""

import copy
import json

import pytest

from tests.unit.helpers import (
    Trained,
    render_profile,
    settings,
    spike_rule,
    step_record,
    table_of,
    train_summary,
    variants_table,
)
from zerogate.analysis import measures
from zerogate.analysis.columns import STEP_TIME
from zerogate.analysis.variants import TOLERANCE_FLOOR
from zerogate.render.cpu_tuning import cpu_comm_overrides, untuned_overrides
from zerogate.render.overrides import apply_overrides
from zerogate.render.variants import (
    ALL_VARIANTS,
    NOT_RUNNABLE,
    PEERS,
    VARIANTS,
    engine_of,
    trained,
    variant_config,
)


def _render(claim, profile, fingerprint):
    """(ds_config, deviations, run spec) as render_deepspeed_config renders the profile for
    ``fingerprint``."""
    return render_profile(profile, fingerprint, claim=claim, template_file="claim.json")


@pytest.fixture
def rendered(claim_config, tiny_profile, cpu_fingerprint):
    return _render(claim_config, tiny_profile, cpu_fingerprint)[0]


def without_zero(config):
    config = copy.deepcopy(config)
    for key in ("stage", "offload_optimizer", "offload_param"):
        config["zero_optimization"].pop(key)
    return config


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_changes_only_stage_and_offload(rendered, name):
    config, overrides = variant_config(rendered, name)
    stage, offload_optimizer, offload_param = VARIANTS[name]
    zero = config["zero_optimization"]
    assert zero["stage"] == stage
    assert zero["offload_optimizer"]["device"] == ("cpu" if offload_optimizer else "none")
    assert zero["offload_param"]["device"] == ("cpu" if offload_param else "none")
    assert without_zero(config) == without_zero(rendered)
    assert {o["path"] for o in overrides} == {
        "zero_optimization.stage",
        "zero_optimization.offload_optimizer.device",
        "zero_optimization.offload_param.device",
    }


def test_claim_variant_is_the_rendered_config(rendered):
    assert variant_config(rendered, "zero3-offload-all")[0] == rendered


def test_profile_variants_are_known(tiny_profile):
    assert set(tiny_profile["variants"]) <= set(ALL_VARIANTS)


def test_the_default_profile_lists_zeros_peers_and_the_schema_allows_every_variant(tiny_profile):

    from tests.unit.test_workflow import REPO

    assert {"fsdp2", "fsdp2-offload", "hf-trainer", "zero3"} <= set(tiny_profile["variants"])
    schema = json.loads((REPO / "config/schemas/profile.schema.json").read_text())
    assert schema["properties"]["variants"]["items"]["enum"] == list(ALL_VARIANTS)


def test_variants_train_their_own_step_count_at_most_the_runs(tiny_profile):
    from zerogate.errors import InputError

    assert settings(tiny_profile).variant_steps == 100  # the default profile's variant_optimizer_steps
    assert settings({**tiny_profile, "variant_optimizer_steps": None}).variant_steps == 1000  # the run's own
    shorter = {**tiny_profile, "training": {**tiny_profile["training"], "optimizer_steps": 60}}
    assert settings(shorter).variant_steps == 60  # a shorter run shortens its variants
    with pytest.raises(InputError, match="variant_optimizer_steps: 0 is not a whole number"):
        settings({**tiny_profile, "variant_optimizer_steps": 0})
    with pytest.raises(InputError, match="variant_optimizer_steps: 5 leaves no timed step"):
        settings({**tiny_profile, "variant_optimizer_steps": 5})  # warmup_steps_excluded is 10


@pytest.mark.parametrize("name", sorted(PEERS))
def test_a_peer_trains_from_its_zero_variants_config_with_its_own_engine(rendered, name):
    assert variant_config(rendered, name) == variant_config(rendered, PEERS[name].config_of)[:1] + (
        [{**o, "reason": f"variant {name}"} for o in variant_config(rendered, PEERS[name].config_of)[1]],
    )
    assert engine_of(name) == "fsdp2" and engine_of("zero3") == "deepspeed"


def test_fsdp2_offload_reads_the_parameter_offload_of_its_config(rendered):
    from zerogate.runtime.engines import fsdp2_offload

    assert fsdp2_offload(variant_config(rendered, "fsdp2-offload")[0])
    assert not fsdp2_offload(variant_config(rendered, "fsdp2")[0])


def test_a_variant_that_cannot_run_is_not_trained_and_says_why(tiny_profile):
    assert trained(["zero3", "hf-trainer", "fsdp2"]) == ["zero3", "fsdp2"]
    table = variants_table(
        {}, warmup_steps=0, spike_rule=spike_rule(tiny_profile), not_run=["hf-trainer"], accelerator="cpu"
    )
    (row,) = table.rows
    assert row.statistics is None and row.not_run == NOT_RUNNABLE["hf-trainer"].on_cpu
    assert "num_processes=1" in row.not_run and table.fastest is None
    assert (
        variants_table(
            {},
            warmup_steps=0,
            spike_rule=spike_rule(tiny_profile),
            not_run=["hf-trainer"],
            accelerator="cuda",
        )
        .rows[0]
        .not_run
        == NOT_RUNNABLE["hf-trainer"].elsewhere
    )


def test_accelerate_gives_no_backend_to_a_deepspeed_rank_on_the_cpu():
    """The cause the hf-trainer row states, in the installed accelerate: with a rank's LOCAL_RANK set and no
    accelerator, _prepare_backend picks no backend unless use_cpu is set (and then not DeepSpeed's type)."""
    import os
    from unittest import mock

    import torch
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if torch.cuda.is_available():
        pytest.skip("an accelerator is present: accelerate picks its backend")
    with mock.patch.dict(os.environ, {"LOCAL_RANK": "0", "WORLD_SIZE": "2"}):
        state = object.__new__(PartialState)
        assert state._prepare_backend(cpu=False) == (None, DistributedType.NO)
        assert state._prepare_backend(cpu=True)[1] == DistributedType.MULTI_CPU


def _run(records, wall_time_s=60.0):
    return Trained(table_of(records), train_summary(max(r.step for r in records), wall_time_s=wall_time_s))


def _curve(losses, step_time=1.0, peak=0.5):
    return [
        step_record(step=s, rank=r, step_time_s=step_time, loss=loss, device_peak_gib=peak + 0.1 * r)
        for s, loss in enumerate(losses, start=1)
        for r in (0, 1)
    ]


def test_the_table_names_the_fastest_and_the_smallest_variant(tiny_profile):
    losses = [5.0, 4.0, 3.0, 2.5]
    runs = {
        "zero2": _run(_curve(losses, step_time=1.0, peak=0.9)),
        "zero3": _run(_curve(losses, step_time=2.0, peak=0.5)),
        "fsdp2": _run(_curve(losses, step_time=1.5, peak=0.6)),
    }
    table = variants_table(runs, warmup_steps=0, spike_rule=spike_rule(tiny_profile))
    assert (table.fastest, table.smallest) == ("zero2", "zero3")
    assert [row.engine for row in table.rows] == ["deepspeed", "deepspeed", "fsdp2"]
    assert table.rows[2].stage == 3 and table.rows[2].predicted_peak_gib is None


def test_a_peer_within_the_zero_stages_own_differences_agrees_and_a_larger_gap_is_a_finding(tiny_profile):
    base = [5.0, 4.5, 4.0, 3.6, 3.3, 3.1]
    order = [x * (1 + 2e-5 * i) for i, x in enumerate(base)]  # ZeRO-1 vs ZeRO-2: reduction order only
    runs = {
        "zero1": _run(_curve(order)),
        "zero2": _run(_curve(base)),
        "zero3": _run(_curve([x * (1 + 1e-5 * i) for i, x in enumerate(base)])),
        "zero3-offload-all": _run(_curve([x * 1.03 for x in base])),  # apart from step 1
        "fsdp2": _run(_curve(base)),
        "fsdp2-offload": _run(_curve(base)),
    }
    table = variants_table(runs, warmup_steps=0, spike_rule=spike_rule(tiny_profile))
    # Each peer against the ZeRO variant whose config it trains from, and only that one.
    by_peer = {a.peer: a for a in table.agreement}
    assert [(a.peer, a.reference) for a in table.agreement] == [
        ("fsdp2", "zero3"),
        ("fsdp2-offload", "zero3-offload-all"),
    ]
    same = by_peer["fsdp2"]
    assert same.tolerance == pytest.approx(2e-5 * 5, rel=1e-6) and same.tolerance_from == ["zero1", "zero2"]
    assert same.within is True and same.max_relative_difference == pytest.approx(5e-5 / (1 + 5e-5), rel=1e-3)
    apart = by_peer["fsdp2-offload"]
    assert apart.within is False and apart.first_step_relative_difference == pytest.approx(
        0.03 / 1.03, rel=1e-6
    )
    assert "first step" in apart.diagnosis


def test_without_two_zero_stages_of_the_same_start_the_agreement_is_not_judged(tiny_profile):
    base = [5.0, 4.0, 3.0]
    table = variants_table(
        {"zero3": _run(_curve(base)), "fsdp2": _run(_curve(base))},
        warmup_steps=0,
        spike_rule=spike_rule(tiny_profile),
    )
    (agreement,) = table.agreement
    assert agreement.tolerance is None and agreement.within is None and agreement.max_relative_difference == 0
    identical = variants_table(
        {
            "zero1": _run(_curve(base)),
            "zero2": _run(_curve(base)),
            "zero3": _run(_curve(base)),
            "fsdp2": _run(_curve(base)),
        },
        warmup_steps=0,
        spike_rule=spike_rule(tiny_profile),
    )
    assert identical.agreement[0].tolerance == TOLERANCE_FLOOR  # bit-identical stages: the floor
    # A peer whose ZeRO variant was not trained has nothing to be set against.
    assert (
        variants_table(
            {"zero1": _run(_curve(base)), "fsdp2": _run(_curve(base))},
            warmup_steps=0,
            spike_rule=spike_rule(tiny_profile),
        ).agreement
        == []
    )


def test_compare_takes_slowest_rank_and_skips_warmup(tiny_profile):
    steps = table_of(
        [
            step_record(
                step=s, rank=r, step_time_s=9.0 if s == 1 else 1.0 + r, loss=5 - s, device_peak_gib=0.5 + r
            )
            for s in (1, 2, 3)
            for r in (0, 1)
        ]
    )
    (row,) = variants_table(
        {"zero2": Trained(steps, train_summary(3, wall_time_s=7))},
        warmup_steps=1,
        spike_rule=spike_rule(tiny_profile),
        expected_steps=3,
    ).rows
    statistics = row.statistics
    assert statistics.step_time_median_s == 2.0 and statistics.peak_memory_per_rank_gib == {0: 0.5, 1: 1.5}
    assert (row.stage, statistics.final_loss, statistics.optimizer_steps) == (2, 2, 3)
    assert statistics.run_complete is True and row.wall_time_s == 7


def test_variant_table_takes_the_per_rank_median_then_the_slowest_rank(tiny_profile):
    # Rank 1 is slow on odd steps, rank 0 on even ones: the max per step is always 3 s (median 3), but each
    # rank's own median is 1 s. The run's report, gates and this table all say 1 s (measures.step_time).
    records = [
        step_record(step=s, rank=r, step_time_s=3.0 if (s + r) % 2 else 1.0, loss=1.0, device_peak_gib=0.5)
        for s in range(1, 12)
        for r in (0, 1)
    ]
    records = [r for r in records if not (r.step == 11 and r.rank == 0)] + [
        step_record(step=11, rank=0, step_time_s=1.0, loss=1.0, device_peak_gib=0.5)
    ]
    steps = table_of(records)
    (row,) = variants_table(
        {"zero3": Trained(steps, train_summary(3, wall_time_s=60.0))},
        warmup_steps=0,
        spike_rule=spike_rule(tiny_profile),
    ).rows
    assert steps.groupby("step")[STEP_TIME].max().median() == 3.0  # the old definition
    assert row.statistics.step_time_median_s == measures.step_time(steps, 0).value == 1.0


def test_cpu_render_applies_the_tuning_and_benchmarks_can_undo_it(rendered, tiny_profile):
    zero = rendered["zero_optimization"]
    assert zero["overlap_comm"] is False and zero["reduce_bucket_size"] == 500_000_000
    hidden = settings(tiny_profile).model.hidden_size
    untuned = apply_overrides(rendered, untuned_overrides(hidden))
    assert untuned["zero_optimization"]["overlap_comm"] is True
    assert untuned["zero_optimization"]["reduce_bucket_size"] == hidden * hidden
    assert "LlamaDecoderLayer" not in untuned["zero_optimization"]["leaf_module"]["classes"]
    assert rendered["zero_optimization"]["overlap_comm"] is False  # the input is left alone
    assert apply_overrides(untuned, cpu_comm_overrides("llama"))["zero_optimization"] == zero
