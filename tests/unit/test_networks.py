"""The network between nodes: read from a source's words (zerogate.config.networks), described in a machine
description, and taken by the collectives across nodes (zerogate.predict.floor.across_nodes,
zerogate.predict.nccl_latency across nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_step_time import qwen3_8b, zero3_setup
from zerogate.config.machines import check, load_description
from zerogate.config.networks import network_from_text
from zerogate.errors import InputError
from zerogate.predict.floor import collective_figures, floor
from zerogate.predict.nccl_latency import modelled_latency
from zerogate.predict.step_time import step_time

REPO = Path(__file__).resolve().parents[2]
NVLINK_BOX = REPO / "tests/data/machines/a100-sxm4-40gb-nvlink-x4.yaml"


@pytest.mark.parametrize(
    "words, low, high",
    [
        ("8 x 200 Gb/s HDR InfiniBand", None, 200.0),  # eight adapters of 25 GB/s
        ("2x NDR 400G", None, 100.0),  # the count before the generation
        ("InfiniBand HDR per GPU", None, 100.0),  # the generation's rate, one adapter a GPU (4 a node)
        ("800 Gbps per node", None, 100.0),  # the node's rate
        ("25 GB/s", 25.0, 100.0),  # bytes; the count not given: one adapter to one a GPU
        ("IB EDR", 12.5, 50.0),
    ],
)
def test_a_networks_words_give_one_nodes_adapters_in_bytes_a_second(words, low, high):
    network = network_from_text(words, 4, "a row")
    assert network is not None and network.kind == words
    assert (network.bandwidth_gbps.low, network.bandwidth_gbps.value) == pytest.approx((low, high))
    assert words in network.bandwidth_gbps.source


def test_words_without_a_rate_describe_no_network():
    assert network_from_text("Ethernet", 8, "a row") is None
    assert network_from_text(None, 8, "a row") is None


def two_nodes(network: dict | None):
    plain = load_description(NVLINK_BOX).plain()
    plain["nodes"] = 2
    if network is not None:
        plain["network"] = network
    return check(plain, "two nodes")


HDR = {
    "kind": "4 x 200 Gb/s HDR InfiniBand",
    "bandwidth_gbps": {"value": 100.0, "basis": "published", "source": "a test's box"},
}


def test_across_nodes_a_ring_runs_at_the_slower_of_the_gpus_link_and_the_network():
    figure = collective_figures(two_nodes(HDR), "all_gather").bandwidth_gbps
    assert figure.value == 100.0 and figure.basis == "published" and "ncclTopoTuneModel" in figure.source
    # A network faster than NVLink's 300 GB/s a direction leaves the GPUs' link deciding.
    fast = {**HDR, "bandwidth_gbps": {**HDR["bandwidth_gbps"], "value": 800.0}}
    assert collective_figures(two_nodes(fast), "all_gather").bandwidth_gbps.value == 300.0
    # An interval (the adapters' count not known) keeps its slow end.
    unsure = {**HDR, "bandwidth_gbps": {**HDR["bandwidth_gbps"], "value": 200.0, "low": 25.0}}
    spread = collective_figures(two_nodes(unsure), "all_gather").bandwidth_gbps
    assert (spread.low, spread.value) == (25.0, 200.0)


def test_without_a_network_the_terms_across_nodes_have_no_figure_and_with_one_they_do():
    counts, setup = qwen3_8b(), zero3_setup(nodes=2, ranks=8)
    bare = step_time(counts, setup, two_nodes(None))
    assert any("across nodes" in m for m in bare.missing)
    described = step_time(counts, setup, two_nodes(HDR))
    assert not any("across nodes" in m or "latency" in m for m in described.missing)
    gathers = {t.name: t for t in described.terms}["all-gathers per micro-step"]
    assert "ncclTopoTuneModel" in gathers.source and "over 2 nodes" in gathers.source and gathers.low_s > 0
    # The floor stays below the ledger's lowest step across nodes too.
    assert floor(counts, setup, two_nodes(HDR)).optimizer_step_floor_s < described.low_s


def test_a_network_without_bandwidth_is_refused_naming_the_key():
    with pytest.raises(InputError, match="network"):
        two_nodes({**HDR, "bandwidth_gbps": {**HDR["bandwidth_gbps"], "value": 0.0}})


def test_nccls_latency_across_nodes_is_its_tuners_ring_with_the_networks_hops():
    """tuning.cc by hand: base + (steps - network steps) x max(hop, the host's overhead) + network steps x the
    NET row's hop; LL with Intel's 1 us overhead the low end, Simple with AMD's 2 us x 3 the high end."""
    ring = modelled_latency("all_reduce", 16, nvlink=True, nodes=2)
    low = 6.6 + 28 * max(0.6, 1.0) + 2 * 2.7
    high = 8.4 + 28 * max(3.4, 6.0) + 2 * 14.0
    assert (ring.value, ring.high) == pytest.approx((low * 1e-6, high * 1e-6))
    # One rank a node: the Tree's network hop.
    one = modelled_latency("all_gather", 2, nvlink=False, nodes=2)
    assert (one.value, one.high) == pytest.approx(((6.6 + 5.0) * 1e-6, (8.4 + 14.0) * 1e-6))
    assert "over 2 nodes" in ring.source and "net_ib/init.cc" in ring.source
