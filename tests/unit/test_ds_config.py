"""Rendering the claim's DeepSpeed config for a machine and profile: every "auto" resolved, every
difference recorded with why, and the run spec's geometry, world and precision."""

import pytest

from tests.conftest import gpu_fingerprint
from tests.unit.helpers import render_profile, settings
from zerogate.contracts.run import DsConfig
from zerogate.errors import InputError
from zerogate.render.ds_config import RenderInputs, render
from zerogate.render.overrides import find_auto


def by_path(deviations):
    return {d.path: d for d in deviations.deviations}


def render_claim(claim, profile, fingerprint, template_file="claim.json"):
    """render() as render_deepspeed_config calls it, for a resolved profile or its settings."""
    return render_profile(profile, fingerprint, claim=claim, template_file=template_file)


def with_sections(profile, **sections):
    """The profile's settings with sections changed: ``training={"gradient_accumulation_steps": 4}``."""
    s = settings(profile)
    return s.model_copy(
        update={name: getattr(s, name).model_copy(update=changes) for name, changes in sections.items()}
    )


def test_cpu_render_resolves_every_auto_and_records_why(claim_config, tiny_profile, cpu_fingerprint):
    ds, deviations, spec = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    assert find_auto(claim_config)  # the template really has "auto" values
    assert find_auto(ds) == []
    zero = ds["zero_optimization"]
    hidden = settings(tiny_profile).model.hidden_size
    # On the CPU accelerator the bucket "auto"s take the tuned values (zerogate.render.cpu_tuning), one
    # deviation each.
    assert zero["reduce_bucket_size"] == 500_000_000
    assert zero["stage3_prefetch_bucket_size"] == 50_000_000
    assert zero["overlap_comm"] is False
    assert zero["stage3_param_persistence_threshold"] == 10 * hidden
    assert zero["sub_group_size"] == 10**9 and isinstance(zero["sub_group_size"], int)
    d = by_path(deviations)
    assert [x.path for x in deviations.deviations].count("zero_optimization.reduce_bucket_size") == 1
    assert d["zero_optimization.reduce_bucket_size"].kind == "resolved"
    assert not d["zero_optimization.reduce_bucket_size"].changes_experiment
    overlap = d["zero_optimization.overlap_comm"]
    assert overlap.claim is True and overlap.kind == "changed" and not overlap.changes_experiment
    # The decoder layer is a ZeRO-3 leaf module on CPU, next to DeepSpeed's default (MoE) leaf classes.
    from deepspeed.runtime.zero.leaf_module_config import DEFAULT_LEAF_MODULE_CLASSES

    assert zero["leaf_module"]["classes"] == [*DEFAULT_LEAF_MODULE_CLASSES, "LlamaDecoderLayer"]
    leaf = d["zero_optimization.leaf_module.classes"]
    assert leaf.claim is None and leaf.kind == "changed" and not leaf.changes_experiment


def test_cpu_leaf_module_follows_the_architecture_and_needs_one(claim_config, tiny_profile, cpu_fingerprint):
    profile = with_sections(tiny_profile, model={"architecture": "qwen2"})
    ds, _, _ = render_claim(claim_config, profile, cpu_fingerprint, "claim.json")
    assert ds["zero_optimization"]["leaf_module"]["classes"][-1] == "Qwen2DecoderLayer"
    profile = with_sections(
        tiny_profile, model={"architecture": None}
    )  # a model whose family is not stated: no class to name
    ds, deviations, _ = render_claim(claim_config, profile, cpu_fingerprint, "claim.json")
    assert "leaf_module" not in ds["zero_optimization"]
    assert "zero_optimization.leaf_module.classes" not in by_path(deviations)


def test_gpu_render_resolves_auto_by_the_hf_rule(claim_config, tiny_profile):
    fingerprint = gpu_fingerprint(("NVIDIA GeForce RTX 4090", 24))
    ds, deviations, _ = render_claim(claim_config, tiny_profile, fingerprint, "claim.json")
    zero, hidden = ds["zero_optimization"], settings(tiny_profile).model.hidden_size
    assert zero["reduce_bucket_size"] == hidden**2
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * hidden**2)
    assert zero["overlap_comm"] is True
    assert "leaf_module" not in zero  # GPU runs keep the claim's fetch granularity


def test_cpu_render_trains_fp32_and_says_so(claim_config, tiny_profile, cpu_fingerprint):
    ds, deviations, spec = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    assert ds["fp16"]["enabled"] is False and "bf16" not in ds
    fp16 = by_path(deviations)["fp16.enabled"]
    assert fp16.claim is True and fp16.rendered is False and fp16.changes_experiment
    assert "fp16 unsupported" in fp16.reason
    assert spec.dtype == "fp32" and spec.backend == "gloo" and spec.env["DS_ACCELERATOR"] == "cpu"


def test_batch_geometry_multiplies_out(claim_config, tiny_profile, cpu_fingerprint):
    ds, _, spec = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    assert spec.world_size == settings(tiny_profile).training.cpu_ranks == 2
    assert (
        ds["train_batch_size"]
        == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2
        == 16
    )


def test_claim_geometry_is_no_deviation_but_another_is(claim_config, tiny_profile, cpu_fingerprint):
    _, deviations, _ = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    assert "train_batch_size" not in by_path(deviations)
    profile = with_sections(tiny_profile, training={"gradient_accumulation_steps": 4})
    ds, deviations, _ = render_claim(claim_config, profile, cpu_fingerprint, "claim.json")
    assert ds["train_batch_size"] == 8
    assert by_path(deviations)["train_batch_size"].claim == 16


