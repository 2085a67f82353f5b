"""The plan_model target's parts: the request read from its arguments (one line naming a bad one), the
geometry derived from the box, the suggestions for a host that is too small, and the console answer built
from a real plan."""

import dataclasses
from pathlib import Path

import pytest

from tests.unit.test_ledger import claim_counts, claim_setup
from zerogate.config.machines import load_description
from zerogate.config.plan_request import changed, command, plan_request, read_base
from zerogate.config.run_config import RunConfig
from zerogate.contracts.run import DsConfig
from zerogate.errors import InputError
from zerogate.predict.model_plan import attention_for, overrides, render_request, suggestion_command
from zerogate.predict.plan_answer import answer
from zerogate.predict.planner import plan
from zerogate.predict.step_time import planned_step_time
from zerogate.predict.suggestions import host_changes
from zerogate.units import GIB, parse_bytes

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = "config/machines/claim-rtx5070-rtx4090.yaml"


def _values(**given):
    """A request's arguments as the run configuration holds them: its defaults, then ``given``."""
    keys = (
        "model",
        "box",
        "host_ram",
        "host_cpu",
        "zero",
        "offload",
        "micro_batch",
        "accumulation",
        "seq_len",
    )
    defaults = {k: RunConfig.model_fields[k].default for k in (*keys, "checkpointing", "attention")}
    return {**defaults, **given}


def test_a_shipped_name_a_file_and_a_directory_name_the_same_model(tmp_path):
    by_name = plan_request(_values(model="qwen3-8b", box=CLAIM_BOX), REPO)
    assert by_name.model_config == "config/models/qwen3-8b.json" and by_name.model_name == "qwen3-8b"
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    (folder / "config.json").write_text((REPO / by_name.model_config).read_text())
    by_dir = plan_request(_values(model=str(folder), box=CLAIM_BOX), REPO)
    assert by_dir.model_config == str(folder / "config.json") and by_dir.model_name == "Qwen3-8B"
    by_file = plan_request(_values(model=str(folder / "config.json"), box=CLAIM_BOX), REPO)
    assert by_file.model_name == "Qwen3-8B"


def test_two_requests_differing_in_one_argument_have_their_own_directory():
    first = plan_request(_values(model="qwen3-8b", box=CLAIM_BOX), REPO)
    keys = {
        first.key,
        plan_request(_values(model="gemma-2-9b", box=CLAIM_BOX), REPO).key,
        plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, host_ram="128GiB"), REPO).key,
        plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, offload="optimizer"), REPO).key,
        plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, micro_batch=2), REPO).key,
    }
    assert len(keys) == 5 and first.key.startswith("qwen3-8b/claim-rtx5070-rtx4090/")


@pytest.mark.parametrize(
    ("given", "argument", "problem"),
    [
        ({"model": None}, "model (MODEL)", "required"),
        ({"model": "no-such-model"}, "model (MODEL)", "no shipped model of that name"),
        ({"box": None}, "box (BOX)", "required"),
        ({"box": "config/machines/nothing.yaml"}, "box (BOX)", "no such machine description"),
        ({"host_ram": "128G"}, "host_ram (HOST_RAM)", "unit 'G' is not one of"),
        ({"host_cpu": "AMD EPYC 7743"}, "host_cpu (HOST_CPU)", "not in the host CPU catalogue"),
        ({"zero": 2, "offload": "cpu"}, "offload (OFFLOAD)", "needs zero=3"),
        ({"zero": 0, "offload": "optimizer"}, "offload (OFFLOAD)", "nothing is offloaded"),
        (
            {"seq_len": 40000},
            "seq_len (SEQ_LEN)",
            "exceeds the 32768 positions of config/models/qwen3-8b.json",
        ),
    ],
)
def test_a_bad_argument_is_one_line_naming_it(given, argument, problem):
    values = _values(model="qwen3-8b", box=CLAIM_BOX) | given
    with pytest.raises(InputError) as error:
        plan_request(values, REPO)
    text = str(error.value)
    assert "\n" not in text and text.startswith(f"--config: {argument}: ") and problem in text


