"""The card catalogue (config/cards.yaml): lookup by the most specific name, every figure's source, the short
form of a box, and a machine description's stated peak winning over the catalogue in the floor."""

from pathlib import Path

import jsonschema
import pytest
import yaml

from zerogate import hardware
from zerogate.config.boxes import box_from_text
from zerogate.config.card_figures import gpu_bandwidth, gpu_peak
from zerogate.config.cards import Catalogue, catalogue, find
from zerogate.config.machines import MachineDescription, check, load_description
from zerogate.config.schemas import json_schema
from zerogate.errors import InputError

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"


@pytest.mark.parametrize(
    ("reported", "card"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090 24GB", "RTX 4090"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("RTX3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 5070", "RTX 5070"),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL (stated as 96G)", "H100 NVL"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("AMD Instinct MI250X / MI250", "MI250X (one GCD)"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_a_reported_name_finds_its_card(reported, card):
    found = find(reported)
    assert found is not None and found.card == card


VARIANTS = ["NVIDIA GeForce RTX 5070 Ti", "NVIDIA GeForce RTX 4090 D", "NVIDIA L40", "Some GPU", ""]


@pytest.mark.parametrize("reported", VARIANTS)
def test_a_variant_not_listed_is_not_its_base_card(reported):
    assert find(reported) is None
    assert hardware.peak(reported, "fp16") is None


def test_the_longest_name_wins_and_a_variant_word_stops_a_shorter_name():
    cards = Catalogue.model_validate(
        {
            "sources": {"s": "a datasheet: https://example.org/x"},
            "cards": [_card("Base", ["Card 10"]), _card("Base G", ["Card 10G"]), _card("Big", ["Card 100"])],
        }
    )
    assert find("Card 10G", cards).card == "Base G"  # "10 g": "g" names a variant of "Card 10"
    assert find("Vendor Card 10 24GB", cards).card == "Base"  # a number after the name is no variant
    assert find("Card 100", cards).card == "Big"  # "100" is not "10"
    assert find("Card 10 Ti", cards) is None
    assert find("Card 10 GPU", cards).card == "Base"  # a word for the kind of part is no variant


def _card(name, names):
    cited = {"source": "s"}
    return {
        "card": name,
        "vendor": "nvidia",
        "names": names,
        "memory": {"bytes": 1, **cited},
        "peaks": {"fp16": {"tflops": 1.0, "accumulate": "fp32", **cited}},
        "memory_bandwidth": {"gbps": 1.0, **cited},
        "host_link": {"generation": 4, "width": 16, **cited},
        "peer_to_peer": {"works": False, "over": "none", **cited},
    }


def test_every_figure_names_a_source_with_a_url_and_no_name_is_two_cards():
    cards = catalogue()
    assert len(cards.cards) >= 10
    for card in cards.cards:
        for what, figure in card.cited():
            assert "https://" in cards.source_text(figure), (card.card, what)
    with pytest.raises(ValueError, match="not in sources"):
        Catalogue.model_validate({"sources": {}, "cards": [_card("A", ["A"])]})
    with pytest.raises(ValueError, match="also"):
        Catalogue.model_validate(
            {"sources": {"s": "x https://e.org"}, "cards": [_card("A", ["X 1"]), _card("B", ["x-1"])]}
        )


def test_the_claimed_box_keeps_its_peaks():
    assert hardware.peak_flops("NVIDIA GeForce RTX 4090", "fp16") == 330.3e12
    assert hardware.peak_flops("NVIDIA GeForce RTX 4090", "bf16") == 165.2e12
    assert hardware.peak_flops("NVIDIA GeForce RTX 5070", "bf16") == 123.5e12
    assert hardware.peak_flops("NVIDIA GeForce RTX 5070", "fp32") == 30.9e12


def test_a_stated_peak_wins_over_the_catalogue_and_an_unknown_card_is_named():
    box = load_description(CLAIM_BOX)
    assert box.file == str(CLAIM_BOX)
    used = gpu_peak(box, box.gpus[1], "fp16")
    assert used.tflops == 330.3 and used.source.startswith("catalogue: RTX 4090 (NVIDIA Ada")
    raw = yaml.safe_load(CLAIM_BOX.read_text())
    raw["gpus"][1]["peaks"] = {"fp16": {"tflops": 300.0, "source": "measured by us"}}
    raw["gpus"][0]["name"] = "NVIDIA GeForce RTX 9999"
    stated = check(raw, "mine.yaml")
    used = gpu_peak(stated, stated.gpus[1], "fp16")
    assert used.tflops == 300.0 and "stated in" in used.source and "measured by us" in used.source
    missing = gpu_peak(stated, stated.gpus[0], "fp16")
    assert missing.tflops is None and "NVIDIA GeForce RTX 9999" in missing.source
    assert gpu_bandwidth(stated, stated.gpus[1]).value == 1008  # stated in the description
    raw["gpus"][1].pop("memory_bandwidth_gbps")
    raw["gpus"][0].pop("memory_bandwidth_gbps")
    unstated = check(raw, "mine.yaml")
    assert gpu_bandwidth(unstated, unstated.gpus[1]).source.startswith("catalogue: RTX 4090")
    assert gpu_bandwidth(unstated, unstated.gpus[0]).value is None


def test_short_forms_build_boxes_from_the_catalogue():
    two = box_from_text("2xRTX3090", 128 * 2**30)
    assert [g.name for g in two.gpus] == ["NVIDIA GeForce RTX 3090"] * 2
    assert two.gpus[0].memory_total_bytes == 24 * 2**30 and two.host.ram_total_bytes == 128 * 2**30
    assert two.peer_to_peer is False and two.nvlink is False
    assert two.collectives.route.startswith("through host memory") and two.collectives.kinds == {}
    bridged = box_from_text("2xRTX3090", None, nvlink_bridge=True)
    assert bridged.nvlink and bridged.peer_to_peer and bridged.host.ram_total_bytes is None
    assert bridged.collectives.kinds["all_reduce"].bandwidth_gbps.value == pytest.approx(112.5 / 2)
    four = box_from_text("4xA100-SXM4-40GB", 512 * 2**30)
    assert len(four.gpus) == 4 and four.nvlink and four.gpus[0].memory_total_bytes == 40 * 2**30
    assert four.collectives.kinds["all_gather"].bandwidth_gbps.value == 300
    assert find(box_from_text("8xH100").gpus[0].name).card == "H100 SXM5"
    assert box_from_text("1xV100-32GB").gpus[0].bf16_supported is False
    amd = box_from_text("8xMI300X")
    assert amd.collectives.route == "Infinity Fabric (RCCL)" and amd.nvlink is False and amd.peer_to_peer
    unknown_ram = box_from_text("2xRTX3090")
    assert check(unknown_ram.plain(), "box.yaml") == unknown_ram  # as its YAML file holds it, null RAM kept
    assert jsonschema.Draft202012Validator(json_schema(MachineDescription)).is_valid(unknown_ram.plain())
    one = box_from_text("RTX4090")
    assert len(one.gpus) == 1 and one.collectives is None and one.peer_to_peer is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2xRTX3080", r"'RTX3080' is not in the card catalogue .*nearest: .*RTX3090"),
        ("4xA100", r"'A100' is not in the card catalogue .*nearest: .*A100"),
        ("0xRTX4090", "at least 1"),
        ("2x", "not a box's short form"),
    ],
)
def test_a_bad_short_form_is_one_line(text, message):
    with pytest.raises(InputError, match=message) as error:
        box_from_text(text, shown="--config box")
    assert "\n" not in str(error.value) and str(error.value).startswith("--config box: ")


def test_a_box_takes_the_catalogues_latency_for_its_route_and_rank_count_or_none():
    eight = box_from_text("8xA100-SXM4-80GB").collectives.kinds["all_gather"].latency_s
    # NVIDIA/nccl-tests#123 (DGX-A100): a 7-step ring call lies between its 6-step and its 14-step calls.
    assert (eight.value, eight.high) == pytest.approx((16.88e-6, 33.7e-6))
    assert eight.basis == "published" and "https://github.com/NVIDIA/nccl-tests/issues/123" in eight.source
    four = box_from_text("4xA100-SXM4-40GB").collectives.kinds["reduce_scatter"].latency_s
    assert (four.value, four.high) == pytest.approx((10e-6, 16.88e-6))
    # Nobody measured two A100s (a latency grows with the ranks), an H100's NVLink or A100s over PCIe.
    assert box_from_text("2xA100-SXM4-40GB").collectives.kinds["all_gather"].latency_s is None
    assert box_from_text("8xH100").collectives.kinds["all_gather"].latency_s is None
    pcie = box_from_text("8xA100-PCIE-40GB").collectives
    assert pcie.route == "peer-to-peer over PCIe" and pcie.kinds == {}
    card = _card("A", ["A"])
    backwards = {"route": "NVLink", "ranks": 8, "low_us": 9.0, "high_us": 5.0, "source": "s"}
    card["collective_latency"] = [backwards]
    with pytest.raises(ValueError, match="below low_us"):
        Catalogue.model_validate({"sources": {"s": "x https://e.org"}, "cards": [card]})
