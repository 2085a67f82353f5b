"""Comparison variants: only stage and offload differ from the rendered config; the table per variant."""

import copy

import pytest

from zerogate.plan.cpu_tuning import cpu_comm_overrides, untuned_overrides
from zerogate.plan.ds_config import apply_overrides, render
from zerogate.plan.variants import VARIANTS, compare, variant_config


@pytest.fixture
def rendered(claim_config, tiny_profile, cpu_fingerprint):
    return render(claim_config, tiny_profile, cpu_fingerprint, "claim.json")[0]


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


def test_compare_takes_slowest_rank_and_skips_warmup():
    records = [
        {"step": s, "rank": r, "warmup": s == 1, "step_time(s)": 9.0 if s == 1 else 1.0 + r, "loss": 5 - s,
         "memory/device_peak(GiB)": 0.5 + r}
        for s in (1, 2, 3) for r in (0, 1)
    ]
    (row,) = compare({"zero2": {"wall_time(s)": 7}}, {"zero2": records})
    assert row["median_step_time(s)"] == 2.0 and row["peak_memory_per_rank(GiB)"] == [0.5, 1.5]
    assert (row["stage"], row["final_loss"], row["steps"]) == (2, 2, 3)


def test_cpu_render_applies_the_tuning_and_benchmarks_can_undo_it(rendered, tiny_profile):
    zero = rendered["zero_optimization"]
    assert zero["overlap_comm"] is False and zero["reduce_bucket_size"] == 500_000_000
    hidden = tiny_profile["model"]["hidden_size"]
    untuned = apply_overrides(rendered, untuned_overrides(hidden))
    assert untuned["zero_optimization"]["overlap_comm"] is True
    assert untuned["zero_optimization"]["reduce_bucket_size"] == hidden * hidden
    assert "LlamaDecoderLayer" not in untuned["zero_optimization"]["leaf_module"]["classes"]
    assert rendered["zero_optimization"]["overlap_comm"] is False  # the input is left alone
    assert apply_overrides(untuned, cpu_comm_overrides("llama"))["zero_optimization"] == zero
