"""What would make a run fit, what lowers a device's need, and what a fitting run can trade for time:
changes a user can make (offload, a smaller micro-batch, activation checkpointing, shorter sequences, more
nodes, page-locked host buffers), each checked on the machine with the need it leaves and the optimizer step
it leaves (the step-time ledger on paper, zerogate.predict.step_time)."""

from __future__ import annotations

import dataclasses

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import MemoryCheck, StepTime, SuggestedSettings, Suggestion
from zerogate.predict.activation_figures import Activations
from zerogate.predict.fit import checks, nvme_need
from zerogate.predict.setup import Setup
from zerogate.predict.step_time import planned_step_time
from zerogate.predict.step_time_memory import ranks_on_their_nodes
from zerogate.predict.zero_terms import zerogate_terms
from zerogate.units import format_bytes

# A change in words and the setup it makes.
Change = tuple[str, Setup]
# ZeRO-3 with the optimizer state offloaded to host RAM and the parameters on the devices, in words.
OPTIMIZER_OFFLOAD_ONLY = "optimizer offload to CPU only (the parameters on the devices)"


def micro_batch_one(setup: Setup) -> Change:
    """Micro-batch 1, the accumulation keeping the batch."""
    return (
        f"micro-batch 1 instead of {setup.micro_batch} (accumulation x{setup.micro_batch} keeps the batch)",
        dataclasses.replace(setup, micro_batch=1, accumulation=setup.accumulation * setup.micro_batch),
    )


def shorter_sequence(setup: Setup, shorter: int) -> Change:
    return f"sequence length {shorter} instead of {setup.seq_len}", dataclasses.replace(
        setup, seq_len=shorter
    )


def more_nodes(setup: Setup, factor: int, change: str) -> Change:
    """``factor`` times the ranks on as many more nodes like this one, after ``change`` (words before)."""
    return (
        f"{change}{setup.ranks * factor} ranks ({setup.nodes * factor} nodes like this one)",
        dataclasses.replace(setup, ranks=setup.ranks * factor, nodes=setup.nodes * factor),
    )


