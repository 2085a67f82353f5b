"""The step-time ledger's terms for the copies DeepSpeed makes of the gradients and of the updated partition
around its reductions and its update: "gradient copies around the reductions" and "partition flatten and
16-bit copy". The collectives themselves are zerogate.predict.comms's, an offload's host <-> device copies
step_time_terms.host_copy_terms's, the norm and unscale step_time_update.boundary_terms's.

Work, from DeepSpeed's source (the installed release, with ``contiguous_gradients`` and ``reduce_scatter`` at
their defaults, on: zero/config.py), for one rank: E gradient elements of b bytes (the training dtype), P
the elements of its partition; every copy counts the bytes it reads and writes, and is written fresh (into a
tensor it allocates) or into a resident buffer (zerogate.predict.step_time_memory.Traffic).

- ZeRO-0 (engine.py ``allreduce_bucket``, ``allreduce_and_copy``: buckets of MEMORY_OPT_ALLREDUCE_SIZE): the
  gradients flattened into the bucket (fresh, 2 E b), scaled after the all-reduce (``postscale_gradients``,
  on by default: ``mul_`` by the predivide factor over the world size, in place) and copied back into each
  gradient (``copy_``): 2 E b fresh and 2 x 2 E b resident, once per optimizer step (the engine reduces at
  the boundary).
- ZeRO-1 and 2 (stage_1_and_2.py ``reduce_independent_p_g_buckets_and_remove_grads``, ``average_tensor``,
  ``allreduce_bucket``, ``allreduce_and_copy``): each gradient copied into the contiguous reduction bucket
  (resident), the bucket divided by the world size (``div_``, resident), each destination's slices
  flattened for its ``dist.reduce`` (fresh): 2 E b fresh and 2 x 2 E b resident; the reduced slices copied
  back on their owner and, without optimizer offload, into the contiguous partition buffer: 2 x 2 P b
  resident (with the offload the second is the offload's own copy, step_time_terms.host_copy_bytes). ZeRO-2
  reduces every micro-step, ZeRO-1 once, at the boundary (``reduce_ready_partitions_and_remove_grads``).
- ZeRO-3 (stage3.py ``__add_grad_to_ipg_bucket``: ``copy_`` into the bucket's buffer, resident;
  ``__avg_scatter_grads`` -> comm/coalesced_collectives.py ``reduce_scatter_coalesced``: ``torch.cat`` into a
  flat buffer, fresh, ``div_`` by the world size, in place): 2 E b fresh and 2 x 2 E b resident every
  micro-step; ``partition_grads`` copies the reduced partition into the fp32 gradient buffer on the first
  micro-step (2 P x 4) and adds it there on each later one (3 P x 4), resident.

At the boundary, below ZeRO-3 (stage_1_and_2.py ``step``): without the offload the partition's gradients
flattened (2 P b, fresh) and the updated fp32 partition copied into the 16-bit one (P x (4 + b), resident);
with it, only the latter, into the 16-bit host buffer before its copy to the device. At ZeRO-3 without the
offload (stage3.py ``_prepare_fp32_grad_for_sub_group``: the fp32 gradients flattened, 2 P x 4, fresh;
``_reassign_or_swap_out_partitioned_parameters``: the fp32 partition into the 16-bit one, P x (4 + b),
resident); with the offload these are the offload's own copies.

Rates: each copy's bytes at its tensor's size (a bucket's, or the partition's) through
zerogate.predict.step_time_memory.memory_traffic: on the CPU accelerator the fresh bytes at the
micro-benchmarks' operator chains' rate by size and the resident ones at their host-to-host copy's, else the
memory's bandwidth (the device's; the host's for the offloaded optimizer's copies and without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerogate.config.machines import MachineDescription
from zerogate.contracts.model import ModelCounts
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP
from zerogate.predict.microbench_rates import MeasuredRates
from zerogate.predict.setup import Setup
from zerogate.predict.step_time_memory import Traffic, memory_traffic, traffic
from zerogate.predict.step_time_terms import (
    GRAD_ACCUMULATION_BYTES,
    SERIAL,
    Term,
    host_runs_between_products,
    optimizer_partition,
)
from zerogate.render.deepspeed_defaults import ZERO0_ALLREDUCE_ELEMENTS

REDUCTION_COPIES = "gradient copies around the reductions"
BOUNDARY_COPIES = "partition flatten and 16-bit copy"


@dataclass(frozen=True)
class Copies:
    """One rank's copies of one kind per optimizer step: their traffic (bytes read and written by size,
    fresh or resident) and where they are counted (per micro-step or per boundary)."""

    per: str
    moved: Traffic


def reduction_copies(counts: ModelCounts, setup: Setup) -> Copies:
    """The copies around one optimizer step's reductions (module doc), x G where a stage reduces every
    micro-step."""
    e, b, g, n = counts.total, setup.dtype_bytes, setup.accumulation, setup.ranks
    p = int(optimizer_partition(counts, setup))
    if setup.stage == 0:
        bucket = min(ZERO0_ALLREDUCE_ELEMENTS, e)
        return Copies(BOUNDARY, traffic({bucket: 2 * e * b}, {bucket: 2 * 2 * e * b}))
    bucket = min(setup.reduce_bucket, e)
    passes = g if setup.stage >= 2 else 1
    into_buckets = traffic({bucket: passes * 2 * e * b}, {bucket: passes * 2 * 2 * e * b})
    slice_numel = -(-bucket // n)
    if setup.stage == 3:
        accumulation = GRAD_ACCUMULATION_BYTES
        into_partition = 2 * p * accumulation + (g - 1) * 3 * p * accumulation
        return Copies(MICRO_STEP, into_buckets + traffic(resident={slice_numel: into_partition}))
    owner = 1 if setup.offload_optimizer else 2
    back = traffic(resident={slice_numel: passes * owner * 2 * p * b})
    return Copies(MICRO_STEP if setup.stage == 2 else BOUNDARY, into_buckets + back)


def boundary_copies(counts: ModelCounts, setup: Setup) -> Copies:
    """The partition's flatten and its copy into the 16-bit parameters at the boundary (module doc)."""
    b, p = setup.dtype_bytes, int(optimizer_partition(counts, setup))
    if setup.stage == 0 or (setup.stage == 3 and setup.offload_optimizer):
        return Copies(BOUNDARY, traffic())
    flattened = GRAD_ACCUMULATION_BYTES if setup.stage == 3 else b
    flatten = 0 if setup.offload_optimizer else 2 * p * flattened
    return Copies(BOUNDARY, traffic({p: flatten}, {p: p * (GRAD_ACCUMULATION_BYTES + b)}))


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
        if not copies.moved.total_bytes:
            continue
        seconds, rate = memory_traffic(copies.moved, setup, machine, on_host, measured)
        terms.append(
            Term(
                name,
                SERIAL,
                copies.per,
                seconds,
                False,
                f"{copies.moved.total_bytes:.4g} B read and written per optimizer step "
                f"(zerogate.predict.step_time_copies: {sources}); {rate}",
            )
        )
    return terms
