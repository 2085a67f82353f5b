"""Machine descriptions: the shipped claim box, schema errors, and the probe's fingerprint in that shape."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import gpu_fingerprint
from zerogate.config.machines import (
    MachineDescription,
    check,
    from_fingerprint,
    load_description,
    to_fingerprint,
)
from zerogate.config.schemas import json_schema
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def test_claim_box_describes_the_desktop_rtx5070_with_12_gb():
    box = load_description(REPO / "config/machines/claim-rtx5070-rtx4090.yaml")
    names = [g.name for g in box.gpus]
    assert names == ["NVIDIA GeForce RTX 5070", "NVIDIA GeForce RTX 4090"]
    assert box.gpus[0].memory_total_bytes == 12 * 1024**3
    assert box.peer_to_peer is False
    text = (REPO / "config/machines/claim-rtx5070-rtx4090.yaml").read_text()
    assert text.count("https://") >= 3  # sources cited in comments


def test_misspelt_key_in_a_description_names_file_and_key(tmp_path):
    box = yaml.safe_load((REPO / "config/machines/claim-rtx5070-rtx4090.yaml").read_text())
    box["gpus"][1]["memory_totl_bytes"] = 1
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(box))
    with pytest.raises(InputError, match=r"box.yaml: gpus.1.memory_totl_bytes: unknown key"):
        load_description(path)


def test_probed_fingerprint_becomes_a_valid_description(cpu_fingerprint):
    machine = check(from_fingerprint(cpu_fingerprint, "testbox"), "probe")
    assert machine.gpus == [] and machine.host.ram_total_bytes == 24 * 1024**3
    assert to_fingerprint(machine).accelerator.kind == "cpu"


def test_every_shipped_description_follows_the_schema():
    described = sorted((REPO / "config/machines").glob("*.yaml"))
    assert len(described) >= 2
    for path in described:
        machine = load_description(path)
        assert machine.name == path.stem and machine.source == "described"


def _schema_accepts(raw: dict, schema: dict | None = None) -> bool:
    schema = schema or json.loads((REPO / "config/schemas/machine.schema.json").read_text())
    return not list(jsonschema.Draft202012Validator(schema).iter_errors(raw))


def _model_accepts(raw: dict) -> bool:
    try:
        check(raw, "box.yaml")
    except InputError:
        return False
    return True


@pytest.mark.parametrize(
    "change",
    [
        lambda box: box,
        lambda box: box.update(description=None),  # may be left out, not null
        lambda box: box.pop("description"),
        lambda box: box.update(name="-starts-with-a-dash"),
        lambda box: box.update(source="guessed"),
        lambda box: box.update(nodes=0),
        lambda box: box.update(nodes=2.0),  # JSON schema's integers include 2.0
        lambda box: box.update(nodes="2"),
        lambda box: box.update(nodes=True),
        lambda box: box.update(peer_to_peer=None),
        lambda box: box.update(peer_to_peer=1),
        lambda box: box.update(collectives=None),
        lambda box: box["collectives"].pop("backend"),
        lambda box: box["collectives"].update(world=None),
        lambda box: box["collectives"].update(world=0),
        lambda box: box["collectives"].update(route=None),
        lambda box: box["collectives"].update(seconds=-1),
        lambda box: box["collectives"]["kinds"]["all_reduce"].update(
            samples=[{"tensor_bytes": 8, "seconds": 0}]
        ),
        lambda box: box["collectives"]["kinds"]["all_reduce"].update(samples=[{"tensor_bytes": 8}]),
        lambda box: box["collectives"]["kinds"]["all_reduce"].update(latency_s=None),
        lambda box: box["collectives"]["kinds"]["all_reduce"]["latency_s"].update(value=-1.0),
        lambda box: box["collectives"]["kinds"]["all_reduce"]["latency_s"].update(value=0),
        lambda box: box["collectives"]["kinds"].update(anything={}),
        lambda box: box["gpus"][0].update(fp16_supported=None),
        lambda box: box["gpus"][0].update(memory_free_bytes=None),
        lambda box: box["gpus"][0].update(memory_bandwidth_gbps=0),
        lambda box: box["gpus"][0].update(pcie=None),
        lambda box: box["gpus"][0]["pcie"].update(width=None),
        lambda box: box["gpus"][0]["pcie"].update(width=0),
        lambda box: box["gpus"][0].pop("name"),
        lambda box: box.update(gpus=[]),
        lambda box: box["host"].update(pinned_memory_limit_bytes=-1),
        lambda box: box["host"].update(nvme_bytes=None),
        lambda box: box["host"].update(ram_total_bytes=None),
        lambda box: box["host"].update(cpu_peak_tflops_fp32=0.0),
        lambda box: box["host"].update(cpu_model=3),
    ],
)
def test_a_description_is_accepted_exactly_where_the_schema_accepts_it(change):
    box = yaml.safe_load((REPO / "config/machines/claim-rtx5070-rtx4090.yaml").read_text())
    change(box)
    # The model, the committed schema, the one generated from the model and pydantic's own agree.
    generated = json_schema(MachineDescription)
    raw = MachineDescription.model_json_schema()
    assert (
        _model_accepts(box)
        == _schema_accepts(box)
        == _schema_accepts(box, generated)
        == _schema_accepts(box, raw)
    )


def test_a_description_error_names_the_file_and_the_dotted_key(tmp_path):
    box = yaml.safe_load((REPO / "config/machines/claim-rtx5070-rtx4090.yaml").read_text())
    del box["host"]["ram_total_bytes"]
    box["gpus"][0]["pcie"]["width"] = 0
    with pytest.raises(
        InputError, match=r"^box.yaml: gpus.0.pcie.width: Input should be greater than or equal"
    ):
        check(box, "box.yaml")
    del box["gpus"][0]["pcie"]
    with pytest.raises(InputError, match=r"^box.yaml: host: 'ram_total_bytes' is a required property$"):
        check(box, "box.yaml")


def test_a_probed_description_goes_back_to_the_probes_shape(cpu_fingerprint):
    for fingerprint in (cpu_fingerprint, gpu_fingerprint(("NVIDIA GeForce RTX 4090", 24), ("RTX 3090", 24))):
        machine = from_fingerprint(fingerprint, "box")
        assert check(machine, "probe") == machine  # what from_fingerprint gives is a valid description
        back = to_fingerprint(machine)
        assert back.accelerator.kind == fingerprint.accelerator.kind
        assert [d.name for d in back.accelerator.devices] == [d.name for d in fingerprint.accelerator.devices]
        assert back.ram.total_bytes == fingerprint.ram.total_bytes