def changes_that_may_fit(setup: Setup) -> list[Change]:
    """Changes a user could make, each alone and the strongest combined."""
    options: list[Change] = []
    if setup.scheme != "zero3_offload_optimizer" and not setup.offload_param:
        options.append(("ZeRO-3 with optimizer offload to CPU", setup.with_scheme("zero3_offload_optimizer")))
    if setup.scheme != "zero3_offload_all":
        options.append(
            ("ZeRO-3 with optimizer and parameter offload to CPU", setup.with_scheme("zero3_offload_all"))
        )
    if setup.micro_batch > 1:
        options.append(micro_batch_one(setup))
    if not setup.activation_checkpointing:
        options.append(
            ("activation checkpointing", dataclasses.replace(setup, activation_checkpointing=True))
        )
    for factor in (2, 4, 8):
        if setup.seq_len // factor >= 64:
            options.append(shorter_sequence(setup, setup.seq_len // factor))
    options += [more_nodes(setup, factor, "") for factor in (2, 4, 8)]
    strongest = dataclasses.replace(
        setup.with_scheme("zero3_offload_all"), micro_batch=1, activation_checkpointing=True
    )
    options.append(("all of: full offload, micro-batch 1, activation checkpointing", strongest))
    combined = "all of: full offload, micro-batch 1, activation checkpointing, "
    options += [more_nodes(strongest, factor, combined) for factor in (2, 4, 8)]
    return options


def suggestion(
    change: str,
    setup: Setup,
    variant: Setup,
    result: list[MemoryCheck],
    predicted: StepTime | None = None,
    nvme_bytes: int | None = None,
    host_ram_bytes: int | None = None,
) -> Suggestion:
    """``change`` (``variant`` of ``setup``) with the need it leaves on the tightest of its checks
    (``result``), on the smallest device and on the host, and the optimizer step it leaves (``predicted``,
    the ledger's for ``variant``); ``nvme_bytes``: what it swaps to NVMe, where computed;
    ``host_ram_bytes``: the host RAM the change asks for (the checks made with it)."""
    tightest = min(result, key=lambda c: c.headroom_bytes)
    devices = [c for c in result if c.rank is not None]
    smallest = min(devices, key=lambda c: c.capacity_bytes) if devices else None
    host = next((c for c in result if c.what == "host RAM"), None)
    return Suggestion(
        change=change,
        tightest=tightest.what,
        need_bytes=tightest.need_bytes,
        capacity_bytes=tightest.capacity_bytes,
        # The same change as settings (zerogate.render.overlay writes a runnable profile from them).
        settings=SuggestedSettings(
            nodes=variant.nodes,
            ranks=variant.ranks,
            micro_batch=variant.micro_batch,
            accumulation=variant.accumulation,
            offload_optimizer=variant.offload_optimizer,
            offload_param=variant.offload_param,
            activation_checkpointing=variant.activation_checkpointing,
            seq_len=variant.seq_len if variant.seq_len != setup.seq_len else None,
            nvme_optimizer=variant.nvme_optimizer,
            nvme_param=variant.nvme_param,
            host_ram_bytes=host_ram_bytes,
            pin_memory=None if variant.pin_memory == setup.pin_memory else variant.pin_memory,
            bind_cores=None if variant.bind_cores == setup.bind_cores else variant.bind_cores,
        ),
        fits=all(c.fits for c in result),
        smallest_device_need_bytes=None if smallest is None else smallest.need_bytes,
        host_need_bytes=None if host is None else host.need_bytes,
        nvme_need_bytes=nvme_bytes,
        step_time_low_s=None if predicted is None else predicted.low_s,
        step_time_high_s=None if predicted is None else predicted.high_s,
        step_time_missing=[] if predicted is None else predicted.missing,
    )


def suggestions(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[Suggestion]:
    """The changes that would make the run fit, with the need they leave on the tightest check. Of the
    shorter sequence lengths only the longest that fits is offered."""
    found = []
    shorter_found = False
    for change, variant in changes_that_may_fit(setup):
        if variant.seq_len != setup.seq_len and shorter_found:
            continue
        result = checks(counts, variant, machine, activations)
        if all(c.fits for c in result):
            shorter_found |= variant.seq_len != setup.seq_len
            found.append(
                suggestion(
                    change, setup, variant, result, planned_step_time(counts, variant, machine, activations)
                )
            )
    return found


def changes_that_lower_the_device_need(setup: Setup) -> list[Change]:
    """Activation checkpointing, micro-batch 1 with the accumulation keeping the batch, a sequence of 1/2,
    1/4, 1/8 the length (at least 64), and checkpointing with each shorter sequence."""
    options: list[Change] = []
    checkpointed = dataclasses.replace(setup, activation_checkpointing=True)
    if not setup.activation_checkpointing:
        options.append(("activation checkpointing", checkpointed))
    if setup.micro_batch > 1:
        options.append(micro_batch_one(setup))
    for factor in (2, 4, 8):
        shorter = setup.seq_len // factor
        if shorter >= 64:
            options.append(shorter_sequence(setup, shorter))
            if not setup.activation_checkpointing:
                options.append(
                    (
                        f"activation checkpointing and sequence length {shorter} instead of {setup.seq_len}",
                        dataclasses.replace(checkpointed, seq_len=shorter),
                    )
                )
    return options


def device_changes(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[Suggestion]:
    """The changes a profile expresses that lower a device's need
    (:func:`changes_that_lower_the_device_need`), each with the smallest device's need after it, whether or
    not the run then fits. Empty without GPUs."""
    if not machine.gpus:
        return []
    return [
        suggestion(
            change,
            setup,
            variant,
            checks(counts, variant, machine, activations),
            planned_step_time(counts, variant, machine, activations),
        )
        for change, variant in changes_that_lower_the_device_need(setup)
    ]


def changes_that_lower_the_host_need(setup: Setup) -> list[Change]:
    """ZeRO-3's offloads that keep less in host RAM than ``setup``: the optimizer state alone to the CPU
    (the parameters on the devices), the optimizer state to NVMe (the parameters on the devices), and both
    to NVMe (ZeRO-Infinity); each only where it differs from the run's. None below ZeRO-3 (DeepSpeed
    offloads parameters and to NVMe only there)."""
    if setup.stage != 3:
        return []
    zero3 = dataclasses.replace(setup, stage=3)
    options: list[Change] = [
        (
            OPTIMIZER_OFFLOAD_ONLY,
            dataclasses.replace(zero3, offload_optimizer=True, offload_param=False, nvme_optimizer=False),
        ),
        (
            "optimizer state offloaded to NVMe (the parameters on the devices)",
            dataclasses.replace(
                zero3, offload_optimizer=True, offload_param=False, nvme_optimizer=True, nvme_param=False
            ),
        ),
        (
            "optimizer state and parameters offloaded to NVMe",
            dataclasses.replace(
                zero3, offload_optimizer=True, offload_param=True, nvme_optimizer=True, nvme_param=True
            ),
        ),
    ]
    return [(change, variant) for change, variant in options if variant != setup]


def host_changes(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[Suggestion]:
    """When the host RAM check fails: the offloads that keep less on the host
    (:func:`changes_that_lower_the_host_need`), each with the host, device and NVMe need after it and
    whether the run then fits; and the host RAM the run as planned would take. Empty when the host fits."""
    planned = checks(counts, setup, machine, activations)
    host = next((c for c in planned if c.what == "host RAM"), None)
    if host is None or host.fits:  # fits, or the machine states no RAM (not checked)
        return []
    found = []
    for change, variant in changes_that_lower_the_host_need(setup):
        result = checks(counts, variant, machine, activations)
        nvme = nvme_need(zerogate_terms(counts, variant, activations), variant)
        predicted = planned_step_time(counts, variant, machine, activations)
        found.append(suggestion(change, setup, variant, result, predicted, nvme_bytes=nvme))
    larger = machine.model_copy(
        update={"host": machine.host.model_copy(update={"ram_total_bytes": host.need_bytes})}
    )
    found.append(
        suggestion(
            f"a host with {format_bytes(host.need_bytes)} of RAM (the run as planned)",
            setup,
            setup,
            checks(counts, setup, larger, activations),
            planned_step_time(counts, setup, larger, activations),
            host_ram_bytes=host.need_bytes,
        )
    )
    return found


# ZeRO-3's offload choices a time change may take, with how a change names each.
OFFLOAD_CHOICES = (
    ("zero3", "no offload (the optimizer state and parameters on the devices)"),
    ("zero3_offload_optimizer", OPTIMIZER_OFFLOAD_ONLY),
    ("zero3_offload_all", "optimizer state and parameters offloaded to CPU"),
)


BIND_CORES = (
    "ranks bound to cores (deepspeed --bind_cores_to_rank: each rank on its share of the physical cores, its "
    "memory on their NUMA node)"
)


def changes_that_change_the_step(setup: Setup, machine: MachineDescription) -> list[Change]:
    """Changes to how the run moves its data, not to what it trains: page-locked host buffers on or off where
    the run offloads to a GPU (its host copies then go at the pinned or the pageable PCIe rate:
    zerogate.predict.rates ``PCIE_PINNED``, ``PCIE_PAGEABLE``), and at ZeRO-3 each other offload choice
    to host RAM (``OFFLOAD_CHOICES``). None for a run that offloads to NVMe (its swap buffers are another
    matter) or below ZeRO-3. Where the offloaded run's host has several NUMA nodes, as many ranks on each and
    a memory bandwidth figure: the ranks bound to cores (``BIND_CORES``; the host's memory terms then reach
    every node's bandwidth: zerogate.predict.step_time_memory.host_bandwidths)."""
    options: list[Change] = []
    offloads = setup.offload_optimizer or setup.offload_param
    if offloads and machine.gpus and setup.device_kind != "cpu":
        options.append(
            (
                "page-locked host buffers off (pin_memory false)"
                if setup.pin_memory
                else "page-locked host buffers (pin_memory true)",
                dataclasses.replace(setup, pin_memory=not setup.pin_memory),
            )
        )
        bound = dataclasses.replace(setup, bind_cores=True)
        priced = bool(machine.host.memory_bandwidth_gbps)  # without it the host terms have no figure
        several_nodes = (machine.host.numa_nodes or 1) > 1
        if priced and several_nodes and not setup.bind_cores and ranks_on_their_nodes(bound, machine):
            options.append((BIND_CORES, bound))
    if setup.stage == 3 and not (setup.nvme_optimizer or setup.nvme_param):
        for scheme, change in OFFLOAD_CHOICES:
            variant = setup.with_scheme(scheme)
            if variant != setup:
                options.append((change, variant))
    return options


def time_changes(
    counts: ModelCounts, setup: Setup, machine: MachineDescription, activations: Activations | None = None
) -> list[Suggestion]:
    """Each change of :func:`changes_that_change_the_step` after which the run still fits, with its need and
    the optimizer step the ledger predicts for it on this machine, on paper as the plan's own step: what a
    user of a fitting run can trade."""
    found = []
    for change, variant in changes_that_change_the_step(setup, machine):
        result = checks(counts, variant, machine, activations)
        if all(c.fits for c in result):
            found.append(
                suggestion(
                    change, setup, variant, result, planned_step_time(counts, variant, machine, activations)
                )
            )
    return found
