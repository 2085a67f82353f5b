"""The floor's communication terms on hand-made figures, the probe's figures from raw timings, the
machine descriptions' link facts, and the floor-above-measurement check of the floor_ratio gate."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from tests.unit.helpers import judged_gate
from tests.unit.test_ledger import claim_setup, oracle_counts
from zerogate.config.machines import check, from_fingerprint, load_description
from zerogate.contracts.machine import CollectiveKindFigures, Collectives, CollectiveSample, Figure, Host
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import ModelComputeMeasurement
from zerogate.errors import InputError
from zerogate.predict import collectives
from zerogate.predict.comms_terms import BOUNDARY, MICRO_STEP, Term, totals
from zerogate.predict.floor import (
    EAGER_PASS,
    collective_time,
    derived_bandwidth,
    floor,
    theory_scheme,
    theory_terms,
)
from zerogate.predict.setup import Setup
from zerogate.predict.volume import VOLUME_FACTOR, volume_bytes

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"


def fig(value, basis="measured"):
    return {"value": value, "basis": basis, "source": "hand-made"}


def cpu_machine(kinds):
    """A 2-core CPU machine description with hand-made collective figures, checked against the schema."""
    return check(
        {
            "name": "hand",
            "source": "probed",
            "nodes": 1,
            "gpus": [],
            "collectives": {"backend": "gloo", "world": 2, "route": "loopback (one host)", "kinds": kinds},
            "host": {
                "ram_total_bytes": 24 * 10**9,
                "memory_bandwidth_gbps": 10.0,
                "cpu_peak_tflops_fp32": 0.04,
            },
        },
        "the test's machine",
    )


GLOO = {
    kind: {"latency_s": fig(1e-3), "bandwidth_gbps": fig(0.5)} for kind in VOLUME_FACTOR if kind != "barrier"
}


def tiny_counts():
    # Two 100 x 10 matrices of the one decoder layer and one 10-element norm outside it (persistent under a
    # threshold of 640).
    return ModelCounts(
        total=2010,
        largest_layer=1000,
        numels=(1000, 1000, 10),
        hidden=10,
        layers=1,
        heads=1,
        vocab=100,
        tied_embeddings=False,
        first_dims=(100, 100, 10),
        blocks=(0, 0, -1),
    )


def cpu_setup(**changes):
    base = Setup(
        ranks=2,
        nodes=1,
        dtype="fp32",
        device_kind="cpu",
        micro_batch=1,
        seq_len=64,
        accumulation=8,
        stage=3,
        offload_optimizer=True,
        offload_param=True,
        pin_memory=True,
        reduce_bucket=500_000_000,
        prefetch_bucket=50_000_000,
        persistence_threshold=640,
    )
    return dataclasses.replace(base, **changes)


def measured_pass(seconds: float) -> ModelComputeMeasurement:
    """measure_model_compute's measurement: the model's forward + backward on one rank took ``seconds``."""
    return ModelComputeMeasurement(
        forward_backward_s=seconds,
        samples_s=[seconds],
        threads=1,
        micro_batch=1,
        seq_len=64,
        dtype="fp32",
        parameters=2010,
        through_deepspeed=True,
        how="the test's",
    )


# --- the collective term: calls x latency + volume / bandwidth, per kind -----------------------------


def test_collective_time_is_calls_times_latency_plus_volume_over_bandwidth():
    terms = [
        Term("gather", "all_gather", MICRO_STEP, 3, 8e6),
        Term("scatter", "reduce_scatter", MICRO_STEP, 1, 4e6),
        Term("persistent", "all_gather", BOUNDARY, 1, 1e3),
    ]
    machine = cpu_machine(
        {
            "all_gather": {"latency_s": fig(1e-3), "bandwidth_gbps": fig(2.0)},
            "reduce_scatter": {"latency_s": fig(2e-3), "bandwidth_gbps": fig(1.0)},
        }
    )
    micro = collective_time(terms, MICRO_STEP, 2, machine)
    # all_gather: 3 calls x 1 ms + 8e6 x 1/2 (ring factor) / 2e9; reduce_scatter: 2 ms + 4e6 x 1/2 / 1e9.
    assert micro.kinds["all_gather"].latency_time_s == pytest.approx(3e-3)
    assert micro.kinds["all_gather"].transfer_time_s == pytest.approx(4e6 / 2e9)
    assert micro.seconds == pytest.approx(3e-3 + 2e-3 + 4e6 / 2e9 + 2e6 / 1e9)
    assert micro.missing == []
    boundary = collective_time(terms, BOUNDARY, 2, machine)
    assert boundary.seconds == pytest.approx(1e-3 + 500 / 2e9) and list(boundary.kinds) == ["all_gather"]


def test_only_a_single_gather_or_reduction_per_micro_step_is_on_the_dependency_path():
    machine = cpu_machine(
        {
            "all_gather": {"latency_s": fig(1e-3), "bandwidth_gbps": fig(1.0)},
            "reduce_scatter": {"latency_s": fig(2e-3), "bandwidth_gbps": fig(1.0)},
            "broadcast": {"latency_s": fig(3e-3), "bandwidth_gbps": fig(1.0)},
        }
    )
    one_each = [
        Term("gather", "all_gather", MICRO_STEP, 1, 4e6),
        Term("scatter", "reduce_scatter", MICRO_STEP, 1, 4e6),
        Term("other", "broadcast", MICRO_STEP, 1, 0.0),
    ]
    result = collective_time(one_each, MICRO_STEP, 2, machine)
    assert result.dependent_kinds == ["all_gather", "reduce_scatter"]  # a broadcast is neither
    assert result.dependent_s == pytest.approx(1e-3 + 2e6 / 1e9 + 2e-3 + 2e6 / 1e9)
    several = [
        Term("gather", "all_gather", MICRO_STEP, 3, 4e6),
        Term("scatter", "reduce_scatter", MICRO_STEP, 2, 4e6),
    ]
    assert collective_time(several, MICRO_STEP, 2, machine).dependent_s == 0  # prefetched calls may overlap
    boundary = [Term("gather", "all_gather", BOUNDARY, 1, 4e6)]
    assert collective_time(boundary, BOUNDARY, 2, machine).dependent_s == 0  # the boundary adds anyway


def test_a_missing_bandwidth_is_marked_missing_and_left_out():
    terms = [
        Term("gather", "all_gather", MICRO_STEP, 2, 8e6),
        Term("reduce", "all_reduce", MICRO_STEP, 1, 4e6),
    ]
    machine = cpu_machine({"all_gather": {"latency_s": fig(1e-3)}})  # no bandwidth; no all_reduce at all
    result = collective_time(terms, MICRO_STEP, 2, machine)
    assert result.missing == [
        "collectives per micro_step: all_gather bandwidth (no figure)",
        "collectives per micro_step: all_reduce latency (no figure)",
        "collectives per micro_step: all_reduce bandwidth (no figure)",
    ]
    assert result.kinds["all_gather"].transfer_time_s is None
    assert result.seconds == pytest.approx(2e-3)  # what is known, a lower bound
    assert collective_time(terms, MICRO_STEP, 2, cpu_machine({})).seconds is None  # nothing known


def test_a_collective_without_payload_needs_no_bandwidth():
    terms = [Term("sync", "barrier", BOUNDARY, 2, 0.0)]
    result = collective_time(terms, BOUNDARY, 2, cpu_machine({"barrier": {"latency_s": fig(5e-4)}}))
    assert result.seconds == pytest.approx(1e-3) and result.missing == []


# --- the floor with its communication terms -----------------------------------------------------------


def test_cpu_floor_takes_the_largest_term_and_adds_the_boundary():
    counts, setup = tiny_counts(), cpu_setup()
    result = floor(counts, setup, cpu_machine(GLOO))
    terms = theory_terms(counts, setup)
    micro_calls, micro_volume = totals(terms, MICRO_STEP, 2)
    boundary_calls, boundary_volume = totals(terms, BOUNDARY, 2)
    # Uniform figures: every kind 1 ms per call and 0.5 GB/s.
    collectives_micro = micro_calls * 1e-3 + micro_volume / 0.5e9
    collectives_boundary = boundary_calls * 1e-3 + boundary_volume / 0.5e9
    # 6 FLOPs per parameter in products and token (the counts' untied vocab x hidden input embedding is a
    # lookup: zerogate.hardware.product_parameters) plus the attention's 12 x layers x hidden x seq_len at the
    # least share an SDPA kernel computes under the causal mask (half), on a rank's share of the host's peak.
    compute = (6 * (2010 - 100 * 10) + 0.5 * 12 * 1 * 10 * 64) * 64 / (0.04e12 / 2)
    rank = result.ranks[0].terms
    assert rank["compute(s)"] == pytest.approx(compute)
    assert rank["collectives(s)"] == pytest.approx(collectives_micro)
    # The theory gathers every parameter in one call and reduce-scatters every gradient in one per micro-step:
    # both lie on the dependency path, so they add to the compute.
    assert micro_calls == 2 and rank["compute + dependent collectives(s)"] == pytest.approx(
        compute + collectives_micro
    )
    micro = max(compute, collectives_micro, compute + collectives_micro)
    assert result.micro_step_floor_s == pytest.approx(micro)
    adam = 28 * 2010 / 10e9
    assert result.boundary_terms["collectives(s)"] == pytest.approx(collectives_boundary)
    assert result.optimizer_step_floor_s == pytest.approx(8 * micro + collectives_boundary + adam)
    assert result.communication.scheme == "zero3-offload-all" and result.missing == []


def test_a_measured_forward_backward_bounds_the_compute_where_it_exceeds_the_arithmetic():
    counts, setup = tiny_counts(), cpu_setup()
    arithmetic = floor(counts, setup, cpu_machine(GLOO))
    compute = arithmetic.ranks[0].terms["compute(s)"]
    dependent = arithmetic.ranks[0].terms["collectives(s)"]  # both calls of the micro-step are dependent
    # Operator overheads: the measured pass takes far longer than the arithmetic at peak.
    slow = floor(counts, setup, cpu_machine(GLOO), measured_pass(0.05))
    rank = slow.ranks[0].terms
    assert rank[EAGER_PASS] == 0.05 and rank["compute(s)"] == pytest.approx(compute)
    assert rank["compute + dependent collectives(s)"] == pytest.approx(0.05 + dependent)
    assert slow.micro_step_floor_s == pytest.approx(0.05 + dependent)
    assert slow.model_compute == measured_pass(0.05)
    # A pass faster than the arithmetic (a big model at peak) changes nothing: the larger one bounds it.
    fast = floor(counts, setup, cpu_machine(GLOO), measured_pass(compute / 10))
    assert fast.micro_step_floor_s == pytest.approx(arithmetic.micro_step_floor_s)


def test_gpu_ranks_ignore_a_cpu_measurement():
    counts, setup = tiny_counts(), cpu_setup(device_kind="cuda")
    gpus = [
        {"name": "RTX 4090", "memory_total_bytes": 24 * 10**9, "pcie": {"generation": 4, "width": 16}}
    ] * 2
    machine = check({**cpu_machine(GLOO).plain(), "gpus": gpus}, "the test's machine")
    measured = floor(counts, setup, machine, measured_pass(5.0))
    assert measured == floor(counts, setup, machine).model_copy(update={"model_compute": measured_pass(5.0)})
    assert EAGER_PASS not in measured.ranks[0].terms


def test_floor_without_collective_figures_lists_them_missing_and_stays_below():
    counts, setup = tiny_counts(), cpu_setup()
    known = floor(counts, setup, cpu_machine(GLOO))
    unknown = floor(counts, setup, cpu_machine({}))
    assert "rank 0 (cpu): collectives(s)" in unknown.missing
    assert any("all_gather latency" in m for m in unknown.missing)
    assert unknown.optimizer_step_floor_s < known.optimizer_step_floor_s


def test_scheme_of_the_run_for_the_theory():
    assert theory_scheme(cpu_setup()) == "zero3-offload-all"
    assert theory_scheme(cpu_setup(offload_param=False)) == "zero3-offload"
    assert theory_scheme(cpu_setup(stage=2, offload_optimizer=True, offload_param=False)) == "zero2-offload"
    assert theory_scheme(cpu_setup(stage=0, offload_optimizer=False, offload_param=False)) == "zero0"


# --- GPU links: described, derived from PCIe, or missing ----------------------------------------------


def test_claimed_box_link_is_derived_from_the_slower_pcie_link_with_a_published_latency():
    box = load_description(CLAIM_BOX)
    bandwidth = derived_bandwidth(box)
    assert bandwidth is not None
    assert bandwidth.basis == "derived" and bandwidth.value == pytest.approx(1.969 * 8)  # RTX 4090, 4.0 x8
    assert "through host memory" in bandwidth.source
    result = floor(oracle_counts(), claim_setup(), box)
    gather = result.communication.micro_step.kinds["all_gather"]
    assert gather.latency.basis == "published" and gather.latency.value == pytest.approx(11.27e-6)
    # The theory's all-gather volume per micro-step (predict/comms owns it), over the derived bandwidth.
    terms = theory_terms(oracle_counts(), claim_setup())
    calls, volume = totals([t for t in terms if t.kind == "all_gather"], MICRO_STEP, 2)
    assert (
        gather.volume_bytes == volume and gather.calls == calls and volume >= 28e9 / 2
    )  # at least one gather
    assert gather.transfer_time_s == pytest.approx(volume / (1.969e9 * 8))
    assert result.ranks[1].terms["collectives(s)"] == pytest.approx(result.communication.micro_step.seconds)
    assert result.missing == []


def test_nvlink_without_a_figure_is_missing_and_a_described_figure_wins():
    box = check({**load_description(CLAIM_BOX).plain(), "nvlink": True}, "the test's box")
    assert derived_bandwidth(box) is None
    result = floor(oracle_counts(), claim_setup(), box)
    assert "collectives per micro_step: all_gather bandwidth (no figure)" in result.missing
    kinds = box.plain()["collectives"]["kinds"]
    box = check(
        {
            **box.plain(),
            "collectives": {
                **box.plain()["collectives"],
                "kinds": {
                    **kinds,
                    "all_gather": {**kinds["all_gather"], "bandwidth_gbps": fig(50.0, "published")},
                },
            },
        },
        "the test's box",
    )
    gather = floor(oracle_counts(), claim_setup(), box).communication.micro_step.kinds["all_gather"]
    assert gather.bandwidth.value == 50.0 and gather.bandwidth.basis == "published"


def test_a_figure_must_say_its_basis(tmp_path):
    text = CLAIM_BOX.read_text().replace("basis: published", "basis: guessed")
    (tmp_path / "box.yaml").write_text(text)
    with pytest.raises(InputError) as error:
        load_description(tmp_path / "box.yaml")
    assert "box.yaml" in str(error.value) and "basis" in str(error.value)


def test_the_probed_figures_reach_the_machine(cpu_fingerprint):
    measured = cpu_fingerprint.model_copy(
        update={
            "host": Host(memory_bandwidth_gbps=10.0),
            "collectives": Collectives(
                backend="gloo",
                world=2,
                kinds={
                    "all_gather": CollectiveKindFigures(
                        latency_s=Figure(**fig(1e-3)),
                        bandwidth_gbps=Figure(**fig(0.5)),
                        samples=[CollectiveSample(tensor_bytes=16, seconds=1e-3)],
                    )
                },
            ),
        }
    )
    machine = check(from_fingerprint(measured, "box"), "probe")
    assert machine.collectives.kinds["all_gather"].latency_s.value == 1e-3
    assert machine.host.memory_bandwidth_gbps == 10.0


# --- the probe's figures from raw timings --------------------------------------------------------------


def test_figures_recover_a_linear_collective_exactly():
    # 0.5 ms latency and 1 GB/s of a rank's volume (all_gather on 2 ranks: half the full tensor).
    samples = {
        "all_gather": [{"elements": e, "seconds": 0.5e-3 + e * 4 / 2 / 1e9} for e in (4, 1 << 16, 1 << 20)]
    }
    gather = CollectiveKindFigures.of(collectives.figures(samples, 2, "test")["all_gather"], "the figures")
    assert gather.latency_s.value == pytest.approx(0.5e-3) and gather.latency_s.basis == "measured"
    assert gather.bandwidth_gbps.value == pytest.approx(1.0) and gather.bandwidth_gbps.basis == "measured"


def test_figures_from_noisy_timings_never_predict_more_than_a_measured_call():
    samples = {
        "all_gather": [
            {"elements": 4, "seconds": 1.0e-3},
            {"elements": 1 << 16, "seconds": 1.5e-3},
            {"elements": 1 << 20, "seconds": 9.0e-3},
        ],
        # A busy machine (the default run's probe): the 256 KiB all-reduce beat the 16 B one, and beat
        # the rate of the 4 MiB one.
        "all_reduce": [
            {"elements": 4, "seconds": 0.99e-3},
            {"elements": 1 << 16, "seconds": 0.566e-3},
            {"elements": 1 << 20, "seconds": 13.1e-3},
        ],
    }
    result = collectives.figures(samples, 2, "test")
    for kind, rows in samples.items():
        assert result[kind]["latency_s"]["value"] >= 0 and result[kind]["bandwidth_gbps"]["value"] > 0
        for row in rows:
            predicted = collectives.predicted_seconds(result[kind], kind, row["elements"] * 4, 2)
            assert predicted <= row["seconds"] * (1 + 1e-9)
    # Of the lines under every call, the one that predicts the most for the largest message (9 ms), and of
    # those the one with the larger latency: through the smallest and the largest call.
    volume = {e: volume_bytes("all_gather", e * 4, 2) for e in (4, 1 << 20)}
    bandwidth = (volume[1 << 20] - volume[4]) / (9.0e-3 - 1.0e-3)
    assert result["all_gather"]["bandwidth_gbps"]["value"] == pytest.approx(bandwidth / 1e9)
    assert result["all_gather"]["latency_s"]["value"] == pytest.approx(1.0e-3 - volume[4] / bandwidth)
    # The all-reduce's 256 KiB call shows no latency above 0 at any bandwidth its 4 MiB call allows.
    assert result["all_reduce"]["latency_s"]["value"] == 0.0


def test_the_slowest_batches_give_the_figures_slow_end_and_older_probes_none():
    # Best batches: 0.5 ms + a rank's volume at 1 GB/s; slowest: 0.8 ms + at 0.5 GB/s.
    def rows(slowest: bool) -> list[dict[str, float]]:
        return [
            {"elements": e, "seconds": 0.5e-3 + e * 4 / 2 / 1e9}
            | ({"slowest_seconds": 0.8e-3 + e * 4 / 2 / 0.5e9} if slowest else {})
            for e in (4, 1 << 16, 1 << 20)
        ]

    gather = CollectiveKindFigures.of(
        collectives.figures({"all_gather": rows(True)}, 2, "test")["all_gather"], "the figures"
    )
    assert gather.latency_s.value == pytest.approx(0.5e-3) and gather.latency_s.high == pytest.approx(0.8e-3)
    assert gather.bandwidth_gbps.value == pytest.approx(1.0) and gather.bandwidth_gbps.low == pytest.approx(
        0.5
    )
    assert [s.slowest_seconds for s in gather.samples] == [r["slowest_seconds"] for r in rows(True)]
    # A probe that recorded only its best batches (before the slowest was kept): no slow end.
    older = CollectiveKindFigures.of(
        collectives.figures({"all_gather": rows(False)}, 2, "test")["all_gather"], "the figures"
    )
    assert older.latency_s.high is None and older.bandwidth_gbps.low is None
    # Slowest batches no slower than the best add nothing.
    same = [r | {"slowest_seconds": r["seconds"]} for r in rows(False)]
    flat = collectives.figures({"all_gather": same}, 2, "test")["all_gather"]
    assert "high" not in flat["latency_s"] and "low" not in flat["bandwidth_gbps"]


def test_lower_line_without_a_fitting_bandwidth_keeps_the_fastest_call():
    assert collectives.lower_line([(0.0, 2e-3), (0.0, 1e-3)]) == (1e-3, None)


def test_gloo_probe_between_two_local_ranks_measures_every_kind():
    from zerogate.runtime.collective_timing import measure
    from zerogate.runtime.collectives import KINDS

    raw = measure(world=2, backend="gloo")
    assert "error" not in raw, raw.get("error")
    assert set(raw["samples"]) == set(KINDS)  # the raw seconds per call; the figures are the planner's
    result = Collectives.of(collectives.interpret(raw), "the probe's collectives")
    assert set(result.kinds) == set(KINDS)
    for kind, entry in result.kinds.items():
        assert 0 <= entry.latency_s.value < 1.0 and entry.latency_s.basis == "measured"
        # Every size keeps its slowest batch beside its best.
        assert all(s.slowest_seconds is not None and s.slowest_seconds >= s.seconds for s in entry.samples)
        # The line lies at or below every call of its sizes; one size beyond them is kept for the ledger.
        for sample in entry.samples:
            if sample.tensor_bytes <= collectives.LINE_TENSOR_BYTES:
                predicted = collectives.predicted_seconds(entry.model_dump(), kind, sample.tensor_bytes, 2)
                assert predicted is None or predicted <= sample.seconds * (1 + 1e-9)
        assert max(s.tensor_bytes for s in entry.samples) > collectives.LINE_TENSOR_BYTES
    assert "gloo" in result.how and result.seconds < 60
    # As the probe's figures reach a described machine (zerogate.config.machines.described_machine).
    machine = cpu_machine(result.model_dump(mode="json", by_alias=True, exclude_none=True)["kinds"])
    assert machine.collectives.kinds


def test_a_failed_collective_measurement_reaches_the_machine_as_missing_figures(cpu_fingerprint):
    """The probe records a failed measurement with its reason, never raises: the fingerprint keeps the
    reason and the floor lists the communication terms as missing."""
    raw = {
        "backend": "gloo",
        "world": 2,
        "how": "two local ranks",
        "route": "loopback (one host)",
        "error": "TimeoutError: no result within 60 s",
        "samples": {},
        "seconds": 60.0,
    }
    failed = cpu_fingerprint.model_copy(
        update={"collectives": Collectives.of(collectives.interpret(raw), "the probe")}
    )
    assert (
        failed.collectives.error == "TimeoutError: no result within 60 s" and failed.collectives.kinds == {}
    )
    machine = check(from_fingerprint(failed, "box"), "probe")
    assert "rank 0 (cpu): collectives(s)" in floor(tiny_counts(), cpu_setup(), machine).missing


# --- the gate: measured / floor, with the floor's terms; a floor above the measurement is a bug -------


def _floor_gate(tiny_profile):
    from tests.unit.helpers import settings

    return next(g for g in settings(tiny_profile).gates if g.statistic == "floor_ratio")


def _finished(steps: int = 200, world_size: int = 2):
    """Rank 0's summary of a finished run of ``steps`` optimizer steps."""
    from zerogate.contracts.records import GitState, StabiliserSummary, TrainSummary

    return TrainSummary(
        completed_steps=steps,
        resumed_from_step=None,
        world_size=world_size,
        parameters=2010,
        stabiliser=StabiliserSummary(policy="skip", skipped_steps=0, rollbacks=0, skipped_windows=[]),
        wall_time_s=100.0,
        metrics_time_s=0.1,
        dtype="fp32",
        accelerator="cpu",
        git=GitState(commit=None, dirty=None),
    )


