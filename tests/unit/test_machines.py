"""Machine descriptions: the shipped claim box, schema errors, and the probe's fingerprint in that shape."""

from pathlib import Path

import pytest
import yaml

from zerogate.config.machines import check, from_fingerprint, load_description, to_fingerprint
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def test_claim_box_describes_the_desktop_rtx5070_with_12_gb():
    box = load_description(REPO / "config/machines/claim-rtx5070-rtx4090.yaml")
    names = [g["name"] for g in box["gpus"]]
    assert names == ["NVIDIA GeForce RTX 5070", "NVIDIA GeForce RTX 4090"]
    assert box["gpus"][0]["memory_total_bytes"] == 12 * 1024**3
    assert box["peer_to_peer"] is False
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
    assert machine["gpus"] == [] and machine["host"]["ram_total_bytes"] == 24 * 1024**3
    assert to_fingerprint(machine).accelerator.kind == "cpu"


def test_every_shipped_description_follows_the_schema():
    described = sorted((REPO / "config/machines").glob("*.yaml"))
    assert len(described) >= 2
    for path in described:
        machine = load_description(path)
        assert machine["name"] == path.stem and machine["source"] == "described"
