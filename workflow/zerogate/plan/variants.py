"""Comparison runs on the same model and data: ZeRO stage 0 (DDP), 1, 2, 3, with and without offload.

Each variant is the rendered DeepSpeed config (zerogate.plan.ds_config.render: the claim under the profile)
with the stage and offload devices overridden, so everything else -- batch geometry, optimizer, LR
schedule, precision -- stays the same across variants and the ledger can be checked stage by stage.
Their comparison table (statistics of the trained variants) is zerogate.analysis.variants.
"""

from __future__ import annotations

from typing import Any

from zerogate.plan.ds_config import _MISSING, apply_overrides, get_path

# name -> (stage, optimizer offload, parameter offload). Parameter offload exists only in stage 3.
VARIANTS: dict[str, tuple[int, bool, bool]] = {
    "zero0": (0, False, False),
    "zero1": (1, False, False),
    "zero2": (2, False, False),
    "zero3": (3, False, False),
    "zero1-offload": (1, True, False),
    "zero2-offload": (2, True, False),
    "zero3-offload": (3, True, False),
    "zero3-offload-all": (3, True, True),  # the claim's configuration
}


def variant_overrides(name: str) -> list[dict[str, Any]]:
    stage, offload_optimizer, offload_param = VARIANTS[name]
    return [
        {"path": "zero_optimization.stage", "value": stage, "reason": f"variant {name}"},
        {"path": "zero_optimization.offload_optimizer.device", "value": "cpu" if offload_optimizer else "none",
         "reason": f"variant {name}"},
        {"path": "zero_optimization.offload_param.device", "value": "cpu" if offload_param else "none",
         "reason": f"variant {name}"},
    ]


def variant_config(ds_config: dict[str, Any], name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the variant's DeepSpeed config, its overrides with the rendered value each replaced)."""
    overrides = variant_overrides(name)
    applied = []
    for override in overrides:
        before = get_path(ds_config, override["path"])
        applied.append({**override, "before": None if before is _MISSING else before})
    return apply_overrides(ds_config, overrides), applied
