"""Each rank's predicted peak memory (``plan/peak_memory.json``): term by term and at every level the
accelerator measures, headed by the level the step records set it against; for DeepSpeed's ZeRO schemes and
for FSDP2."""

from __future__ import annotations

from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import BaselineMeasurement, PeakPrediction, PredictedPeak
from zerogate.contracts.records import column
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.predict.activation_figures import Activations
from zerogate.predict.levels import HEADLINE_LEVEL, fsdp2_peak_levels, peak_levels, peak_terms
from zerogate.predict.phases import transient_bytes
from zerogate.predict.planned_run import run_setup
from zerogate.predict.setup import Setup


def peak_prediction(
    counts: ModelCounts,
    setup: Setup,
    runtime_baseline: BaselineMeasurement | None,
    activations: Activations | None = None,
) -> PeakPrediction:
    """Each rank's predicted peak (levels.peak_terms) and every level the accelerator measures
    (levels.peak_levels): on GPUs the tensor, allocator and device peaks, on the CPU accelerator the
    live-tensor peak and the resident-set peak on top of the runtime baseline measured here
    (``runtime_baseline``: measure_runtime_baseline's measurement, None on GPUs). Every rank of a scheme holds
    the same terms (ZeRO pads each partition to the same size), so one prediction serves each rank."""
    baseline = None if runtime_baseline is None else runtime_baseline.peak_rss_bytes
    terms = peak_terms(counts, setup, baseline, activations)
    return headline_peak(setup, terms, peak_levels(counts, setup, baseline, activations), runtime_baseline)


def headline_peak(
    setup: Setup,
    terms: dict[str, int],
    levels: dict[str, PredictedPeak],
    runtime_baseline: BaselineMeasurement | None,
) -> PeakPrediction:
    """The prediction with its headline figure, one of ``levels`` (levels.HEADLINE_LEVEL): the resident set
    on the CPU accelerator, the caching allocator's level on GPUs, each beside the step-record column that
    measures it."""
    on_cpu = setup.device_kind == "cpu"
    headline = levels[HEADLINE_LEVEL[setup.device_kind]]
    total, transient = headline.predicted_bytes, transient_bytes(terms)
    return PeakPrediction(
        scheme=setup.scheme,
        ranks=setup.ranks,
        accelerator=setup.device_kind,
        metric=column("peak_rss_gib") if on_cpu else column("max_reserved_gib"),
        what=headline.what,
        terms_bytes=terms,
        persistent_bytes=total - transient,
        transient_bytes=transient,
        total_bytes=total,
        runtime_baseline=runtime_baseline,
        levels=levels,
    )


def fsdp2_peak_for_run(
    run_spec: RunSpec, ds_config: DsConfig, runtime_baseline: BaselineMeasurement | None
) -> PeakPrediction:
    """The peak prediction of the run under torch FSDP2 (zerogate.predict.fsdp2_terms) from the config of the
    ZeRO variant it stands beside (its precision, ranks and parameter offload: CPUOffloadPolicy)."""
    counts, setup, activations = run_setup(run_spec, ds_config)
    baseline = None if runtime_baseline is None else runtime_baseline.peak_rss_bytes
    terms, levels = fsdp2_peak_levels(counts, setup, baseline, activations)
    prediction = headline_peak(setup, terms, levels, runtime_baseline)
    return prediction.model_copy(update={"scheme": "fsdp2_offload" if setup.offload_param else "fsdp2"})


def peak_for_run(
    run_spec: RunSpec, ds_config: DsConfig, runtime_baseline: BaselineMeasurement | None
) -> PeakPrediction:
    """The peak prediction of the run as rendered (``ds_config``, ``run_spec``), its activations traced."""
    counts, setup, activations = run_setup(run_spec, ds_config)
    return peak_prediction(counts, setup, runtime_baseline, activations)