def test_host_ram_replaces_a_descriptions_and_names_the_box_after_it():
    request = plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, host_ram="512 GB"), REPO)
    assert request.box.host.ram_total_bytes == 512 * 10**9 == parse_bytes("512GB")
    assert request.box.name == f"claim-rtx5070-rtx4090-host{512 * 10**9 / GIB:g}GiB"
    assert request.box.gpus == load_description(REPO / CLAIM_BOX).gpus


def test_a_command_writes_back_the_arguments_that_are_not_defaults():
    request = plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, micro_batch=2), REPO)
    assert command(request.values) == f"make plan MODEL=qwen3-8b BOX={CLAIM_BOX} MICRO_BATCH=2"
    again = changed(request, offload="nvme", checkpointing=True, host_ram="307GiB")
    assert command(again) == (
        f"make plan MODEL=qwen3-8b BOX={CLAIM_BOX} HOST_RAM=307GiB OFFLOAD=nvme MICRO_BATCH=2 "
        "CHECKPOINTING=true"
    )
    with pytest.raises(ValueError):
        changed(request, nodes=2)


def test_the_global_batch_is_derived_from_the_box_never_inherited():
    base = read_base(REPO)
    assert base.training.train_batch_size is None
    request = plan_request(_values(model="gpt2", box=CLAIM_BOX, micro_batch=3, accumulation=5), REPO)
    ds_config, run_spec = render_request(request, base, "eager")
    gpus = len(request.box.gpus)
    assert run_spec.world_size == gpus == 2
    assert (ds_config["train_micro_batch_size_per_gpu"], ds_config["gradient_accumulation_steps"]) == (3, 5)
    assert ds_config["train_batch_size"] == 3 * 5 * gpus
    assert ds_config["zero_optimization"]["offload_param"]["device"] == "cpu"


def test_each_offload_is_the_deepspeed_override_it_names():
    base = read_base(REPO)
    for offload, optimizer, param in (
        ("none", None, None),
        ("optimizer", "cpu", None),
        ("nvme-optimizer", "nvme", None),
        ("nvme", "nvme", "nvme"),
    ):
        request = plan_request(_values(model="gpt2", box=CLAIM_BOX, offload=offload), REPO)
        found = {o["path"].rsplit(".", 1)[-1]: o["value"]["device"] for o in overrides(request, base)[1:]}
        assert found.get("offload_optimizer") == optimizer and found.get("offload_param") == param


def test_a_host_too_small_gets_changes_that_shrink_the_host_each_with_its_effect():
    box = load_description(REPO / CLAIM_BOX)
    setup = claim_setup()
    changes = host_changes(claim_counts(), setup, box)
    names = [c.change for c in changes]
    assert any("optimizer offload to CPU only" in n for n in names)
    assert any("parameters offloaded to NVMe" in n for n in names)
    assert names[-1].startswith("a host with")
    planned = plan(claim_counts(), setup, box)
    host = next(c for c in planned.checks if c.what == "host RAM")
    assert not host.fits
    more_ram = changes[-1]
    # With that RAM the host fits; what is left failing is the device (the claim's 12 GB card here).
    assert more_ram.settings.host_ram_bytes == host.need_bytes and more_ram.tightest == "device memory"
    nvme = next(c for c in changes if c.settings.nvme_param)
    assert nvme.nvme_need_bytes > 0 and nvme.host_need_bytes < host.need_bytes
    # The device-only changes shrink no host: none of them is offered for the host.
    assert all(c.settings.offload_optimizer for c in changes)
    assert (
        host_changes(
            claim_counts(),
            setup,
            box.model_copy(update={"host": box.host.model_copy(update={"ram_total_bytes": 10**13})}),
        )
        == []
    )