def test_explicit_batch_size_that_does_not_multiply_out_is_refused(
    claim_config, tiny_profile, cpu_fingerprint
):
    profile = with_sections(tiny_profile, training={"train_batch_size": 24})
    with pytest.raises(InputError, match="training.train_batch_size"):
        render_claim(claim_config, profile, cpu_fingerprint, "claim.json")


def test_a_batch_the_ranks_cannot_make_names_the_file_that_sets_it_not_the_overrides_file(claim_config):
    # claim-14b sets train_batch_size 16 (1 x 8 x 2 ranks); cpu-tiny, its parent, sets deepspeed.overrides.
    claimed = settings("claim-14b")
    four = gpu_fingerprint(*[("NVIDIA A100-SXM4-40GB", 40.0)] * 4)
    inputs = RenderInputs(
        model=claimed.model,
        training=claimed.training.run,
        overrides=list(claimed.deepspeed.overrides),
        seq_len=claimed.dataset.seq_len,
        vocab_size=claimed.vocab_size,
        fingerprint=four,
        template_file="claim.json",
        profile_file="config/profiles/cpu-tiny.yaml",
        batch_file="config/profiles/claim-14b.yaml",
    )
    with pytest.raises(InputError) as error:
        render(claim_config, inputs)
    assert str(error.value) == (
        "config/profiles/claim-14b.yaml: training.train_batch_size: 16 != micro_batch_per_rank 1 x "
        "gradient_accumulation_steps 8 x 4 ranks"
    )


def test_threads_per_rank_never_oversubscribe(claim_config, tiny_profile, cpu_fingerprint):
    _, _, spec = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        assert spec.env[name] == "1"
    assert spec.threads_per_rank == 1  # 2 ranks on the test machine's 2 cores


def test_gpu_render_keeps_claim_fp16_and_uses_one_rank_per_gpu(claim_config, tiny_profile):
    fingerprint = gpu_fingerprint(("NVIDIA GeForce RTX 5070", 12), ("NVIDIA GeForce RTX 4090", 24))
    ds, deviations, spec = render_claim(claim_config, tiny_profile, fingerprint, "claim.json")
    assert ds["fp16"]["enabled"] is True and spec.dtype == "fp16"
    assert spec.world_size == 2 and spec.backend == "nccl"
    assert not deviations.changing_the_experiment


def test_the_run_specs_precision_is_the_rendered_configs_after_the_overrides(claim_config, tiny_profile):
    """A profile override of the precision decides what the run is labelled and planned as: the run spec's
    dtype is DsConfig.dtype of the rendered config, after the overrides."""
    fingerprint = gpu_fingerprint(("NVIDIA GeForce RTX 4090", 24), ("NVIDIA GeForce RTX 4090", 24))
    fp16_off = {"path": "fp16.enabled", "value": False, "reason": "train in fp32"}
    bf16_on = {"path": "bf16.enabled", "value": True, "reason": "train in bf16"}
    for overrides, dtype in (([], "fp16"), ([fp16_off], "fp32"), ([fp16_off, bf16_on], "bf16")):
        ds, deviations, spec = render_claim(
            claim_config,
            with_sections(tiny_profile, deepspeed={"overrides": overrides}),
            fingerprint,
            "claim.json",
        )
        assert spec.dtype == DsConfig.of(ds, "ds_config.json").dtype == dtype, overrides
        assert {d.path for d in deviations.changing_the_experiment} == {o["path"] for o in overrides}
    # bf16 on with the claim's fp16 still on is refused at render time, not trained in either.
    with pytest.raises(InputError, match="bfloat16 and fp16"):
        render_claim(
            claim_config,
            with_sections(tiny_profile, deepspeed={"overrides": [bf16_on]}),
            fingerprint,
            "claim.json",
        )
    # The loss scaler runs only where fp16 does.
    ds, _, _ = render_claim(
        claim_config,
        with_sections(tiny_profile, deepspeed={"overrides": [fp16_off]}),
        fingerprint,
        "claim.json",
    )
    assert not DsConfig.of(ds, "ds_config.json").loss_scaler


def test_profile_override_is_applied_with_its_reason(claim_config, tiny_profile, cpu_fingerprint):
    profile = with_sections(
        tiny_profile,
        deepspeed={
            "overrides": [
                {
                    "path": "zero_optimization.offload_param.device",
                    "value": "none",
                    "reason": "compare without offload",
                }
            ]
        },
    )
    ds, deviations, _ = render_claim(claim_config, profile, cpu_fingerprint, "claim.json")
    assert ds["zero_optimization"]["offload_param"]["device"] == "none"
    assert by_path(deviations)["zero_optimization.offload_param.device"].reason == "compare without offload"


def test_open_choices_are_recorded_as_chosen(claim_config, tiny_profile, cpu_fingerprint):
    ds, deviations, _ = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    chosen = {d.path for d in deviations.deviations if d.kind == "chosen"}
    assert {"optimizer", "scheduler", "gradient_clipping"} <= chosen
    assert ds["scheduler"]["params"]["total_num_steps"] == settings(tiny_profile).training.optimizer_steps


def test_rendered_config_is_accepted_by_deepspeed(claim_config, tiny_profile, cpu_fingerprint, monkeypatch):
    import deepspeed.runtime.config as ds_runtime_config

    # DeepSpeedConfig reads the world size from torch.distributed; stand in for the 2-rank launch.
    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_runtime_config.dist, "get_world_size", lambda *a, **k: 2)
    ds, _, _ = render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    parsed = ds_runtime_config.DeepSpeedConfig(ds)  # ill-typed values and a wrong batch product raise here
    assert parsed.zero_optimization_stage == 3
    assert parsed.train_batch_size == 16
