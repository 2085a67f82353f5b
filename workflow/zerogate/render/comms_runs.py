"""The communication measurement's runs: the schemes whose collectives are measured and theorised
(zerogate.predict.comms), and the DeepSpeed config each scheme is measured with at each accumulation.

A scheme is a zerogate.render.variants name (a ZeRO variant, or the peer FSDP2) or torch DDP ("ddp"). Each
runs the rendered config with the variant's overrides and DeepSpeed's comms logger on
(``measurement_config``); torch DDP reads ZeRO-0's. The measuring worker is zerogate.train.comms_volume; what
the theory needs besides the config is zerogate.predict.comms_plan's.
"""

from __future__ import annotations

from typing import Any

from zerogate.render.overrides import apply_overrides
from zerogate.render.variants import PEERS, VARIANTS, engine_of, variant_config

# The schemes measured and theorised, in report order. DeepSpeed ones and FSDP2 are zerogate.render.variants
# names.
SCHEMES: tuple[str, ...] = (
    "ddp",
    "zero0",
    "zero1",
    "zero2",
    "zero3",
    "zero3-offload",
    "zero3-offload-all",
    "fsdp2",
)
DDP = "ddp"
FSDP2 = "fsdp2"

# The comms logger's config block (deepspeed/comm/config.py): every collective, no per-call printing.
COMMS_LOGGER = {"enabled": True, "prof_all": True, "verbose": False, "debug": False}


def engine_of_scheme(scheme: str) -> str:
    """What trains ``scheme`` (a zerogate.runtime.engines name)."""
    return "ddp" if scheme == DDP else engine_of(scheme)


def scheme_setup(scheme: str) -> tuple[int | None, bool, bool]:
    """(ZeRO stage or None for torch DDP, optimizer offload, parameter offload). Any name of
    zerogate.render.variants.VARIANTS has a theory (the measured ones are SCHEMES)."""
    if scheme == DDP:
        return None, False, False
    if scheme == FSDP2:
        return VARIANTS[PEERS[scheme].config_of]
    if scheme not in VARIANTS:
        raise KeyError(f"unknown scheme {scheme!r}; known: {DDP}, {', '.join(VARIANTS)}, {FSDP2}")
    return VARIANTS[scheme]


def scheme_for(stage: int, offload_optimizer: bool, offload_param: bool) -> str:
    """The DeepSpeed scheme name of a ZeRO stage and its offloads (a zerogate.predict.setup.Setup's), for
    zerogate.predict.comms.theory. Stage 0 is DeepSpeed's ZeRO-0 ("zero0"), not torch DDP."""
    wanted = (stage, offload_optimizer, offload_param)
    for name, setup in VARIANTS.items():
        if setup == wanted:
            return name
    raise KeyError(
        f"no scheme for ZeRO stage {stage} with offload_optimizer={offload_optimizer}, "
        f"offload_param={offload_param}"
    )


def accumulations(ds_config: dict[str, Any]) -> tuple[int, ...]:
    """The accumulations measured: 1 and the rendered config's (once when that is 1)."""
    profile = int(ds_config["gradient_accumulation_steps"])
    return (1,) if profile == 1 else (1, profile)


def measurement_config(
    ds_config: dict[str, Any], scheme: str, accumulation: int, world: int
) -> dict[str, Any]:
    """The rendered config as ``scheme`` runs it at ``accumulation``, with the comms logger on.

    DeepSpeed schemes are zerogate.render.variants' overrides; torch DDP takes ZeRO-0's (it reads only the
    batch geometry, the optimizer and the clipping from it); FSDP2 the config its variant reads (ZeRO-3's).
    The global batch follows the accumulation.
    """
    scheme_setup(scheme)  # an unknown scheme fails here, before any work
    config, _ = variant_config(ds_config, "zero0" if scheme == DDP else scheme)
    micro = int(config["train_micro_batch_size_per_gpu"])
    return apply_overrides(
        config,
        [
            {"path": "gradient_accumulation_steps", "value": accumulation},
            {"path": "train_batch_size", "value": micro * accumulation * world},
            {"path": "comms_logger", "value": dict(COMMS_LOGGER)},
        ],
    )
