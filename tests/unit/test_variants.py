"""Comparison variants: only stage and offload differ from the rendered config; the table per variant
(zerogate.analysis.variants, its statistics from zerogate.analysis.measures)."""

import copy

import pytest

from tests.unit.helpers import settings, spike_rule, step_record, table_of, render_profile, train_summary
from zerogate.analysis import measures
from zerogate.analysis.variants import compare
from zerogate.plan.cpu_tuning import cpu_comm_overrides, untuned_overrides
from zerogate.plan.ds_config import apply_overrides
from zerogate.plan.variants import VARIANTS, variant_config


def _render(claim, profile, fingerprint):
    """(ds_config, deviations, run spec) as render_deepspeed_config renders the profile for ``fingerprint``."""
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
    assert {o["path"] for o in overrides} == {"zero_optimization.stage", "zero_optimization.offload_optimizer.device",
                                              "zero_optimization.offload_param.device"}


def test_claim_variant_is_the_rendered_config(rendered):
    assert variant_config(rendered, "zero3-offload-all")[0] == rendered


def test_profile_variants_are_known(tiny_profile):
    assert set(tiny_profile["variants"]) <= set(VARIANTS)


def test_compare_takes_slowest_rank_and_skips_warmup(tiny_profile):
    steps = table_of([step_record(step=s, rank=r, step_time_s=9.0 if s == 1 else 1.0 + r, loss=5 - s,
                                  device_peak_gib=0.5 + r)
                      for s in (1, 2, 3) for r in (0, 1)])
    (row,) = compare({"zero2": train_summary(3, wall_time_s=7)}, {"zero2": steps}, warmup_steps=1,
                     spike_rule=spike_rule(tiny_profile), expected_steps=3).rows
    statistics = row.statistics
    assert statistics.step_time_median_s == 2.0 and statistics.peak_memory_per_rank_gib == {0: 0.5, 1: 1.5}
    assert (row.stage, statistics.final_loss, statistics.optimizer_steps) == (2, 2, 3)
    assert statistics.run_complete is True and row.wall_time_s == 7


def test_variant_table_takes_the_per_rank_median_then_the_slowest_rank(tiny_profile):
    # Rank 1 is slow on odd steps, rank 0 on even ones: the max per step is always 3 s (median 3), but each
    # rank's own median is 1 s. The run's report, gates and this table all say 1 s (measures.step_time).
    records = [step_record(step=s, rank=r, step_time_s=3.0 if (s + r) % 2 else 1.0, loss=1.0, device_peak_gib=0.5)
               for s in range(1, 12) for r in (0, 1)]
    records = [r for r in records if not (r.step == 11 and r.rank == 0)] + [
        step_record(step=11, rank=0, step_time_s=1.0, loss=1.0, device_peak_gib=0.5)]
    steps = table_of(records)
    (row,) = compare({"zero3": train_summary(3, wall_time_s=60.0)}, {"zero3": steps}, warmup_steps=0, spike_rule=spike_rule(tiny_profile)).rows
    assert steps.groupby("step")[measures.STEP_TIME].max().median() == 3.0  # the old definition
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
