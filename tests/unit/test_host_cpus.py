"""The host CPU catalogue (config/host_cpus.yaml): lookup by name and sockets, the socket's peak from channels
x rated speed x 8 B, every figure's source, and a published row's host memory taken from it
(zerogate.bench.step_time_rows): every socket's bandwidth and a NUMA node a socket, a stated figure winning;
and the ledger's host memory on several NUMA nodes (zerogate.predict.step_time_memory.memory_bound)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.test_ledger import claim_setup
from zerogate.bench.step_time_predict import predict
from zerogate.bench.step_time_rows import host_line
from zerogate.config.boxes import box_from_text
from zerogate.config.host_cpus import (
    CpuCatalogue,
    HostMemory,
    cpu_catalogue,
    find_cpu,
    host_memory,
    sockets,
    with_host_memory,
)
from zerogate.config.step_times import STEP_TIMES_FILE, read_step_times
from zerogate.model.hf_config import load_config
from zerogate.predict import rates
from zerogate.predict.step_time_memory import memory_bound

REPO = Path(__file__).resolve().parents[2]
TABLE = STEP_TIMES_FILE
ZENFLOW_OFFLOAD = "zenflow-qwen2.5-3b-z2-offopt-2xa100-40g"


@pytest.fixture(scope="module")
def rows():
    return {row.id: row for row in read_step_times(REPO / TABLE, TABLE).rows}


def test_a_cpu_is_found_by_its_name_inside_what_lscpu_prints_and_its_sockets_by_the_count():
    text = "2x AMD EPYC 7742 64-Core Processor, 1TB memory"
    cpu = find_cpu(text)
    assert cpu is not None and cpu.cpu == "AMD EPYC 7742"
    assert sockets(text) == 2 and sockets("AMD EPYC 7742") == 1
    assert cpu.memory.socket_gbps() == pytest.approx(8 * 3200 * 8 / 1000)  # 204.8 GB/s
    assert find_cpu("AMD EPYC 7742X") is None  # a letters-only word after the name is another CPU
    # Intel's lscpu name ends in "CPU @ <clock>": a word for the kind of part, not a variant.
    assert find_cpu("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz").cpu == "Intel Xeon Gold 6248"
    assert find_cpu("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz") is None  # the 6248R is another CPU
    assert find_cpu("Intel Core i9-13900K") is None and find_cpu(None) is None


def test_every_figure_names_a_source_with_a_url_and_a_name_belongs_to_one_cpu():
    raw = yaml.safe_load((REPO / "config/host_cpus.yaml").read_text())
    assert cpu_catalogue().cpus
    broken = {**raw, "sources": {k: v.split("https://")[0] for k, v in raw["sources"].items()}}
    with pytest.raises(ValueError, match="no URL"):
        CpuCatalogue.model_validate(broken)
    unknown = {**raw, "cpus": [{**raw["cpus"][0], "memory": {**raw["cpus"][0]["memory"], "source": "x"}}]}
    with pytest.raises(ValueError, match="'x' is not in sources"):
        CpuCatalogue.model_validate(unknown)
    twice = {**raw, "cpus": [raw["cpus"][0], {**raw["cpus"][0], "cpu": "another"}]}
    with pytest.raises(ValueError, match="is also"):
        CpuCatalogue.model_validate(twice)


def test_a_row_naming_a_known_cpu_states_every_sockets_bandwidth_and_a_numa_node_a_socket(rows):
    zenflow = rows[ZENFLOW_OFFLOAD]
    assert host_memory(zenflow.hardware.host_cpu)[:2] == (pytest.approx(409.6), 2)
    unnamed = zenflow.model_copy(update={"hardware": zenflow.hardware.model_copy(update={"host_cpu": None})})
    assert host_memory(unnamed.hardware.host_cpu) is None
    one = zenflow.model_copy(
        update={"hardware": zenflow.hardware.model_copy(update={"host_cpu": "AMD EPYC 7742"})}
    )
    assert host_memory(one.hardware.host_cpu)[:2] == (pytest.approx(204.8), 1)


def test_a_stated_host_bandwidth_wins_over_the_catalogues():
    box = box_from_text("2xA100-SXM4-40GB", shown="test")
    assert box.host.memory_bandwidth_gbps is None
    given = with_host_memory(box, HostMemory(409.6, 2, ""))
    assert given.host.memory_bandwidth_gbps == 409.6 and given.host.numa_nodes == 2
    stated = with_host_memory(box, HostMemory(100.0, 1, ""))
    assert with_host_memory(stated, HostMemory(409.6, 2, "")).host.memory_bandwidth_gbps == 100.0
    assert with_host_memory(box, None) is box
    replaced = with_host_memory(stated, HostMemory(409.6, 2, ""), replace=True)
    assert replaced.host.memory_bandwidth_gbps == 409.6 and replaced.host.numa_nodes == 2


def test_on_several_numa_nodes_the_slow_end_takes_one_nodes_share():
    box = box_from_text("2xA100-SXM4-40GB", shown="test")
    setup = claim_setup()
    one = with_host_memory(box, HostMemory(409.6, 1, ""))
    two = with_host_memory(box, HostMemory(409.6, 2, ""))
    moved = 1e9 * setup.ranks_per_node
    (low, high), _ = memory_bound(1e9, setup, one, on_host=True)
    assert low == pytest.approx(moved / (409.6e9 * rates.HOST_MEMORY.high))
    assert high == pytest.approx(moved / (409.6e9 * rates.HOST_MEMORY.low))
    (low2, high2), why = memory_bound(1e9, setup, two, on_host=True)
    assert low2 == pytest.approx(low) and high2 == pytest.approx(2 * high)
    assert "one of its 2 NUMA nodes' 204.8 GB/s" in why


def test_the_offloaded_rows_cpu_adam_gets_a_figure_and_one_socket_gives_the_high_end(rows):
    zenflow = rows[ZENFLOW_OFFLOAD]
    config = load_config(REPO / zenflow.model.config)
    prediction = predict(zenflow, config, REPO)
    assert prediction.interval is not None
    assert not any("CPU Adam" in term for term in prediction.missing)
    both = zenflow.model_copy(
        update={"hardware": zenflow.hardware.model_copy(update={"host_cpu": "AMD EPYC 7742"})}
    )
    one_socket = predict(both, config, REPO)  # one socket only: its interval is the two sockets' slow side
    assert one_socket.interval is not None
    assert prediction.interval[1] == pytest.approx(one_socket.interval[1])
    assert prediction.interval[0] < one_socket.interval[0]


def test_the_printed_row_names_its_host_figure_and_source(rows):
    (line,) = host_line(rows[ZENFLOW_OFFLOAD])
    assert "2 socket(s) of AMD EPYC 7742" in line and "204.8 GB/s a socket" in line and "https://" in line
    assert host_line(rows["cai4719-llama2-13b-z3-8xa100-fwdbwd"]) == []


def test_a_row_run_with_its_ranks_bound_to_cores_keeps_every_sockets_bandwidth_at_the_slow_end(rows):
    unbound, bound = rows[ZENFLOW_OFFLOAD], rows["zenflow-qwen2.5-3b-z2-offopt-bindcores-2xa100-40g"]
    assert bound.setup.bind_cores_to_rank and not unbound.setup.bind_cores_to_rank
    config = load_config(REPO / unbound.model.config)
    free, tied = predict(unbound, config, REPO).interval, predict(bound, config, REPO).interval
    assert free is not None and tied is not None
    assert tied[0] == pytest.approx(free[0]) and tied[1] < free[1]
