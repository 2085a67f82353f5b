"""What a fitting run can trade for time (zerogate.predict.suggestions.time_changes): page-locked host buffers
on or off where it offloads to a GPU, each other ZeRO-3 offload choice that still fits, ranks bound to cores
on a host of several NUMA nodes, each with the step the ledger predicts for it, printed, written as a
profile that plans, and in make plan's answer."""

import dataclasses
from pathlib import Path

import pytest

from tests.unit.helpers import described
from tests.unit.test_floor_comms import cpu_setup, tiny_counts
from tests.unit.test_ledger import claim_counts, claim_setup, rendered
from tests.unit.test_overlay import OVERRIDES, TRAINING
from zerogate.config.machines import load_description
from zerogate.config.profile import check_profile, load_profile_chain, resolve_profile
from zerogate.predict.plan_answer import change_lines
from zerogate.predict.plan_text import summary
from zerogate.predict.planner import plan
from zerogate.predict.step_time import step_time
from zerogate.predict.step_time_text import change_step
from zerogate.predict.suggestions import BIND_CORES, changes_that_change_the_step, time_changes
from zerogate.render.overlay import profile_stem, with_suggestion_profiles

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = load_description(REPO / "config/machines/claim-rtx5070-rtx4090.yaml")
PAGEABLE = "page-locked host buffers off (pin_memory false)"


def two_4090s():
    """The claimed box with its RTX 4090 twice and 2 TiB of host RAM: the claim's 14B run fits it."""
    gpus = CLAIM_BOX.plain()["gpus"]
    return described(CLAIM_BOX, gpus=[gpus[1], gpus[1]], host={"ram_total_bytes": 2**41})


def test_a_fitting_offload_run_on_gpus_is_offered_pageable_buffers_with_the_step_they_leave():
    counts, setup, box = claim_counts(), claim_setup(), two_4090s()
    planned = plan(counts, setup, box)
    assert planned.fits
    changes = {c.change: c for c in planned.time_changes}
    pageable = changes[PAGEABLE]
    assert pageable.settings.pin_memory is False and pageable.fits
    expected = step_time(counts, dataclasses.replace(setup, pin_memory=False), box)
    assert (pageable.step_time_low_s, pageable.step_time_high_s) == (expected.low_s, expected.high_s)
    # The host copies at the pageable PCIe rate: never faster than the pinned run.
    assert pageable.step_time_low_s >= planned.step_time.low_s
    assert pageable.step_time_high_s > planned.step_time.high_s
    # The offload choices that keep the 14B run fitting on two 24 GB cards: none (each needs more device).
    assert set(changes) == {PAGEABLE}
    text = summary(planned)
    assert "changes that keep the run fitting and change its step" in text
    assert f"{PAGEABLE}: {change_step(pageable)}" in text
    # make plan has no argument for it: the answer says where to set it instead of a command.
    answer = "\n".join(change_lines("changes that keep the run fitting and change its step:", [pageable]))
    assert "not a make plan argument" in answer and "pin_memory" in answer and "more nodes" not in answer


def test_pinned_buffers_are_offered_to_a_run_without_them_and_nothing_to_a_run_that_does_not_fit():
    counts, box = claim_counts(), two_4090s()
    pageable = claim_setup(pin_memory=False)
    (change,) = [c for c in time_changes(counts, pageable, box) if c.settings.pin_memory is not None]
    assert change.change == "page-locked host buffers (pin_memory true)" and change.settings.pin_memory
    assert change.step_time_high_s < step_time(counts, pageable, box).high_s
    # On the claimed box the run does not fit: no time changes, the suggestions say what would fit.
    refused = plan(counts, claim_setup(), CLAIM_BOX)
    assert not refused.fits and refused.time_changes == []


def test_on_the_cpu_accelerator_the_offload_choices_and_no_pinned_buffers():
    cpu = described(CLAIM_BOX, gpus=[], nvlink=False, peer_to_peer=False)
    setup = cpu_setup()  # ZeRO-3, both offloads, pinned
    changes = time_changes(tiny_counts(), setup, cpu)
    assert [c.change for c in changes] == [
        "no offload (the optimizer state and parameters on the devices)",
        "optimizer offload to CPU only (the parameters on the devices)",
    ]
    assert all(c.settings.pin_memory is None for c in changes)
    assert [(c.settings.offload_optimizer, c.settings.offload_param) for c in changes] == [
        (False, False),
        (True, False),
    ]
    # Below ZeRO-3, or offloading to NVMe: nothing to trade here.
    assert changes_that_change_the_step(cpu_setup(stage=2, offload_param=False), cpu) == []
    assert changes_that_change_the_step(cpu_setup(nvme_optimizer=True), cpu) == []


