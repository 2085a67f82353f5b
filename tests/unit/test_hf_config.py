"""Shipped model configs load offline into the right transformers class, with their published shape and
parameter count; bad config files are refused in one line naming the file and the key."""

import json
import re
from pathlib import Path

import pytest

from zerogate.errors import InputError
from zerogate.model.counts import count_parameters
from zerogate.model.hf_config import ModelShape, load_config, shape_of

MODELS = Path(__file__).resolve().parents[2] / "config" / "models"

# Parameter counts as published in each model's Hugging Face safetensors metadata (the count on the model
# page): Qwen/Qwen2.5-14B 14,770,033,664; openai-community/gpt2-xl 1,557,611,200;
# meta-llama/Meta-Llama-3-8B 8,030,261,248; mistralai/Mistral-7B-v0.1 7,241,732,096. The shapes are the
# published config.json values (config/models/README.md).
SHIPPED = {
    "qwen2.5-14b": (
        "Qwen2Config",
        14_770_033_664,
        ModelShape("qwen2", 5120, 48, 40, 8, 128, 13824, 152064, False, 131072),
    ),
    "gpt2-xl": (
        "GPT2Config",
        1_557_611_200,
        ModelShape("gpt2", 1600, 48, 25, 25, 64, 6400, 50257, True, 1024),
    ),
    # GPT-2 small's shape (config/models/README.md): 124,439,808, GPT-2 small's 124 M.
    "gpt2": ("GPT2Config", 124_439_808, ModelShape("gpt2", 768, 12, 12, 12, 64, 3072, 50257, True, 1024)),
    "llama-3-8b": (
        "LlamaConfig",
        8_030_261_248,
        ModelShape("llama", 4096, 32, 32, 8, 128, 14336, 128256, False, 8192),
    ),
    "mistral-7b": (
        "MistralConfig",
        7_241_732_096,
        ModelShape("mistral", 4096, 32, 32, 8, 128, 14336, 32000, False, 32768),
    ),
    # Llama 2's published shapes (config/models/README.md), counted on the meta device.
    "llama-2-7b": (
        "LlamaConfig",
        6_738_415_616,
        ModelShape("llama", 4096, 32, 32, 32, 128, 11008, 32000, False, 4096),
    ),
    "llama-2-13b": (
        "LlamaConfig",
        13_015_864_320,
        ModelShape("llama", 5120, 40, 40, 40, 128, 13824, 32000, False, 4096),
    ),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_loads_with_its_published_shape(name):
    config_class, _, shape = SHIPPED[name]
    config = load_config(MODELS / f"{name}.json")
    assert type(config).__name__ == config_class
    assert shape_of(config) == shape


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_count_parameters_gives_the_published_total_of_every_shipped_config(name):
    # count_parameters builds the model on the meta device: GPT-2's Conv1D weights count like Linear ones,
    # and its tied lm_head/wte weight once.
    _, published, _ = SHIPPED[name]
    assert count_parameters(load_config(MODELS / f"{name}.json")).total == published


def test_a_directory_holding_config_json_loads_like_the_file(tmp_path):
    (tmp_path / "config.json").write_text((MODELS / "gpt2-xl.json").read_text())
    assert load_config(tmp_path).to_dict() == {
        **load_config(MODELS / "gpt2-xl.json").to_dict(),
        "_name_or_path": str(tmp_path / "config.json"),
    }


def test_gpt2_without_n_inner_has_the_4x_mlp_and_with_it_its_own_width():
    from transformers import GPT2Config

    assert shape_of(GPT2Config(n_embd=64, n_head=4)).intermediate_size == 256
    assert shape_of(GPT2Config(n_embd=64, n_head=4, n_inner=100)).intermediate_size == 100


def test_gpt_neo_without_intermediate_size_has_the_4x_mlp():
    shape = shape_of(load_config(MODELS / "gpt-neo-2.7b-vocab50259.json"))
    assert (shape.intermediate_size, shape.hidden_size) == (4 * 2560, 2560)


def test_opt_states_its_mlp_width_as_ffn_dim():
    shape = shape_of(load_config(MODELS / "opt-125m.json"))
    assert (shape.intermediate_size, shape.hidden_size, shape.tied_embeddings) == (3072, 768, True)


def test_the_readme_lists_every_config_in_the_directory_with_a_source():
    readme = (MODELS / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines() if line.startswith("| `")}
    shipped = sorted(f"`{path.name}`" for path in MODELS.glob("*.json"))
    assert set(SHIPPED) <= {name.strip("`").removesuffix(".json") for name in shipped}
    for name in shipped:
        assert name in rows and "https://" in rows[name], name


def test_an_activation_the_readme_names_for_a_config_is_the_one_it_holds():
    """A stand-in's row names the activation its model runs (``activation_function`` `X`): its config holds
    X."""
    readme = (MODELS / "README.md").read_text()
    named = {}
    for line in readme.splitlines():
        found = re.search(r"`activation_function` `([a-z_]+)`", line)
        if line.startswith("| `") and found:
            named[line.split("|")[1].strip().strip("`")] = found.group(1)
    assert len(named) >= 12  # the Megatron stand-ins, minGPT's, min-LLM's and the bf16 example's
    for file, activation in named.items():
        assert json.loads((MODELS / file).read_text())["activation_function"] == activation, file


# The counts config/models/README.md states for the configs the published setups use (no published total
# is checked for them: the README states the meta-device count).
PUBLISHED_SETUP_COUNTS = {
    "deepseek-math-7b": 6_910_365_696,
    "qwen2.5-32b": 32_763_876_352,
    "deepseek-r1-distill-llama-70b": 70_553_706_496,
    # The plan_model examples (docs/planning.md).
    "qwen3-8b": 8_190_735_360,
    "gemma-2-9b": 9_241_705_984,
    # The published step times (config/published_setups/step_times.yaml).
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-1.5b": 1_543_714_304,
    "opt-1.3b": 1_315_758_080,
    "gpt2-12b-colossalai-lightning": 12_292_845_568,
    "gpt2-18b-colossalai-lightning": 18_334_240_768,
    "gpt-6.86b-bf16-master-example": 6_857_965_568,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_SETUP_COUNTS))
