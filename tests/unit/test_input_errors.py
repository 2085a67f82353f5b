"""Bad input found while the workflow loads, before any job: a machine description, a global batch the
described machine's ranks cannot make, an attention implementation the model's architecture does not
support. Each is one line naming the file where the key is set and the key; dry runs included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from zerogate.analysis.log_gates import judge_log_file
from zerogate.config.machines import described_machine
from zerogate.config.model_data import ATTENTIONS, SHAPE_ARCHITECTURES
from zerogate.config.profile import check_profile, file_defining, load_profile_chain, resolve_profile
from zerogate.errors import InputError
from zerogate.model import attention
from zerogate.render.world import check_described_world
from zerogate.report.log_page import log_verdicts_text

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "config" / "profiles"
CLAIMED_BOX = REPO / "config" / "machines" / "claim-rtx5070-rtx4090.yaml"
DATA = Path(__file__).resolve().parents[1] / "data"
# google/gemma-2-9b's published config.json (https://huggingface.co/google/gemma-2-9b/blob/main/config.json),
# the keys transformers reads.
GEMMA_2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "vocab_size": 256000,
}


def described_box(tmp_path: Path, gpus: int = 2, **first_gpu) -> Path:
    """The claimed box's description with ``gpus`` copies of its RTX 4090 and ``first_gpu``'s keys on the
    first, written under ``tmp_path``."""
    box = yaml.safe_load(CLAIMED_BOX.read_text())
    box["gpus"] = [dict(box["gpus"][1]) for _ in range(gpus)]
    box["gpus"][0].update(first_gpu)
    box.pop("collectives")
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(box))
    return path


def profile_settings(path_or_name: str):
    """A profile as the workflow loads it: its chain, resolved, typed and checked (check_profile)."""
    chain = load_profile_chain(PROFILES, path_or_name, "config/config.yaml", "profile")
    return chain, check_profile(resolve_profile(chain), chain, REPO)


# ---- machine descriptions ----------------------------------------------------------------------------------


def test_a_gpu_memory_written_as_text_names_the_description_and_the_key(tmp_path):
    box = described_box(tmp_path, memory_total_bytes="24GB")
    with pytest.raises(InputError) as error:
        described_machine(str(box), "--config", REPO)
    assert str(error.value) == (
        f"{box}: gpus.0.memory_total_bytes: '24GB' is not a whole number of bytes (24 GiB is 25769803776)"
    )


def test_a_misspelt_key_names_the_description_and_the_key(tmp_path):
    box = described_box(tmp_path, memroy_bandwidth_gbps=936)
    with pytest.raises(InputError) as error:
        described_machine(str(box), "--config", REPO)
    assert (
        str(error.value) == f"{box}: gpus.0.memroy_bandwidth_gbps: unknown key (not in the schema; misspelt?)"
    )


def test_a_missing_description_names_where_it_was_given():
    with pytest.raises(InputError) as error:
        described_machine("config/machines/none.yaml", "--config", REPO)
    assert str(error.value) == "--config: machine_description: no such file: config/machines/none.yaml"
    assert (
        described_machine(str(CLAIMED_BOX.relative_to(REPO)), "--config", REPO).name
        == "claim-rtx5070-rtx4090"
    )


# ---- the global batch against the described ranks -------------------------------------------------------


def test_a_batch_the_ranks_cannot_make_names_the_ancestor_that_sets_it(tmp_path):
    # The user's profile sets nothing of the batch: claim-14b, two files up its chain, sets train_batch_size.
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: claim-14b\ndescription: the claim's run on four cards\n")
    chain, settings = profile_settings(str(mine))
    batch_file = str(file_defining(chain, ["training", "train_batch_size"]))
    assert batch_file == str(PROFILES / "claim-14b.yaml")
    four = described_machine(str(described_box(tmp_path, gpus=4)), "--config", REPO)
    with pytest.raises(InputError) as error:
        check_described_world(settings.training.run, four, None, batch_file)
    assert str(error.value) == (
        f"{PROFILES / 'claim-14b.yaml'}: training.train_batch_size: 16 != micro_batch_per_rank 1 x "
        "gradient_accumulation_steps 8 x 4 ranks"
    )
    two = described_machine(str(CLAIMED_BOX), "--config", REPO)
    check_described_world(settings.training.run, two, None, batch_file)  # the claim's 1 x 8 x 2 = 16


# ---- attention ---------------------------------------------------------------------------------------------


def test_every_shape_only_family_supports_every_attention_a_profile_may_choose():
    # The profile load does not ask transformers about these (zerogate.model.attention.check_model_attention).
    assert all(attention.supports(family, choice) for family in SHAPE_ARCHITECTURES for choice in ATTENTIONS)


def test_the_source_reading_agrees_with_the_imported_class():
    for model_type, expected in (("gemma2", False), ("qwen3", True)):
        name = attention.causal_lm_class(model_type)
        module = attention._class_file(model_type, name)
        assert attention.declared(module, name, "_supports_sdpa") is expected
        assert attention._imported_class(model_type, name)._supports_sdpa is expected


def test_gemma2_with_sdpa_names_the_profile_that_sets_attention(tmp_path):
    config = tmp_path / "gemma-2-9b.json"
    config.write_text(json.dumps(GEMMA_2_9B))
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: claim-gpt2-xl\nmodel:\n  config: {config}\n")
    with pytest.raises(InputError) as error:
        profile_settings(str(mine))
    import transformers  # the installed version, in the expected line

    assert str(error.value) == (
        f"{PROFILES / 'claim-gpt2-xl.yaml'}: model.attention: 'sdpa' is not supported by Gemma2ForCausalLM "
        f"(model.config {config}) in transformers {transformers.__version__} "
        "(Gemma2ForCausalLM._supports_sdpa is False): use eager"
    )
    mine.write_text(f"extends: claim-gpt2-xl\nmodel:\n  config: {config}\n  attention: eager\n")
    assert profile_settings(str(mine))[1].model.architecture == "gemma2"


# ---- judge_log's console -----------------------------------------------------------------------------------


def test_judge_log_prints_each_judged_gate_and_the_failed_ranks():
    gates = profile_settings("cpu-tiny")[1].gates
    killed = DATA / "deepspeed_0.19.8_cpu_fp32_rank1_killed.log"
    lines = log_verdicts_text(judge_log_file(killed, "k", gates, 2), "results/logs/k/log_summary.json")
    lines = lines.splitlines()
    assert (
        lines[0] == f"{killed}: 1 PASS, 1 FAIL, 9 NOT MEASURED of 11 gates (results/logs/k/log_summary.json)"
    )
    assert "  FAIL  ranks_completed: 2 count, needs == 0" in lines
    assert "  PASS  zero_nonfinite_fatal_loss_scale_aborts: 0 count, needs == 0" in lines
    assert lines[-2].startswith("  NOT MEASURED: optimizer_step_time, ")
    assert lines[-1] == "  failed ranks: 0, 1 (rank 0: traceback (line 151); rank 1: exit (line 156))"


# ---- dry runs ----------------------------------------------------------------------------------------------


def test_each_error_stops_a_dry_run_with_one_line_and_no_job(tmp_path):
    bad_box = described_box(tmp_path, memory_total_bytes="24GB")
    four = tmp_path / "four" / "box.yaml"
    four.parent.mkdir()
    four.write_text(described_box(tmp_path / "four", gpus=4).read_text())
    gemma = tmp_path / "gemma-2-9b.json"
    gemma.write_text(json.dumps(GEMMA_2_9B))
    (tmp_path / "gemma.yaml").write_text(f"extends: claim-gpt2-xl\nmodel:\n  config: {gemma}\n")
    cases = {
        "box": (
            ["profile=claim-14b", f"machine_description={bad_box}"],
            f"{bad_box}: gpus.0.memory_total_bytes: '24GB' is not a whole number of bytes (24 GiB is "
            "25769803776)",
        ),
        "batch": (
            ["profile=claim-14b", f"machine_description={four}"],
            "config/profiles/claim-14b.yaml: training.train_batch_size: 16 != micro_batch_per_rank 1 x "
            "gradient_accumulation_steps 8 x 4 ranks",
        ),
        "gemma": (
            [f"profile={tmp_path / 'gemma.yaml'}", f"machine_description={CLAIMED_BOX.relative_to(REPO)}"],
            "config/profiles/claim-gpt2-xl.yaml: model.attention: 'sdpa' is not supported by "
            "Gemma2ForCausalLM",
        ),
    }
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    started = {
        case: subprocess.Popen(
            [sys.executable, "-m", "snakemake", "-n", "--nolock", "--cores", "1", "plan", "--config", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, (args, _) in cases.items()
    }
    for case, process in started.items():
        stdout, stderr = process.communicate(timeout=300)
        errors = [line for line in stderr.splitlines() if line.startswith("zerogate: error: ")]
        assert process.returncode != 0 and len(errors) == 1, (case, stderr[-2000:])
        assert errors[0].startswith(f"zerogate: error: {cases[case][1]}"), (case, errors)
        assert "Traceback" not in stderr and "Select jobs" not in stdout + stderr, case
    # No job ran: nothing was written where the plans would go (results/<profile>/<machine>/).
    assert not (REPO / "results" / "claim-14b" / "box").exists()
    assert not (REPO / "results" / "gemma").exists()
