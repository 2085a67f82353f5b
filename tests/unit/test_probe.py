"""GPU probe parsing on hand-made NVML values and `nvidia-smi -q -x` XML (no GPU here), host facts."""

import json
from pathlib import Path

from zerogate.config.machines import check, from_fingerprint
from zerogate.contracts.machine import Fingerprint
from zerogate.runtime.gpus import merge_devices, parse_nvidia_smi_xml, parse_nvml
from zerogate.runtime.probe import numa_nodes, pinned_memory_limit, summary

DATA = Path(__file__).resolve().parents[1] / "data" / "probe"


def nvml_sample():
    raw = json.loads((DATA / "nvml_values_rtx5070_rtx4090.json").read_text())
    for device in raw["devices"]:
        device["cuda_compute_capability"] = tuple(device["cuda_compute_capability"])
    return raw


def test_nvml_values_parse_into_device_facts_and_links():
    parsed = parse_nvml(nvml_sample())
    rtx5070, rtx4090 = parsed["devices"]
    assert rtx5070["compute_capability"] == "12.0" and rtx5070["bf16_supported"] and rtx5070["fp16_supported"]
    assert rtx4090["pcie"] == {
        "generation": 1,
        "width": 8,
        "max_generation": 4,
        "max_width": 16,
    }  # idle link downclocks
    assert rtx4090["memory_free_bytes"] == 25313673216
    assert (
        parsed["links"]["peer_to_peer_all_pairs"] is False
    )  # status 2 = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    assert parsed["links"]["nvlink_any"] is False
    assert parsed["cuda_driver_version"] == "12.8"


def test_old_card_has_fp16_but_no_bf16():
    raw = {
        "devices": [
            {
                "name": b"Tesla V100-SXM2-16GB",
                "memory_total": 16 * 1024**3,
                "cuda_compute_capability": (7, 0),
                "nvlink_active": 6,
            }
        ],
        "p2p": {},
    }
    device = parse_nvml(raw)["devices"][0]
    assert (
        device["name"] == "Tesla V100-SXM2-16GB" and device["fp16_supported"] and not device["bf16_supported"]
    )
    assert parse_nvml(raw)["links"]["nvlink_any"] is True


def test_nvidia_smi_xml_gives_the_same_facts():
    parsed = parse_nvidia_smi_xml((DATA / "nvidia_smi_q_x_rtx5070_rtx4090.xml").read_text())
    rtx5070, rtx4090 = parsed["devices"]
    assert rtx5070["name"] == "NVIDIA GeForce RTX 5070" and rtx5070["memory_total_bytes"] == 12227 * 1024**2
    assert rtx5070["pcie"] == {"generation": 5, "width": 8, "max_generation": 5, "max_width": 16}
    assert rtx4090["memory_free_bytes"] == 24141 * 1024**2
    assert parsed["driver_version"] == "570.86.10" and parsed["cuda_driver_version"] == "12.8"


def test_torch_view_completed_by_nvml_becomes_a_valid_machine(cpu_fingerprint):
    torch_devices = [
        {
            "index": 0,
            "name": "NVIDIA GeForce RTX 5070",
            "memory_total_bytes": 12821004288,
            "compute_capability": "12.0",
            "bf16_supported": True,
            "fp16_supported": True,
        }
    ]
    parsed = parse_nvml(nvml_sample())
    merged = merge_devices(torch_devices, parsed)
    assert merged[0]["pcie"]["width"] == 8 and merged[0]["memory_free_bytes"] == 12451840000
    fingerprint = Fingerprint.of(
        {
            **cpu_fingerprint.model_dump(),
            "accelerator": {"kind": "cuda", "count": 1, "devices": merged},
            "links": parsed["links"],
        },
        "the probe",
    )
    machine = check(from_fingerprint(fingerprint, "gpu-box"), "probe")
    assert machine.gpus[0].pcie.generation == 5 and machine.peer_to_peer is False
    assert "PCIe 5 x8" in summary(fingerprint) and "peer-to-peer no" in summary(fingerprint)


def test_host_facts(tmp_path):
    for n in (0, 1):
        (tmp_path / f"node{n}").mkdir()
    (tmp_path / "possible").write_text("0-1")
    assert numa_nodes(str(tmp_path)) == 2
    assert numa_nodes(str(tmp_path / "missing")) is None
    limit = pinned_memory_limit()
    assert limit is None or limit >= 0


def test_deepspeed_op_checks_keep_the_fact_and_leave_the_console_alone(capfd, tmp_path):
    """The async_io check's linker error (`ld: cannot find -laio`) must not reach the console, since the
    probe's rule sends its output to a log: it lands in the log, and the JSON keeps the fact."""
    import logging

    from zerogate.entry import logging_to
    from zerogate.runtime.probe import deepspeed_op_report

    log = tmp_path / "probe_hardware.log"
    capfd.readouterr()
    try:
        with logging_to(str(log)):  # the probe rule's context: Python's streams and logging into the log file
            report = deepspeed_op_report()
    finally:
        logging.basicConfig(force=True)  # let go of the closed log file
    console = capfd.readouterr()
    assert "cannot find" not in console.err + console.out and "collect2" not in console.err + console.out
    assert report is not None and set(report) == {"compatible", "incompatible_reasons"}
    assert report["compatible"]["cpu_adam"] is True
    if report["compatible"]["async_io"]:
        assert "async_io" not in report["incompatible_reasons"]
    else:  # this machine has no libaio: the reason is DeepSpeed's, and the linker's complaint is in the log
        assert "libaio" in report["incompatible_reasons"]["async_io"]
        assert "-laio" in log.read_text()


def test_this_machines_probe_becomes_a_fingerprint_and_a_valid_machine(tmp_path):
    """The probe_hardware rule's path without the timed parts: probe() gives the raw facts, the
    collectives' figures are the planner's, and the Fingerprint reads back from its file."""
    from zerogate.predict.collectives import interpret
    from zerogate.runtime.probe import probe

    found = probe(measure=False)
    fingerprint = Fingerprint.of({**found, "collectives": interpret(found["collectives"])}, "the probe")
    assert Fingerprint.read(fingerprint.write(tmp_path / "hardware.json")) == fingerprint
    assert fingerprint.cores >= 1 and fingerprint.ram.total_bytes > 0
    machine = check(from_fingerprint(fingerprint, "this-box"), "probe")
    assert machine.host.ram_total_bytes == fingerprint.ram.total_bytes
    assert len(machine.gpus) == fingerprint.accelerator.count
    assert summary(fingerprint)