def test_the_console_answer_names_the_failing_check_and_each_change_with_its_command():
    request = plan_request(_values(model="qwen2.5-14b", box=CLAIM_BOX, accumulation=8), REPO)
    # Two RTX 4090s: the devices hold the run, the host (192 GB) does not.
    two_4090 = request.box.model_copy(update={"gpus": [request.box.gpus[1]] * 2})
    planned = plan(claim_counts(), dataclasses.replace(claim_setup(), dtype="fp16"), two_4090)
    planned = planned.model_copy(
        update={
            "host_changes": [
                s.model_copy(update={"command": suggestion_command(request, planned, s)})
                for s in planned.host_changes
            ]
        }
    )
    ds = DsConfig.of(
        {
            "train_batch_size": 16,
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 8,
            "zero_optimization": {"stage": 3},
        },
        "test",
    )
    text = answer(planned, ds)
    assert "answer: DOES NOT FIT (host RAM too small)" in text
    assert "= global batch 16" in text
    assert "largest micro-batch per rank: fits up to none, may fit up to none" in text
    assert "step-time floor" in text and "what would make the host fit:" in text
    assert "predicted optimizer step: " in text and "decided by " in text
    assert "peak used: catalogue: RTX 4090" in text
    assert "host RAM, host (all ranks of the node): needs " in text and ": does not fit, short by " in text
    assert f"make plan MODEL=qwen2.5-14b BOX={CLAIM_BOX} OFFLOAD=nvme ACCUMULATION=8" in text
    assert "HOST_RAM=" in text
    assert "claim" not in text.replace(CLAIM_BOX, "").replace("claim-rtx5070-rtx4090", "")


def test_sdpa_for_a_model_whose_class_has_none_is_one_line_and_auto_picks_eager():
    gemma = plan_request(_values(model="gemma-2-9b", box=CLAIM_BOX), REPO)
    assert attention_for(gemma) == "eager"
    assert attention_for(plan_request(_values(model="qwen3-8b", box=CLAIM_BOX), REPO)) == "sdpa"
    with pytest.raises(InputError, match=r"^--config: attention \(ATTENTION\): .* does not support sdpa"):
        attention_for(plan_request(_values(model="gemma-2-9b", box=CLAIM_BOX, attention="sdpa"), REPO))


def test_a_short_form_is_a_box_of_the_catalogues_cards_and_its_host_ram_names_it():
    box = plan_request(_values(model="qwen3-8b", box="2xRTX3090", host_ram="128GiB"), REPO).box
    assert [g.name for g in box.gpus] == ["NVIDIA GeForce RTX 3090"] * 2
    assert box.host.ram_total_bytes == 128 * GIB and box.name == "2xRTX3090-host128GiB"
    unknown = plan_request(_values(model="qwen3-8b", box="2xRTX3090"), REPO).box
    assert unknown.host.ram_total_bytes is None  # not assumed: the plan says the host is not checked
    with pytest.raises(InputError, match=r"^--config: box \(BOX\): "):
        plan_request(_values(model="qwen3-8b", box="2xRTX9999"), REPO)


def test_a_host_cpu_gives_the_host_memory_from_the_cpu_catalogue_names_the_box_and_prices_cpu_adam():
    bare = plan_request(_values(model="qwen3-8b", box="2xRTX3090"), REPO)
    given = plan_request(_values(model="qwen3-8b", box="2xRTX3090", host_cpu="2x AMD EPYC 7742"), REPO)
    host = given.box.host
    assert host.memory_bandwidth_gbps == pytest.approx(2 * 8 * 3200 * 8 / 1000) and host.numa_nodes == 2
    assert "AMD EPYC 7742" in host.cpu_model and "https://" in host.cpu_model
    assert given.box.name == "2xRTX3090-2x-AMD-EPYC-7742" and given.key != bare.key
    # In place of a description's own figure (the claimed box states 89.6 GB/s).
    claimed = plan_request(_values(model="qwen3-8b", box=CLAIM_BOX, host_cpu="AMD Ryzen 9 5950X"), REPO)
    assert claimed.box.host.memory_bandwidth_gbps == pytest.approx(2 * 3200 * 8 / 1000)
    assert claimed.box.name == "claim-rtx5070-rtx4090-AMD-Ryzen-9-5950X"
    # The offloaded optimizer's update has a figure on the named host, none on the bare box.
    setup = claim_setup()
    adam = {
        name: next(
            t for t in planned_step_time(claim_counts(), setup, box, None).terms if "CPU Adam" in t.name
        )
        for name, box in (("bare", bare.box), ("given", given.box))
    }
    assert adam["bare"].low_s is None and adam["given"].low_s is not None
    assert "AMD EPYC 7742" in adam["given"].source
    assert command(changed(given)) == "make plan MODEL=qwen3-8b BOX=2xRTX3090 HOST_CPU='2x AMD EPYC 7742'"
