"""Unknown or misspelt DeepSpeed keys are refused at any depth; precision follows the devices."""

import copy

import pytest

from tests.conftest import gpu_fingerprint
from tests.unit.test_ds_config import by_path, render_claim, with_sections
from zerogate.contracts.machine import Fingerprint
from zerogate.errors import InputError
from zerogate.render.ds_config import validate_with_deepspeed
from zerogate.render.ds_keys import model_keys, unknown_keys


def _without_bf16(fingerprint: Fingerprint) -> Fingerprint:
    """The machine with devices that do not support bf16."""
    data = fingerprint.model_dump()
    for device in data["accelerator"]["devices"]:
        device["bf16_supported"] = False
    return Fingerprint.of(data, "the test fingerprint")


def test_the_claims_config_has_no_unknown_key(claim_config):
    assert unknown_keys(claim_config) == []


def test_misspelt_zero_key_is_refused_with_its_path(claim_config, tiny_profile, cpu_fingerprint):
    claim_config["zero_optimization"]["stage3_prefetch_bucket_sise"] = "auto"
    with pytest.raises(InputError) as error:
        render_claim(claim_config, tiny_profile, cpu_fingerprint, "claim.json")
    assert str(error.value).startswith(
        "claim.json: zero_optimization.stage3_prefetch_bucket_sise: unknown key"
    )
    assert "did you mean 'stage3_prefetch_bucket_size'" in str(error.value)


@pytest.mark.parametrize(
    "path",
    [
        ("zero_optimization", "offload_param", "pin_memroy"),
        ("fp16", "loss_scale_windo"),
        ("train_batch_sise",),
        ("optimizer", "parms"),
    ],
)
def test_unknown_keys_at_any_depth(claim_config, path):
    config = copy.deepcopy(claim_config)
    config.setdefault("optimizer", {"type": "AdamW", "params": {}})
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = 1
    assert [p for p, _ in unknown_keys(config)] == [".".join(path)]


def test_deepspeed_aliases_and_top_level_keys_are_known(claim_config):
    keys = model_keys(__import__("deepspeed.runtime.zero.config", fromlist=["x"]).DeepSpeedZeroConfig)
    assert "stage3_prefetch_bucket_size" in keys and "prefetch_bucket_size" in keys
    config = dict(
        claim_config, wall_clock_breakdown=True, gradient_clipping=1.0, comms_logger={"enabled": True}
    )
    assert unknown_keys(config) == []


def test_misspelt_override_is_refused_naming_the_profile_key(claim_config, tiny_profile, cpu_fingerprint):
    profile = with_sections(
        tiny_profile,
        deepspeed={"overrides": [{"path": "zero_optimization.overlap_com", "value": False, "reason": "x"}]},
    )
    with pytest.raises(
        InputError, match=r"^profile: deepspeed.overrides.0.path: zero_optimization.overlap_com"
    ):
        render_claim(claim_config, profile, cpu_fingerprint, "claim.json")


def test_deepspeed_rejects_an_ill_typed_value():
    with pytest.raises(InputError, match="DeepSpeed rejects the rendered config"):
        validate_with_deepspeed(
            {
                "train_micro_batch_size_per_gpu": 1,
                "gradient_accumulation_steps": 1,
                "zero_optimization": {"stage": "three"},
            },
            "claim.json",
        )


def test_bf16_request_on_a_card_without_bf16_becomes_fp16_deviation(claim_config, tiny_profile):
    fingerprint = _without_bf16(gpu_fingerprint(("Tesla V100", 16), ("Tesla V100", 16)))
    config = copy.deepcopy(claim_config)
    config["fp16"]["enabled"] = False
    config["bf16"] = {"enabled": True}
    ds, deviations, spec = render_claim(config, tiny_profile, fingerprint, "claim.json")
    assert spec.dtype == "fp16" and ds["bf16"]["enabled"] is False and ds["fp16"]["enabled"] is True
    d = by_path(deviations)
    assert d["bf16.enabled"].changes_experiment and "Tesla V100" in d["bf16.enabled"].reason


def test_bf16_kept_where_every_device_supports_it(claim_config, tiny_profile):
    config = copy.deepcopy(claim_config)
    config["fp16"]["enabled"] = False
    config["bf16"] = {"enabled": True}
    _, deviations, spec = render_claim(config, tiny_profile, gpu_fingerprint(("RTX 4090", 24)), "claim.json")
    assert spec.dtype == "bf16" and "bf16.enabled" not in by_path(deviations)


def test_a_claim_config_that_is_not_json_or_not_an_object_is_refused_naming_the_file(tmp_path):
    from zerogate.render.claim import read_claim

    broken = tmp_path / "claim.json"
    broken.write_text('{\n  "train_micro_batch_size_per_gpu": 1,,\n}\n')
    with pytest.raises(InputError, match=r"^config/claim.json: line 2: not valid JSON"):
        read_claim(broken, "config/claim.json")
    broken.write_text("[1, 2]\n")
    with pytest.raises(
        InputError, match=r"^config/claim.json: \(top level\): a DeepSpeed config is a JSON object"
    ):
        read_claim(broken, "config/claim.json")
    broken.write_text('{"zero_optimization": {"stage": 3, "overlap_com": true}}\n')
    with pytest.raises(InputError, match=r"^config/claim.json: zero_optimization.overlap_com: unknown key"):
        read_claim(broken, "config/claim.json")


def test_the_key_table_is_deepspeeds_and_once_kept_checks_keys_without_importing_deepspeed(tmp_path):
    import json
    import subprocess
    import sys

    from zerogate.render.ds_keys import cache_file, key_table, table_from_deepspeed

    assert key_table() == json.loads(json.dumps(table_from_deepspeed()))
    kept = cache_file(str(tmp_path))
    assert (
        kept is not None and kept.parent == tmp_path / "zerogate-cache" and kept.name.startswith("deepspeed-")
    )
    # A process whose environment holds the table checks a config's keys without loading DeepSpeed (or torch).
    probe = (
        "import sys; from zerogate.render import ds_keys; "
        "problems = ds_keys.unknown_keys({'zero_optimization': {'stage3_prefetch_bucket_sise': 1}, 'fp16': "
        "{}}); "
        "print(problems); assert 'deepspeed' not in sys.modules and 'torch' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "zero_optimization.stage3_prefetch_bucket_sise" in done.stdout
        and "DeepSpeedZeroConfig" in done.stdout
    )