def test_the_published_setup_configs_count_what_the_readme_states(name):
    total = PUBLISHED_SETUP_COUNTS[name]
    assert f"{total:,}" in " ".join((MODELS / "README.md").read_text().split())
    assert count_parameters(load_config(MODELS / f"{name}.json")).total == total


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, key, problem",
    [
        ('{"hidden_size": 64}', "model_type", "missing"),
        ('{"model_type": "no-such-architecture"}', "model_type", "not an architecture of transformers"),
        ('{"model_type": "clip"}', "model_type", "no causal language model"),
        ('{"model_type": "llama", "hidden_size": "wide"}', "hidden_size", "transformers rejects it"),
        (
            '{"model_type": "qwen2", "num_hidden_layers": 2, "layer_types": ["full_attention"]}',
            "num_hidden_layers",
            "transformers rejects it",
        ),
        ('{"model_type": ', "", "not JSON"),
        ("[1, 2]", "", "not a JSON object"),
    ],
)
def test_bad_config_files_are_refused_in_one_line_naming_file_and_key(tmp_path, text, key, problem):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as raised:
        load_config(path)
    assert raised.value.file == str(path)
    assert raised.value.key == key
    assert problem in raised.value.problem
    assert "\n" not in str(raised.value)


def test_a_missing_file_is_refused_naming_it(tmp_path):
    with pytest.raises(InputError, match="no such file") as raised:
        load_config(tmp_path / "absent.json")
    assert raised.value.file == str(tmp_path / "absent.json")
    with pytest.raises(InputError) as raised:
        load_config(tmp_path)  # a directory without config.json
    assert raised.value.file == str(tmp_path / "config.json")