def _hand_plan():
    """The planner's plan of the hand-made counts on the hand-made CPU machine (its floor is
    floor.floor's)."""
    from zerogate.predict.planner import plan

    return plan(tiny_counts(), cpu_setup(), cpu_machine(GLOO), profile="cpu-tiny")


def _judge_floor(tiny_profile, step_time, plan):
    from tests.conftest import CPU_FINGERPRINT
    from tests.unit.helpers import no_events, spike_rule, synthetic_steps

    return judged_gate(
        _floor_gate(tiny_profile),
        synthetic_steps(step_time=step_time),
        no_events(),
        _finished(),
        CPU_FINGERPRINT,
        5,
        200,
        spike_rule(tiny_profile),
        plan=plan,
        world_size=2,
    )


def test_floor_gate_shows_the_floor_terms_and_reports_a_floor_above_the_measurement_as_a_bug(tiny_profile):
    from zerogate.contracts.verdicts import FAIL, PASS

    plan = _hand_plan()
    steps_floor = floor(tiny_counts(), cpu_setup(), cpu_machine(GLOO))
    assert plan.floor == steps_floor
    above = steps_floor.optimizer_step_floor_s * 2
    judged = _judge_floor(tiny_profile, above, plan)
    assert judged.verdict == PASS and judged.measured == pytest.approx(2.0, rel=0.05)
    terms = judged.evidence.floor_terms
    assert terms["micro_step collectives x 8(s)"] == pytest.approx(
        8 * steps_floor.ranks[0].terms["collectives(s)"]
    )
    assert terms["boundary collectives(s)"] == steps_floor.boundary_terms["collectives(s)"]
    assert "optimizer cpu_adam(s)" in terms
    below = steps_floor.optimizer_step_floor_s / 2
    judged = _judge_floor(tiny_profile, below, plan)
    assert judged.verdict == FAIL and judged.measured == pytest.approx(0.5, rel=0.05)  # never clipped to 1
    assert "is above the measured step" in judged.reason and "bug" in judged.reason