def test_a_time_change_is_a_profile_that_plans_with_its_buffers_and_offloads_set(tmp_path):
    counts, box = claim_counts(), two_4090s()
    planned = plan(counts, claim_setup(), box).model_copy(update={"machine": "two RTX 4090"})
    cpu_changes = time_changes(tiny_counts(), cpu_setup(), described(CLAIM_BOX, gpus=[]))
    none = next(c for c in cpu_changes if not c.settings.offload_optimizer)
    base = planned.model_copy(update={"time_changes": [*planned.time_changes, none]})
    written = with_suggestion_profiles(base, tmp_path, "claim-14b", TRAINING, OVERRIDES, None)
    pageable, no_offload = written.time_changes
    assert profile_stem(base, pageable, "claim-14b", TRAINING) == "claim-14b-pageable"
    assert profile_stem(base, no_offload, "claim-14b", TRAINING) == "claim-14b-no-offload"
    assert pageable.command == f"snakemake --cores 1 plan --config profile={pageable.profile_file}"
    # Each written profile loads as a profile (its extends resolves) and renders a DeepSpeed config with the
    # change applied.
    pinned = rendered_zero(pageable.profile_file)
    assert (
        pinned["offload_optimizer"]["pin_memory"] is False and pinned["offload_param"]["pin_memory"] is False
    )
    assert pinned["offload_param"]["device"] == "cpu"
    unloaded = rendered_zero(no_offload.profile_file)
    assert all(
        unloaded.get(key, {}).get("device", "none") == "none"
        for key in ("offload_optimizer", "offload_param")
    )


def rendered_zero(profile_file: str) -> dict:
    chain = load_profile_chain(REPO / "config/profiles", profile_file, "test", "profile")
    typed = check_profile(resolve_profile(chain), chain, REPO)
    ds_config, _ = rendered(typed)
    return ds_config.raw["zero_optimization"]


def two_numa_nodes(ranks_box):
    """``ranks_box`` with a host of two NUMA nodes and 200 GB/s of memory in all."""
    return described(ranks_box, host={"numa_nodes": 2, "memory_bandwidth_gbps": 200.0})


def test_on_two_numa_nodes_binding_the_ranks_to_cores_is_offered_and_lifts_the_one_node_slow_end(tmp_path):
    counts, setup, box = claim_counts(), claim_setup(), two_numa_nodes(two_4090s())
    assert setup.ranks_per_node == 2 and not setup.bind_cores
    planned = plan(counts, setup, box)
    changes = {c.change: c for c in planned.time_changes}
    bound = changes[BIND_CORES]
    assert bound.settings.bind_cores is True and bound.settings.pin_memory is None
    expected = step_time(counts, dataclasses.replace(setup, bind_cores=True), box)
    assert (bound.step_time_low_s, bound.step_time_high_s) == (expected.low_s, expected.high_s)
    # CPU Adam's slow end on every node's bandwidth, not one node's: the step's high end falls, its low
    # end (every node's already) stays.
    unbound = {t.name: t for t in step_time(counts, setup, box).terms}["CPU Adam update"]
    adam = {t.name: t for t in expected.terms}["CPU Adam update"]
    assert adam.high_s * 2 == pytest.approx(unbound.high_s) and adam.low_s == pytest.approx(unbound.low_s)
    assert bound.step_time_high_s < planned.step_time.high_s
    answer = "\n".join(change_lines("changes that keep the run fitting and change its step:", [bound]))
    assert "--bind_cores_to_rank" in answer
    # No profile can express it (the pipeline does not pass the launcher flag): no file, no command.
    written = with_suggestion_profiles(planned, tmp_path, "claim-14b", TRAINING, OVERRIDES, None)
    (kept,) = [c for c in written.time_changes if c.change == BIND_CORES]
    assert kept.profile_file is None and kept.command is None
    every = [*written.suggestions, *written.device_changes, *written.time_changes]
    assert len(list(tmp_path.glob("*.yaml"))) == len(every) - 1
    # One node, or ranks that cannot sit as many on each node: nothing offered.
    assert BIND_CORES not in {c.change for c in time_changes(counts, setup, two_4090s())}
    one_rank = dataclasses.replace(setup, ranks=1)
    assert BIND_CORES not in [change for change, _ in changes_that_change_the_step(one_rank, box)]
    unpriced = described(two_4090s(), host={"numa_nodes": 2, "memory_bandwidth_gbps": None})
    assert BIND_CORES not in [change for change, _ in changes_that_change_the_step(setup, unpriced)]
