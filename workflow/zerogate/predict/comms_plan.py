"""The communication measurement's plan (``comms/measurements.json``): every scheme at every measured
accumulation, as the measuring worker (zerogate.train.comms_volume) runs it, with what the theory
(zerogate.predict.comms) needs to predict it. The DeepSpeed config of each is rendered by
zerogate.render.comms_runs; this module adds the ledger's reading of that config (zerogate.predict.setup),
the theory's settings as DeepSpeed's own config class resolves them (so it loads DeepSpeed: only the
plan_comms_measurements rule imports it) and the run's model counted as the planner counts it."""

from __future__ import annotations

from typing import Any

from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

from zerogate.contracts.comms import CommsMeasurement, CommsPlan, TheorySettings
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.predict.setup import Setup, setup_from_config
from zerogate.render.comms_runs import SCHEMES, accumulations, engine_of_scheme, measurement_config


def theory_settings(config: dict[str, Any], setup: Setup) -> TheorySettings:
    """The settings zerogate.predict.comms.theory takes, as DeepSpeed resolves them (its own config class)."""
    zero = DeepSpeedZeroConfig(**config.get("zero_optimization", {}))
    return TheorySettings(
        persistence_threshold=setup.persistence_threshold,
        reduce_bucket_elements=int(zero.reduce_bucket_size),
        prefetch_bucket_elements=int(zero.prefetch_bucket_size),
        max_reuse_distance=int(zero.max_reuse_distance),
        leaf_blocks=setup.leaf_blocks,
        multi_rank_bucket_allreduce=bool(zero.use_multi_rank_bucket_allreduce),
        gradient_clipping=float(config.get("gradient_clipping", 0.0)),
    )


def measurements(ds_config: DsConfig, run_spec: RunSpec) -> CommsPlan:
    """Every scheme at every measured accumulation, as the measuring worker (zerogate.train.comms_volume) runs
    it: the DeepSpeed config (measurement_config), the ledger's reading of it and the theory's settings, and
    the run's model counted as the planner counts it."""
    rendered = ds_config.raw
    found = []
    for scheme in SCHEMES:
        for accumulation in accumulations(rendered):
            config = measurement_config(rendered, scheme, accumulation, run_spec.world_size)
            setup = setup_from_config(DsConfig.of(config, "the measurement config"), run_spec)
            found.append(
                CommsMeasurement(
                    scheme=scheme,
                    engine=engine_of_scheme(scheme),
                    accumulation=accumulation,
                    ds_config=config,
                    dtype=setup.dtype,
                    dtype_bytes=setup.dtype_bytes,
                    theory_settings=theory_settings(config, setup),
                )
            )
    counts = count_parameters(planned_model_config(run_spec.model, run_spec.vocab_size, run_spec.seq_len))
    return CommsPlan(measurements=found, counts=counts)