def test_report_shows_the_floor_terms_beside_the_measured_step_and_each_figures_basis(
    tiny_profile, claim_box_plan
):
    from zerogate.report.html import section

    plan = _hand_plan()
    gate = _judge_floor(tiny_profile, 3 * plan.floor.optimizer_step_floor_s, plan)
    assert gate.statistic == "floor_ratio"
    page = section("floor_terms", [gate], plan, claim_box_plan)
    assert "id='floor-terms'" in page and "micro_step collectives x 8(s)" in page
    assert "measured / floor" in page and f"{gate.measured:.4g}" in page
    assert "id='floor-collectives-run'" in page and "(measured: hand-made)" in page
    claimed = page.split("id='floor-collectives-claimed'")[1]
    assert "(published: nccl-tests alltoall_perf" in claimed and "(derived: through host memory" in claimed
    assert section("floor_terms", [], None, None).strip() == ""  # no plan: no section


@pytest.fixture
def claim_box_plan():
    from zerogate.predict.planner import plan

    return plan(oracle_counts(), claim_setup(), load_description(CLAIM_BOX))


def test_the_floor_names_the_peak_it_used_and_a_missing_one_with_its_card(tmp_path):
    raw = load_description(CLAIM_BOX).plain()
    raw["gpus"][0]["name"] = "NVIDIA GeForce RTX 9999"
    raw["gpus"][1]["peaks"] = {"fp16": {"tflops": 165.2, "source": "our GEMM benchmark"}}
    result = floor(oracle_counts(), claim_setup(), check(raw, "mine.yaml"))
    unknown, stated = result.ranks
    assert unknown.terms["compute(s)"] is None and "NVIDIA GeForce RTX 9999" in unknown.peak_source
    assert any("rank 0" in m and "compute(s)" in m and "RTX 9999" in m for m in result.missing)
    assert stated.peak_source == "stated in the description 'claim-rtx5070-rtx4090' (our GEMM benchmark)"
    catalogued = floor(oracle_counts(), claim_setup(), load_description(CLAIM_BOX)).ranks[1]
    assert catalogued.peak_source.startswith("catalogue: RTX 4090 (NVIDIA Ada")
    # Half the catalogue's fp16 peak (330.3), so twice its compute time.
    assert stated.terms["compute(s)"] == pytest.approx(2 * catalogued.terms["compute(s)"], rel=1e-3)
    (tmp_path / "box.yaml").write_text(yaml.safe_dump(raw))
    from_file = floor(oracle_counts(), claim_setup(), load_description(tmp_path / "box.yaml")).ranks[1]
    assert from_file.peak_source == f"stated in {tmp_path / 'box.yaml'} (our GEMM benchmark)"
