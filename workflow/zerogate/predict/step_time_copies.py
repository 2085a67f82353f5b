"""The step-time ledger's terms for the copies DeepSpeed makes of the gradients and of the updated partition
around its reductions and its update: "gradient copies around the reductions" and "partition flatten and
16-bit copy". The collectives themselves are zerogate.predict.comms's, an offload's host <-> device copies
step_time_terms.host_copy_terms's, the norm and unscale step_time_update.boundary_terms's.

Work, from DeepSpeed's source (the installed release, with ``contiguous_gradients`` and ``reduce_scatter`` at
their defaults, on: zero/config.py), for one rank: E gradient elements of b bytes (the training dtype), P
the elements of its partition; every copy counts the bytes it reads and writes.

- ZeRO-0 (engine.py ``allreduce_bucket``, ``allreduce_and_copy``: buckets of MEMORY_OPT_ALLREDUCE_SIZE): the
  gradients flattened into the bucket, scaled after the all-reduce (``postscale_gradients``, on by default:
  ``mul_`` by the predivide factor over the world size) and copied back into each gradient: 3 x 2 E b, once
  per optimizer step (the engine reduces at the boundary).
- ZeRO-1 and 2 (stage_1_and_2.py ``reduce_independent_p_g_buckets_and_remove_grads``, ``average_tensor``,
  ``allreduce_and_copy``, ``copy_grads_in_partition``): each gradient copied into the reduction bucket, the
  bucket divided by the world size, each destination's slices flattened for its ``dist.reduce``: 3 x 2 E b;
  the reduced slices copied back on their owner and, without optimizer offload, into the contiguous
  partition buffer: 2 x 2 P b (with the offload the second is the offload's own copy,
  step_time_terms.host_copy_bytes). ZeRO-2 reduces every micro-step, ZeRO-1 once, at the boundary
  (``reduce_ready_partitions_and_remove_grads``).
- ZeRO-3 (stage3.py ``__add_grad_to_ipg_bucket``; ``__avg_scatter_grads`` -> comm/coalesced_collectives.py
  ``reduce_scatter_coalesced``: ``torch.cat`` into a flat buffer, ``div_`` by the world size): 3 x 2 E b every
  micro-step; ``partition_grads`` copies the reduced partition into the fp32 gradient buffer on the first
  micro-step (2 P x 4) and adds it there on each later one (3 P x 4).

At the boundary, below ZeRO-3 (stage_1_and_2.py ``step``): without the offload the partition's gradients
flattened (2 P b) and the updated fp32 partition copied into the 16-bit one (P x (4 + b)); with it, only the
latter, into the 16-bit host buffer before its copy to the device. At ZeRO-3 without the offload
(stage3.py ``_prepare_fp32_grad_for_sub_group``: the fp32 gradients flattened, 2 P x 4;
``_reassign_or_swap_out_partitioned_parameters``: the fp32 partition into the 16-bit one, P x (4 + b)); with
the offload these are the offload's own copies.

Rates: each copy's bytes at its tensor's size (a bucket's, or the partition's) through
step_time_terms.memory_traffic: on the CPU accelerator the micro-benchmarks' operator chains by size, else the
memory's bandwidth (the device's; the host's for the offloaded optimizer's copies and without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_terms import (
    GRAD_ACCUMULATION_BYTES,
    SERIAL,
    Term,
    host_runs_between_products,
    memory_traffic,
    optimizer_partition,
)
from zerogate.render.deepspeed_defaults import ZERO0_ALLREDUCE_ELEMENTS

REDUCTION_COPIES = "gradient copies around the reductions"
BOUNDARY_COPIES = "partition flatten and 16-bit copy"


@dataclass(frozen=True)
class Copies:
    """One rank's copies of one kind per optimizer step: bytes read and written, keyed by the elements of
    the tensors they move, and where they are counted (per micro-step or per boundary)."""

    per: str
    bytes_by_numel: dict[int, float]

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes_by_numel.values())


def _add(into: dict[int, float], numel: int, moved: float) -> None:
    if moved > 0:
        into[max(1, numel)] = into.get(max(1, numel), 0.0) + moved


def reduction_copies(counts: ModelCounts, setup: Setup) -> Copies:
    """The copies around one optimizer step's reductions (module doc), x G where a stage reduces every
    micro-step."""
    e, b, g, n = counts.total, setup.dtype_bytes, setup.accumulation, setup.ranks
    p = int(optimizer_partition(counts, setup))
    moved: dict[int, float] = {}
    if setup.stage == 0:
        _add(moved, min(ZERO0_ALLREDUCE_ELEMENTS, e), 3 * 2 * e * b)
        return Copies(BOUNDARY, moved)
    bucket = min(setup.reduce_bucket, e)
    passes = g if setup.stage >= 2 else 1
    _add(moved, bucket, passes * 3 * 2 * e * b)
    if setup.stage == 3:
        accumulation = GRAD_ACCUMULATION_BYTES
        _add(moved, -(-bucket // n), 2 * p * accumulation + (g - 1) * 3 * p * accumulation)
        return Copies(MICRO_STEP, moved)
    owner = 1 if setup.offload_optimizer else 2
    _add(moved, -(-bucket // n), passes * owner * 2 * p * b)
    return Copies(MICRO_STEP if setup.stage == 2 else BOUNDARY, moved)


def boundary_copies(counts: ModelCounts, setup: Setup) -> Copies:
    """The partition's flatten and its copy into the 16-bit parameters at the boundary (module doc)."""
    b, p = setup.dtype_bytes, int(optimizer_partition(counts, setup))
    moved: dict[int, float] = {}
    if setup.stage == 0 or (setup.stage == 3 and setup.offload_optimizer):
        return Copies(BOUNDARY, moved)
    flattened = GRAD_ACCUMULATION_BYTES if setup.stage == 3 else b
    _add(moved, p, (0 if setup.offload_optimizer else 2 * p * flattened) + p * (GRAD_ACCUMULATION_BYTES + b))
    return Copies(BOUNDARY, moved)


