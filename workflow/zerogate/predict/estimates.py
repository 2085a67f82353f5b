"""The two ledgers zerogate sets beside its own: the ZeRO paper's model-state formulas (Rajbhandari et al.
2020, K = 12 bytes/param of fp32 Adam state; docs/reference.md section 1), as the claim quotes them, and
DeepSpeed's own estimators, called (never re-typed) on the same counts."""

from __future__ import annotations

from dataclasses import dataclass

from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from zerogate.contracts.model import ModelCounts


def paper_ledger(phi: int, ranks: int) -> dict[str, int | None]:
    """Model-state bytes per GPU as the ZeRO paper (and the claim, claim.md section 2) writes them."""
    return {
        "ddp": 16 * phi,
        "zero1": 4 * phi + 12 * phi // ranks,
        "zero2": 2 * phi + 14 * phi // ranks,
        "zero2_offload_optimizer": None,  # the paper gives no offload formula
        "zero3": 16 * phi // ranks,
        "zero3_offload_optimizer": None,
        # The claim's own "ZeRO-3 + Offload" line (claim.md section 2): 2 Phi / N_d + M_activation.
        "zero3_offload_all": 2 * phi // ranks,
    }


@dataclass(frozen=True)
class Estimate:
    """DeepSpeed's estimate for one scheme, bytes."""

    device: int  # per GPU
    host: int  # per node


def deepspeed_estimates(
    counts: ModelCounts, gpus_per_node: int, nodes: int = 1
) -> dict[str, Estimate | None]:
    """DeepSpeed's estimators on the same counts: per-GPU ``device`` and per-node ``host`` bytes.

    DeepSpeed has none for DDP or ZeRO-1. ``zero_init=True``: zerogate builds models under zero.Init.
    """

    def z2(offload: bool) -> Estimate:
        host, device = estimate_zero2_model_states_mem_needs(
            counts.total, gpus_per_node, nodes, cpu_offload=offload
        )
        return Estimate(device=int(device), host=int(host))

    def z3(offload_optimizer: bool, offload_param: bool) -> Estimate:
        host, device, _ = estimate_zero3_model_states_mem_needs(
            counts.total,
            counts.largest_layer,
            gpus_per_node,
            nodes,
            cpu_offload=offload_optimizer,
            cpu_offload_params=offload_param,
            zero_init=True,
        )
        return Estimate(device=int(device), host=int(host))

    return {
        "ddp": None,
        "zero1": None,
        "zero2": z2(False),
        "zero2_offload_optimizer": z2(True),
        "zero3": z3(False, False),
        "zero3_offload_optimizer": z3(True, False),
        "zero3_offload_all": z3(True, True),
    }