def copy_terms(
    counts: ModelCounts,
    setup: Setup,
    machine: MachineDescription,
    measured: MeasuredRates | None = None,
) -> list[Term]:
    """The two copy terms (module doc), both serial. On a GPU with ZeRO-3's overlap the bucket copies run on
    stage3.py's ``reduce_and_partition_stream`` beside the compute, but on the same device memory the
    compute's elementwise work streams through: assumed serial there too (the interval's upper side)."""
    host_memory = host_runs_between_products(setup, machine)
    terms = []
    for name, copies, on_host, sources in (
        (
            REDUCTION_COPIES,
            reduction_copies(counts, setup),
            host_memory,
            "engine.py allreduce_and_copy; stage_1_and_2.py average_tensor, allreduce_and_copy, "
            "copy_grads_in_partition; stage3.py __add_grad_to_ipg_bucket, partition_grads; "
            "coalesced_collectives.py reduce_scatter_coalesced",
        ),
        (
            BOUNDARY_COPIES,
            boundary_copies(counts, setup),
            host_memory or setup.offload_optimizer,
            "stage_1_and_2.py step; stage3.py _prepare_fp32_grad_for_sub_group, "
            "_reassign_or_swap_out_partitioned_parameters",
        ),
    ):
        if not copies.bytes_by_numel:
            continue
        seconds, rate = memory_traffic(copies.bytes_by_numel, setup, machine, on_host, measured)
        terms.append(
            Term(
                name,
                SERIAL,
                copies.per,
                seconds,
                False,
                f"{copies.total_bytes:.4g} B read and written per optimizer step "
                f"(zerogate.predict.step_time_copies: {sources}); {rate}",
            )
        )
    return terms
