"""The ledger against hand-computed counts and bytes, DeepSpeed's estimator and docs/reference.md's
oracles."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from deepspeed.accelerator import get_accelerator
from transformers import GPT2Config

from tests.conftest import CPU_FINGERPRINT, gpu_fingerprint
from tests.unit.helpers import render_profile, settings, step_record, table_of
from zerogate.analysis.ledger_check import (
    BUCKETS_EXCLUDED,
    compare,
    level_rows,
    peak_rows,
    read_measurements,
    with_peaks,
)
from zerogate.config.model_data import ModelSettings
from zerogate.config.settings import ProfileSettings
from zerogate.contracts.machine import Fingerprint
from zerogate.contracts.model import ModelCounts
from zerogate.contracts.plan import PeakPrediction, PredictedPeak
from zerogate.contracts.records import HeldBytes, LiveTensorPeak, column
from zerogate.contracts.run import DsConfig, RunSpec
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.predict.activation_figures import ActivationFigures, activation_bytes
from zerogate.predict.estimates import deepspeed_estimates, paper_ledger
from zerogate.predict.host_memory import retained_heap_bytes
from zerogate.predict.ledger import SOURCES_BY_MODULE, TERM_ORDER, TERM_SOURCES, ledger
from zerogate.predict.levels import peak_levels, peak_split, peak_terms
from zerogate.predict.peak import peak_prediction
from zerogate.predict.phases import PHASES, DeviceLevels, device_levels, phase_bytes
from zerogate.predict.setup import Setup, installed_deepspeed, release, setup_from_config
from zerogate.predict.zero_buffers import gathered_elements, reduction_bucket_factor
from zerogate.predict.zero_states import HOST_SETUP, overflow_check_bytes_per_element
from zerogate.predict.zero_terms import host_need_per_rank, model_state_bytes, zerogate_terms
from zerogate.render.deepspeed_defaults import deepspeed_defaults
from zerogate.units import GB, GIB, format_bytes

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data" / "held_bytes"
NO_STEPS = table_of([])  # a CPU run's steps table holds no allocator peaks
# The cpu-tiny profile's model (Llama, hidden 64 x 2 layers).
TINY = settings("cpu-tiny").model
QWEN14B = ModelSettings(
    architecture="qwen2",
    hidden_size=5120,
    num_hidden_layers=48,
    num_attention_heads=40,
    num_key_value_heads=8,
    intermediate_size=13824,
    vocab_size=152064,
    tie_word_embeddings=False,
)


def rendered(
    profile: str | dict | ProfileSettings = "cpu-tiny",
    fingerprint: Fingerprint = CPU_FINGERPRINT,
    overrides=(),
) -> tuple[DsConfig, RunSpec]:
    """The profile's claim config (a profile's name, a resolved profile or its settings) as
    render_deepspeed_config renders it for ``fingerprint``, with extra ``overrides`` ({path, value,
    reason}) after the profile's own."""
    rendered = render_profile(profile, fingerprint, overrides=overrides)
    return rendered.ds_config, rendered.run_spec


def recorded_ds_config() -> DsConfig:
    """The DeepSpeed config of the recorded 2-rank run (tests/data/held_bytes/README)."""
    return DsConfig.read(DATA / "ds_config.json")


def recorded_run_spec() -> RunSpec:
    """The recorded run's run spec, in today's contract: recorded before the spec carried its row length
    (the smoke geometry's 64 tokens) and its vocabulary (167, the README's), and while it still held the
    analysis-only warm-up cut."""
    old = json.loads((DATA / "run_spec.json").read_text())
    training = {k: v for k, v in old["training"].items() if k != "warmup_steps_excluded"}
    return RunSpec.of(
        {**old, "training": training, "seq_len": 64, "vocab_size": 167}, str(DATA / "run_spec.json")
    )


def recorded_held_bytes(tmp_path: Path) -> Path:
    """The ranks' recorded held bytes as HeldBytes files (recorded before the files carried their contract
    stamp): the directory read_measurements reads."""
    for path in sorted(DATA.glob("held_bytes_rank*.json")):
        HeldBytes.of(json.loads(path.read_text()), str(path)).write(tmp_path / path.name)
    return tmp_path


def recorded_counts() -> ModelCounts:
    spec = recorded_run_spec()
    return count_parameters(planned_model_config(spec.model, spec.vocab_size, spec.seq_len))


# Four parameters of 600, 300, 60 and 40 elements (1000 in all), no model shape: the offload and bucket terms'
# arithmetic by hand.
FOUR_PARAMETERS = ModelCounts(
    total=1000,
    largest_layer=600,
    numels=(600, 300, 60, 40),
    hidden=1,
    layers=1,
    heads=1,
    vocab=1,
    tied_embeddings=False,
)


def claim_setup(**changes) -> Setup:
    base = Setup(
        ranks=2,
        nodes=1,
        dtype="fp16",
        device_kind="cuda",
        micro_batch=1,
        seq_len=512,
        accumulation=8,
        stage=3,
        offload_optimizer=True,
        offload_param=True,
        pin_memory=True,
        reduce_bucket=5120**2,
        prefetch_bucket=int(0.9 * 5120**2),
        persistence_threshold=51200,
    )
    return dataclasses.replace(base, **changes)


def test_tiny_llama_count_by_hand():
    counts = count_parameters(planned_model_config(TINY, 256, 64))
    embed = 256 * 64  # embed_tokens; lm_head the same, untied
    layer = 4 * 64 * 64 + 3 * 64 * 192 + 2 * 64  # q k v o, gate up down, two RMSNorms
    assert counts.total == 2 * embed + 2 * layer + 64
    assert counts.largest_layer == embed
    assert not counts.tied_embeddings


def test_gpt2_tied_embeddings_counted_once_by_hand():
    counts = count_parameters(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=32))
    block = 2 * 128 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    assert counts.total == 256 * 64 + 32 * 64 + 2 * block + 128  # wte, wpe, blocks, ln_f; lm_head tied
    assert counts.tied_embeddings
    assert counts.largest_layer == 64 * 256 + 256  # mlp.c_fc with its bias beats wte (16384)


def test_qwen25_14b_shape_by_hand():
    counts = count_parameters(planned_model_config(QWEN14B, QWEN14B.vocab_size, 512))
    embed = 152064 * 5120
    layer = (5120 * 5120 + 5120) + 2 * (5120 * 1024 + 1024) + 5120 * 5120 + 3 * 5120 * 13824 + 2 * 5120
    assert counts.total == 2 * embed + 48 * layer + 5120 == 14_770_033_664
    assert counts.largest_layer == embed  # ~778.6 M, docs/reference.md section 1


def test_paper_ledger_matches_the_claims_worked_numbers():
    paper = paper_ledger(14 * 10**9, 2)
    assert paper["ddp"] / GIB == pytest.approx(208.6, abs=0.05)  # claim.md section 2
    assert paper["zero3"] / GIB == pytest.approx(104.3, abs=0.05)
    assert paper["zero1"] == 4 * 14e9 + 6 * 14e9 and paper["zero2"] == 2 * 14e9 + 7 * 14e9


def oracle_counts() -> ModelCounts:
    return ModelCounts(
        total=14 * 10**9,
        largest_layer=778_567_680,
        numels=(7 * 10**9, 7 * 10**9),
        hidden=5120,
        layers=48,
        heads=40,
        vocab=152064,
        tied_embeddings=False,
        first_dims=(7 * 10**9, 7 * 10**9),
        blocks=(-1, 0),
    )


def claim_counts() -> ModelCounts:
    """docs/reference.md's oracle (14e9 parameters, largest layer 778,567,680) as parameters of the claim's
    shape: an embedding and an LM head of the largest layer's size, 80 equal parameters between them."""
    largest = 778_567_680
    middle = (14 * 10**9 - 2 * largest) // 80
    # As count_parameters records them: the embedding and head of 152,064 rows outside the 48 decoder layers,
    # the 80 others (flat, their first dimension their size) spread over the layers in order.
    return ModelCounts(
        total=14 * 10**9,
        largest_layer=largest,
        numels=(largest, *(middle,) * 80, largest),
        hidden=5120,
        layers=48,
        heads=40,
        vocab=152064,
        tied_embeddings=False,
        first_dims=(152064, *(middle,) * 80, 152064),
        blocks=(-1, *(i * 48 // 80 for i in range(80)), -1),
    )


def test_deepspeed_estimator_matches_reference_oracles():
    estimates = deepspeed_estimates(oracle_counts(), gpus_per_node=2)
    full = estimates["zero3_offload_all"]
    assert full.device / GB == pytest.approx(3.11, abs=0.01)  # 4L
    assert full.host / GB == pytest.approx(378, abs=0.5)  # 18 Phi x 1.5
    # Same counts, DeepSpeed's formulas for the other schemes (docs/reference.md section 1).
    assert estimates["zero3"].device == 4 * 778_567_680 + 18 * 14 * 10**9 // 2
    assert estimates["zero3_offload_optimizer"].device == 4 * 778_567_680 + 2 * 14 * 10**9 // 2
    assert estimates["zero2"].device == 2 * 14 * 10**9 + 18 * 14 * 10**9 // 2
    assert estimates["ddp"] is None and estimates["zero1"] is None


def test_zerogate_host_is_24_bytes_per_parameter_with_accumulation():
    """docs/reference.md section 1's ~20 B/param (280 GB for 14e9) with accumulation, plus the fp32 gradient
    the ZeRO-3 optimizer steps on (4 B/param), which the smoke run's ranks were measured to hold."""
    terms = zerogate_terms(claim_counts(), claim_setup())
    offloaded = {k: v for k, v in terms.host.items() if k not in HOST_SETUP}
    assert offloaded == {
        "parameters": 14 * 10**9,
        "gradients": 28 * 10**9,
        "master_parameters": 28 * 10**9,
        "optimizer_states": 56 * 10**9,
        "optimizer_gradients": 28 * 10**9,
        "gradient_accumulation": 14 * 10**9,
    }  # 2 + 4 + 4 + 8 + 4 + 2 bytes x Phi / 2
    assert sum(offloaded.values()) * 2 == 336 * 10**9
    assert "parameters" not in terms.device  # offloaded
    single_step = zerogate_terms(claim_counts(), claim_setup(accumulation=1))
    assert sum(v for k, v in single_step.host.items() if k not in HOST_SETUP) * 2 == 22 * 14 * 10**9
    # Each rank's runtime (2 GiB with the CUDA libraries) beside the larger of its model build (4 x the
    # largest layer under zero.Init) and what it holds offloaded (168 GB).
    assert terms.host["host_runtime"] == 2 * GIB and terms.host["model_build"] == 4 * 778_567_680
    assert host_need_per_rank(terms, on_cpu=False) == 2 * GIB + 168 * 10**9


def test_host_ram_without_offload_is_the_runtime_and_the_model_as_built():
    """ZeRO-0/1/2 without offload keep nothing on the host in training, but each rank builds the whole model
    in fp32 there first (DeepSpeed's estimator: 4 Phi per GPU); under zero.Init only the largest layer."""
    counts = claim_counts()
    for stage in (0, 1, 2):
        terms = zerogate_terms(counts, claim_setup(stage=stage, offload_optimizer=False, offload_param=False))
        assert terms.host == {"host_runtime": 2 * GIB, "model_build": 4 * 14 * 10**9}
        assert host_need_per_rank(terms, on_cpu=False) == 2 * GIB + 56 * 10**9
    zero3 = zerogate_terms(counts, claim_setup(offload_optimizer=False, offload_param=False))
    assert host_need_per_rank(zero3, on_cpu=False) == 2 * GIB + 4 * 778_567_680
    full = ledger(counts, claim_setup())
    assert full.schemes["zero2"].zerogate.host_per_node_bytes == 2 * (2 * GIB + 56 * 10**9)


def test_zerogate_adds_what_the_estimator_leaves_out():
    counts, setup = claim_counts(), claim_setup()
    device = zerogate_terms(counts, setup).device
    assert set(device) == {
        "persistent_parameters",
        "gathered_parameters",
        "reduce_bucket",
        "largest_layer_gradient",
        "fp32_gradient_copy",
        "activations",
        "backward_transient",
        "activations_at_first_gradient",
        "backward_transient_after_first_gradient",
        "reduce_scatter_buffer",
        "last_gradient",
        "reduce_scatter_in_backward",
        "gathered_parameter_copies",
        "offloaded_partition_copies",
        "offload_gradient_device_copies",
        "offload_gradient_device_copies_in_backward",
        "zero3_offload_gradient_norm",
        "zero3_offload_gradient_norm_in_backward",
        "allocator_margin",
        "cross_stream_reserve",
        "cuda_context",
        "communicator",
    }
    # Optimizer offload: a reduced bucket's gradient partitions come back to the device from the fp32 host
    # buffer (4 bytes an element) and each one's norm is taken on an fp64 copy of at most 250e6 elements; at
    # the boundary the largest layer's partition (778,567,680 / 2 ranks), inside the backward a bucket's.
    assert device["offload_gradient_device_copies"] == 4 * 778_567_680 // 2
    assert device["zero3_offload_gradient_norm"] == 8 * 250_000_000
    assert device["offload_gradient_device_copies_in_backward"] == 4 * 5120**2 // 2
    assert device["zero3_offload_gradient_norm_in_backward"] == 8 * 5120**2 // 2
    # Parameter offload on CUDA: the rank's offloaded partitions of a fetch are copied to the device first.
    assert device["offloaded_partition_copies"] == -(-device["gathered_parameters"] // 4) * 2
    # The forward's fetch: its flat buffer and every parameter's copy out of it, the copies kept for reuse.
    assert device["gathered_parameter_copies"] == device["gathered_parameters"]
    # Korthikanti (the default source of hand-made counts): s b h (34 + 5 a s / h) per layer in 16-bit,
    # plus logits s b V (2 + 4 + 4).
    per_layer = 512 * 5120 * (34 + 5 * 40 * 512 / 5120)
    assert device["activations"] == int(48 * per_layer + 512 * 152064 * 10)
    checkpointed = activation_bytes(counts, setup, checkpointing=True)
    assert checkpointed == int(2 * 512 * 5120 * 48 + per_layer + 512 * 152064 * 10)
    # A loss on the 16-bit logits (no upcast): its log_softmax output and gradient in the dtype, s b V (2 + 2
    # + 2).
    own_loss = activation_bytes(counts, dataclasses.replace(setup, loss_in_fp32=False), checkpointing=False)
    assert own_loss == int(48 * per_layer + 512 * 152064 * 6)
    assert device["reduce_bucket"] == 2 * 5120**2  # the contiguous bucket, full size, 16-bit
    assert device["largest_layer_gradient"] == 2 * 778_567_680
    assert device["fp32_gradient_copy"] == 0  # optimizer offload: the host buffer is the copy
    # The lazily loaded CUDA context (pytorch PR 86509, issue 109888) and two NCCL communicators (the world
    # group and DeepSpeed's data-parallel clone), 544 MB each (NVIDIA/nccl issue 964).
    assert device["cuda_context"] == 400 * 2**20 and device["communicator"] == 2 * 544_000_000
    # The model (14e9) is larger than one bucket (5120^2 elements): a bucket is reduced inside the backward,
    # its
    # flat buffer (16-bit, no CPU copy on GPUs) beside the gathered parameters, the largest layer's gradient
    # and
    # the activations (untraced: all of them, none released before the first gradient).
    assert device["reduce_scatter_in_backward"] == device["reduce_scatter_buffer"] == 2 * 5120**2
    assert device["activations_at_first_gradient"] == device["activations"]
    levels = device_levels(device)
    backward = sum(
        device[k]
        for k in (
            "gathered_parameters",
            "offloaded_partition_copies",
            "largest_layer_gradient",
            "reduce_scatter_in_backward",
            "offload_gradient_device_copies_in_backward",
            "zero3_offload_gradient_norm_in_backward",
            "activations_at_first_gradient",
            "backward_transient_after_first_gradient",
        )
    )
    assert levels.tensor == device["persistent_parameters"] + device["reduce_bucket"] + backward
    # 15 % of the reserve holds no tensor (GMLake's average, zerogate.predict.cuda_terms)
    assert device["allocator_margin"] == int(levels.tensor * 0.15 / 0.85)
    # The all-gather stream's pool is largest in the forward (the fetch, the offloaded partitions' copies and
    # every parameter's copy, all made on that stream); the backward's peak holds all of it but the
    # parameters' copies, which stay reserved; the reduction pool's largest phase is held.
    assert device["cross_stream_reserve"] == device["gathered_parameter_copies"]
    assert levels.allocator == levels.tensor + device["allocator_margin"] + device["cross_stream_reserve"]
    assert levels.device == levels.allocator + 400 * 2**20 + device["communicator"]
    assert levels.device > deepspeed_estimates(counts, 2)["zero3_offload_all"].device
    # One rank opens its two communicators too (DeepSpeed reduces on its data-parallel group at every step).
    assert zerogate_terms(counts, claim_setup(ranks=1)).device["communicator"] == device["communicator"]


def test_one_rank_of_zero3_gathers_nothing():
    """On one rank a parameter is its partition (DeepSpeed's _no_gather_coalesced): no fetch buffer and no
    copy; with parameter offload on CUDA each partition's device copy, counted as the gathered copies."""
    counts = claim_counts()
    for offload_param, device_kind in ((False, "cuda"), (True, "cpu")):
        setup = claim_setup(ranks=1, offload_param=offload_param, device_kind=device_kind)
        device = zerogate_terms(counts, setup).device
        assert device["gathered_parameters"] == device["gathered_parameter_copies"] == 0
        assert "offloaded_partition_copies" not in device
    one = zerogate_terms(counts, claim_setup(ranks=1)).device
    two = zerogate_terms(counts, claim_setup(ranks=2)).device
    assert one["gathered_parameters"] == 0 and "offloaded_partition_copies" not in one
    assert one["gathered_parameter_copies"] == two["gathered_parameter_copies"] > 0
    assert two["gathered_parameters"] > 0 and two["offloaded_partition_copies"] > 0


def test_tied_embeddings_hold_the_output_embeddings_gradient_through_the_backward():
    """A tied weight's two gradient contributions coexist: the output embedding's, from the backward's start,
    and the input embedding's at its end (autograd sums them before the one AccumulateGrad)."""
    untied = zerogate_terms(claim_counts(), claim_setup()).device
    tied_counts = claim_counts().model_copy(update={"tied_embeddings": True})
    for stage in (0, 1, 2, 3):
        tied = zerogate_terms(tied_counts, claim_setup(stage=stage, offload_param=stage == 3)).device
        assert tied["tied_weight_gradient"] == 2 * 152064 * 5120  # fp16, the embedding's shape
    tied = zerogate_terms(tied_counts, claim_setup()).device
    assert "tied_weight_gradient" not in untied
    assert (
        device_levels(tied).tensor - device_levels(untied).tensor == tied["tied_weight_gradient"]
    )  # micro-step


def test_the_tensor_peak_is_the_persistent_terms_and_the_larger_phase():
    device = {
        "parameters": 100,
        "optimizer_states": 200,
        "activations": 50,
        "gathered_parameters": 30,
        "fp32_gradient_copy": 70,
        "allocator_margin": 9,
        "cuda_context": 1000,
        "communicator": 10,
    }
    assert device_levels(device) == DeviceLevels(tensor=380, allocator=389, device=1399)  # 300 + max(80, 70)
    device["fp32_gradient_copy"] = 90
    assert device_levels(device).tensor == 390  # the optimizer step's copy outgrows the micro-step's terms


def test_fp32_gradient_copies_by_stage_and_precision():
    """fused_optimizer.py (ZeRO-0), stage_1_and_2.py, stage3.py: counted by hand on a 4-parameter model."""
    counts = FOUR_PARAMETERS

    def copy(**changes):
        setup = claim_setup(**{"offload_optimizer": False, "offload_param": False, **changes})
        return zerogate_terms(counts, setup).device["fp32_gradient_copy"]

    # ZeRO-0 in fp16: every gradient's fp32 copy (4 Phi) and their flat concatenation (4 Phi) at once.
    assert copy(stage=0) == 8 * 1000
    assert copy(stage=0, dtype="fp32") == 0  # a plain fp32 optimizer copies nothing
    # ZeRO-1/2: the flat partition (2 B per element of Phi/N = 500) and its fp32 conversion (4 B).
    assert copy(stage=1) == copy(stage=2) == (2 + 4) * 500
    assert copy(stage=2, dtype="fp32") == 4 * 500  # .to(fp32) of an fp32 tensor is the flattened one
    # ZeRO-3: the same per sub-group; the partition pads each parameter to the ranks (300 + 150 + 30 + 20).
    assert copy(stage=3) == (2 + 4) * 500
    assert copy(stage=3, sub_group_size=200) == (2 + 4) * 200
    assert copy(stage=3, offload_optimizer=True) == 0


def test_zero12_optimizer_offload_passes_gradients_through_buffers_of_the_largest_parameter():
    """stage_1_and_2.py with cpu offload, counted by hand on a 4-parameter model over 2 ranks: a device and a
    host buffer of the largest parameter held for the run, and each gradient slice copied to fp64 for its
    norm, then (16-bit) to fp32, on the device (at most the largest parameter, at most the rank's partition)
    before its copy to the host: the fp64 copy is the larger of the two, which do not coexist."""
    counts = FOUR_PARAMETERS

    def terms(**changes):
        return zerogate_terms(counts, claim_setup(**{"offload_param": False, "ranks": 2, **changes}))

    for stage in (1, 2):
        offloaded = terms(stage=stage, offload_optimizer=True, dtype="fp16")
        assert offloaded.device["offload_gradient_buffer"] == 2 * 600
        assert offloaded.device["offload_gradient_conversion"] == 8 * 500  # the partition is 500 elements
        assert offloaded.host["offload_gradient_staging"] == 2 * 600
        assert "offload_gradient_staging" in offloaded.pinned
        # In fp32 the fp32 conversion is a no-op; the fp64 norm copy is not.
        assert (
            terms(stage=stage, offload_optimizer=True, dtype="fp32").device["offload_gradient_conversion"]
            == 8 * 500
        )
        assert "offload_gradient_buffer" not in terms(stage=stage, offload_optimizer=False).device
        # The copies happen as a bucket is reduced: at the boundary beside the buckets (the last bucket, after
        # the backward), and inside the backward too only when the model is larger than one bucket.
        boundary = phase_bytes(offloaded.device)["boundary"]
        assert boundary == offloaded.device["gradient_reduction_buckets"] + 8 * 500
        assert (
            "offload_gradient_conversion_in_backward" not in offloaded.device
        )  # 1000 elements, a 5120^2 bucket
        small_bucket = terms(stage=stage, offload_optimizer=True, dtype="fp16", reduce_bucket=400).device
        assert small_bucket["offload_gradient_conversion_in_backward"] == 8 * 500
    zero3 = terms(stage=3, offload_optimizer=True)
    assert not {"offload_gradient_buffer", "offload_gradient_conversion"} & set(zero3.device)
    assert "offload_gradient_staging" not in zero3.host


def test_an_older_deepspeeds_elementwise_overflow_check_is_planned_for_that_release_only():
    """stage_1_and_2.py _has_inf_or_nan of one gradient, per element, by release: float(x.float().sum())
    before
    0.13.3 (the fp32 copy of a 16-bit gradient), x.float() + isnan + isinf + logical_or + .float() from 0.13.3
    (4 + 1 + 1 + 1 + 4 in 16-bit; in fp32 x.float() is x), two scalar reductions from 0.19.6."""
    assert [
        overflow_check_bytes_per_element(version, 2)
        for version in ((0, 3, 13), (0, 13, 2), (0, 13, 3), (0, 19, 5), (0, 19, 6), (0, 19, 8))
    ] == [4, 4, 11, 11, 0, 0]
    assert [
        overflow_check_bytes_per_element(version, 4) for version in ((0, 12, 6), (0, 18, 3), (0, 19, 6))
    ] == [0, 7, 0]
    assert release("0.19.8+cpu") == (0, 19, 8) and release("0.3.13") < release("0.13.3") < release("0.19.6")
    # On a 4-parameter model over 2 ranks (largest parameter 600, partition 500): the check of the whole
    # largest gradient follows its slice's fp64 copy, so the term is what it needs above that copy, where the
    # copy is.
    counts = FOUR_PARAMETERS

    def device(version, **changes):
        setup = claim_setup(
            offload_param=False,
            ranks=2,
            stage=2,
            offload_optimizer=True,
            dtype="bf16",
            deepspeed_version=version,
            **changes,
        )
        return zerogate_terms(counts, setup).device

    assert device((0, 18, 3))["offload_overflow_check"] == 11 * 600 - 8 * 500
    assert (
        phase_bytes(device((0, 18, 3)))["boundary"]
        == phase_bytes(device(None))["boundary"] + 11 * 600 - 8 * 500
    )
    assert "offload_overflow_check_in_backward" not in device((0, 18, 3))  # the model fits one bucket
    assert device((0, 18, 3), reduce_bucket=400)["offload_overflow_check_in_backward"] == 11 * 600 - 8 * 500
    # Before 0.13.3 the fp32 copy (4 x 600) is less than the fp64 copy (8 x 500): nothing above it.
    assert "offload_overflow_check" not in device((0, 3, 13))
    # The installed release (0.19.6 or later) and an unnamed one, which is the installed one, hold none.
    assert installed_deepspeed() >= (0, 19, 6)
    assert not {"offload_overflow_check", "offload_overflow_check_in_backward"} & set(device(None))
    assert not {"offload_overflow_check"} & set(
        zerogate_terms(counts, claim_setup(deepspeed_version=(0, 18, 3))).device
    )


def test_zero2_buckets_of_deepspeed_0_3_hold_four_and_a_half_buckets_from_the_backwards_start_to_its_end():
    """stage2.py of 0.3.0-0.3.16 allocates each contiguous-gradient bucket as
    torch.empty(int(reduce_bucket_size * 4.5)) before the loss's backward and releases it at the backward's
    epilogue; 0.2.0 and 0.4.0 on allocate reduce_bucket_size elements from the first gradient to the step."""
    assert [
        reduction_bucket_factor(v)
        for v in ((0, 2, 0), (0, 3, 0), (0, 3, 13), (0, 3, 16), (0, 4, 0), (0, 19, 8))
    ] == [1.0, 4.5, 4.5, 4.5, 1.0, 1.0]
    counts = FOUR_PARAMETERS

    def device(version, **changes):
        setup = claim_setup(
            **{
                "offload_param": False,
                "offload_optimizer": False,
                "ranks": 1,
                "stage": 2,
                "reduce_bucket": 200,
                "overlap_comm": True,
                "deepspeed_version": version,
                **changes,
            }
        )
        return zerogate_terms(counts, setup).device

    old, new = device((0, 3, 13)), device(None)
    assert (
        old["gradient_reduction_buckets_per_backward"] == 2 * 2 * 900
        and "gradient_reduction_buckets" not in old
    )
    assert (
        new["gradient_reduction_buckets"] == 2 * 2 * 200
        and "gradient_reduction_buckets_per_backward" not in new
    )
    old_phases, new_phases = phase_bytes(old), phase_bytes(new)
    # From the backward's start (before its first gradient) in 0.3.x; only from the first gradient now.
    assert old_phases["backward"] - new_phases["backward"] == 2 * 2 * 900
    assert (
        old_phases["backward_from_first_gradient"] - new_phases["backward_from_first_gradient"] == 2 * 2 * 700
    )
    assert old_phases["boundary"] - new_phases["boundary"] == 2 * 2 * 700
    # Released at the backward's end in 0.3.x: the optimizer step does not hold them.
    assert new_phases["optimizer_step"] - old_phases["optimizer_step"] == 2 * 2 * 200
    assert device((0, 3, 13), overlap_comm=False)["gradient_reduction_buckets_per_backward"] == 2 * 900
    # ZeRO-1 was zero/stage1.py then, a different optimizer: the factor is stage2.py's only.
    assert device((0, 3, 13), stage=1)["gradient_reduction_buckets"] == 2 * 2 * 200
    # Every term a phase names says where it comes from.
    assert {name for names in PHASES.values() for name in names} <= set(TERM_SOURCES)


def test_each_term_is_sourced_once_beside_its_terms_and_listed_once_in_the_plan():
    names = [name for sources in SOURCES_BY_MODULE for name in sources]
    assert len(names) == len(set(names))  # no term sourced in two modules
    assert sorted(TERM_ORDER) == sorted(names) and list(TERM_SOURCES) == list(TERM_ORDER)
    # Every term the ledger computes, for any scheme, says where it comes from.
    for scheme in ("ddp", "zero1", "zero2_offload_optimizer", "zero3", "zero3_offload_all"):
        terms = zerogate_terms(claim_counts(), claim_setup().with_scheme(scheme))
        assert set(terms.device) | set(terms.host) | set(terms.nvme) <= set(TERM_SOURCES)


def test_gathered_parameters_within_the_reuse_distance_and_the_live_limit():
    counts = ModelCounts(
        total=1115,
        largest_layer=1000,
        numels=(1000, 100, 10, 5),
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=False,
    )
    setup = claim_setup(prefetch_bucket=5, persistence_threshold=50, ranks=2)
    # DeepSpeed's default reuse distance (1e9 elements): both non-persistent parameters stay gathered, plus
    # the prefetch bucket.
    assert gathered_elements(counts, setup) == 1100 + 5
    assert zerogate_terms(counts, setup).device["gathered_parameters"] == 2 * (1100 + 5)
    # A short distance releases each after use: the largest one plus the prefetch bucket.
    assert gathered_elements(counts, dataclasses.replace(setup, max_reuse_distance=10)) == 1000 + 5
    # stage3_max_live_parameters caps what is prefetched beyond what is held.
    assert gathered_elements(counts, dataclasses.replace(setup, max_live_parameters=1102)) == 1100 + 2
    assert gathered_elements(counts, dataclasses.replace(setup, max_live_parameters=10)) == 1100
    # Never more than the model.
    assert gathered_elements(counts, dataclasses.replace(setup, prefetch_bucket=10**6)) == 1115


def test_nvme_offload_is_a_tier_of_its_own_with_pinned_swap_buffers():
    counts, setup = claim_counts(), claim_setup(nvme_optimizer=True, nvme_param=True)
    terms = zerogate_terms(counts, setup)
    share = 7 * 10**9
    assert terms.nvme == {
        "parameters": 2 * share,
        "master_parameters": 4 * share,
        "optimizer_states": 8 * share,
    }
    assert "optimizer_states" not in terms.host and "parameters" not in terms.host
    assert terms.host["gradients"] == 4 * share  # the flat fp32 gradient buffer stays in host RAM
    # offload_param: 5 buffers x 1e8 elements x 2 B; offload_optimizer: 4 buffers x a sub-group (1e9) x 4 B.
    swap = 5 * 10**8 * 2 + 4 * 10**9 * 4
    assert terms.host["nvme_swap_buffers"] == swap and terms.pinned["nvme_swap_buffers"] == swap
    assert ledger(counts, setup).schemes["zero3_offload_all"].zerogate.nvme_per_node_bytes == 2 * 14 * share


def test_zero_keeps_a_separate_fp32_master_even_in_fp32_and_zero0_only_in_16_bit():
    """stage_1_and_2.py clones the fp32 master partition always; stage3.py reuses the partition only when its
    torch.device equals a device-name string, which it never does; ZeRO-0's fp32 optimizer steps on the
    parameters themselves."""
    counts = oracle_counts()
    for stage in (1, 2, 3):
        fp32 = zerogate_terms(
            counts, claim_setup(stage=stage, dtype="fp32", offload_optimizer=False, offload_param=False)
        )
        share = fp32.device["optimizer_states"] // 8
        assert fp32.device["master_parameters"] == 4 * share
    zero0 = claim_setup(stage=0, offload_optimizer=False, offload_param=False)
    assert zerogate_terms(counts, dataclasses.replace(zero0, dtype="fp32")).device["master_parameters"] == 0
    assert zerogate_terms(counts, zero0).device["master_parameters"] == 4 * 14 * 10**9

    assert torch.zeros(1).device != get_accelerator().current_device_name()  # stage3.py's comparison


def test_leaf_decoder_layers_are_gathered_whole():
    counts = count_parameters(planned_model_config(TINY, 256, 64))
    h, i = 64, 192
    assert counts.largest_block == 4 * h * h + 3 * h * i + 2 * h  # attention, MLP, two norms
    # The claim's config on GPUs (no CPU tuning) declares no leaf module beyond DeepSpeed's defaults...
    gpus = gpu_fingerprint(("NVIDIA GeForce RTX 4090", 24), ("NVIDIA GeForce RTX 4090", 24))
    ds, spec = rendered(fingerprint=gpus)
    assert not setup_from_config(ds, spec).leaf_blocks
    # ...a profile override declaring the decoder layer one does.
    leaf_override = {
        "path": "zero_optimization.leaf_module",
        "value": {"classes": ["LlamaDecoderLayer"]},
        "reason": "gather a decoder layer whole",
    }
    ds, spec = rendered(fingerprint=gpus, overrides=[leaf_override])
    assert setup_from_config(ds, spec).leaf_blocks
    # Released after each use (a reuse distance of 1 element) and nothing prefetched: a whole layer at once
    # with leaf layers, the largest single parameter (the embedding) without.
    setup = claim_setup(max_reuse_distance=1, prefetch_bucket=0, persistence_threshold=0)
    leaf = dataclasses.replace(setup, leaf_blocks=True)
    assert zerogate_terms(counts, leaf).device["gathered_parameters"] == 2 * counts.largest_block
    assert zerogate_terms(counts, setup).device["gathered_parameters"] == 2 * counts.largest_layer


def test_zero3_pads_each_parameter_to_the_ranks():
    counts = ModelCounts(
        total=7, largest_layer=5, numels=(5, 2), hidden=1, layers=1, heads=1, vocab=1, tied_embeddings=False
    )
    assert counts.partition_numel(2) == 3 + 1
    assert counts.partition_numel(4) == 2 + 1


def test_every_scheme_has_all_three_ledgers():
    full = ledger(oracle_counts(), claim_setup())
    assert full.scheme == "zero3_offload_all"
    assert list(full.schemes) == [
        "ddp",
        "zero1",
        "zero2",
        "zero2_offload_optimizer",
        "zero3",
        "zero3_offload_optimizer",
        "zero3_offload_all",
    ]
    zero3 = full.schemes["zero3"]
    assert zero3.paper.device_per_rank_bytes == 16 * 7 * 10**9
    assert zero3.deepspeed.device_per_rank_bytes == 4 * 778_567_680 + 9 * 14 * 10**9
    assert zero3.zerogate.device_per_rank_bytes > zero3.paper.device_per_rank_bytes
    ddp = full.schemes["ddp"].zerogate.device_terms_bytes
    assert ddp["parameters"] == 2 * 14 * 10**9 and ddp["optimizer_states"] == 8 * 14 * 10**9


def test_setup_reads_the_rendered_config():
    setup = setup_from_config(recorded_ds_config(), recorded_run_spec())
    assert setup.scheme == "zero3_offload_all" and setup.dtype == "fp32" and setup.ranks == 2
    assert setup.reduce_bucket == 64**2 and setup.accumulation == 8 and setup.device_kind == "cpu"
    assert setup.seq_len == 64  # the run spec's row length


def test_setup_takes_the_precision_of_the_rendered_config():
    """The precision the ledger sizes is the rendered config's after the profile's overrides: fp16 turned
    off (fp32) or bf16 turned on changes the run spec's dtype, and with it every dtype-dependent term."""
    gpus = gpu_fingerprint(("NVIDIA GeForce RTX 4090", 24), ("NVIDIA GeForce RTX 4090", 24))
    ds, spec = rendered(fingerprint=gpus)
    assert ds.dtype == spec.dtype == setup_from_config(ds, spec).dtype == "fp16"  # the claim's fp16
    fp32 = {"path": "fp16.enabled", "value": False, "reason": "train in fp32"}
    ds32, spec32 = rendered(fingerprint=gpus, overrides=[fp32])
    assert ds32.dtype == spec32.dtype == setup_from_config(ds32, spec32).dtype == "fp32"
    bf16 = [fp32, {"path": "bf16.enabled", "value": True, "reason": "train in bf16"}]
    ds16, spec16 = rendered(fingerprint=gpus, overrides=bf16)
    assert ds16.dtype == spec16.dtype == setup_from_config(ds16, spec16).dtype == "bf16"
    counts = count_parameters(planned_model_config(spec.model, spec.vocab_size, spec.seq_len))
    half = zerogate_terms(counts, setup_from_config(ds, spec))
    full = zerogate_terms(counts, setup_from_config(ds32, spec32))
    assert full.host["parameters"] == 2 * half.host["parameters"]  # 4 bytes per parameter, not 2
    assert full.device["gathered_parameters"] == 2 * half.device["gathered_parameters"]
    assert zerogate_terms(counts, setup_from_config(ds16, spec16)) == half  # bf16 and fp16: both 2 bytes


def test_prediction_matches_what_the_ranks_held_on_the_cpu_default(tmp_path):
    """Recorded from a real 2-rank run (tests/data/held_bytes/README): within 5 %, per term and rank."""
    counts = recorded_counts()
    setup = setup_from_config(recorded_ds_config(), recorded_run_spec())
    measured = read_measurements(recorded_held_bytes(tmp_path), NO_STEPS)
    table = compare(counts, setup, measured)
    assert {r["rank"] for r in table["rows"]} == {0, 1}
    assert table["within_5_percent"] is True
    assert all(abs(r["error(%)"]) <= 5 for r in table["rows"])
    # A wrong prediction is caught: fp16 parameters would be half the bytes the ranks hold.
    wrong = compare(counts, dataclasses.replace(setup, dtype="fp16"), measured)
    assert wrong["within_5_percent"] is False


def test_model_state_bytes_of_the_tiny_default():
    counts = recorded_counts()
    assert counts.total == 128192  # the README's count (vocabulary 167)
    setup = setup_from_config(recorded_ds_config(), recorded_run_spec())
    share = 128192 // 2
    assert model_state_bytes(counts, setup) == {
        "parameters(bytes)": 4 * share,
        "master_parameters(bytes)": 4 * share,
        "gradients(bytes)": 4 * share,
        "optimizer_states(bytes)": 8 * share,
    }


def test_figures_show_binary_and_decimal_units():
    assert format_bytes(112 * 10**9) == "104.31 GiB (112.00 GB)"
    assert format_bytes(1_281_920) == "1.22 MiB (1.28 MB)"
    assert format_bytes(None) == "—"


def test_gpu_peaks_are_compared_level_by_level():
    """GPU-shaped step records (no GPU here): each level's prediction against the max over steps of the
    column with its definition: max_allocated (tensors), max_reserved (allocator), NVML (device)."""

    steps = table_of(
        [
            step_record(
                step=1, rank=0, max_allocated_gib=9.0, max_reserved_gib=10.0, nvml_process_peak_gib=11.0
            ),
            step_record(
                step=2, rank=0, max_allocated_gib=10.5, max_reserved_gib=11.0, nvml_process_peak_gib=12.5
            ),
        ]
    )
    measured = read_measurements(
        Path("/nonexistent"), steps
    )  # parse_logs' steps table: the peaks come from measures
    assert measured[0]["peaks"] == {"tensor": 10.5 * GIB, "allocator": 11.0 * GIB, "device": 12.5 * GIB}
    prediction = peak_prediction(claim_counts(), claim_setup(), None)
    levels = device_levels(zerogate_terms(claim_counts(), claim_setup()).device)
    rows = level_rows(prediction, measured, steps)
    assert [r["level"] for r in rows] == ["tensor", "allocator", "device"]
    for row, level, measured_gib in zip(rows, ("tensor", "allocator", "device"), (10.5, 11.0, 12.5)):
        assert row["predicted(bytes)"] == getattr(levels, level) == prediction.levels[level].predicted_bytes
        assert row["error(%)"] == pytest.approx(
            100 * (getattr(levels, level) - measured_gib * GIB) / (measured_gib * GIB)
        )
    table = with_peaks(compare(claim_counts(), claim_setup(), measured), prediction, steps, measured)
    assert table.within_5_percent is None  # no held tensors: nothing to judge the model states by
    assert set(table.level_max_abs_error_percent) == {"tensor", "allocator", "device"}
    # The headline figure is the level its metric measures: max_reserved, the allocator's (not the device's,
    # which adds the CUDA context and the communicator).
    assert prediction.metric == column("max_reserved_gib")
    assert prediction.total_bytes == levels.allocator < levels.device
    assert prediction.persistent_bytes + prediction.transient_bytes == prediction.total_bytes


def test_the_cpu_tensor_peak_is_compared_with_the_sampled_step_and_without_the_buckets(tmp_path):
    counts = recorded_counts()
    setup = setup_from_config(recorded_ds_config(), recorded_run_spec())
    prediction = peak_prediction(counts, setup, None)
    tensor = prediction.levels["tensor"]
    bucket = tensor.terms_bytes["reduce_bucket"]
    assert bucket == 4 * setup.reduce_bucket  # the live-tensor count sees the whole torch.empty
    assert prediction.terms_bytes["reduce_bucket"] == 4 * min(
        counts.total, setup.reduce_bucket
    )  # the resident set
    LiveTensorPeak(
        rank=0,
        step=41,
        peak_bytes=tensor.predicted_bytes + 1000,
        at_start_bytes=0,
        buffers_bytes={"reduce_bucket": bucket},
        seconds=1.0,
        how="a test's",
    ).write(tmp_path / "live_tensors_rank0.json")
    steps = _peak_steps([1.0], [0.9])
    rows = level_rows(prediction, read_measurements(tmp_path, steps), steps)
    by_level = {(r["rank"], r["level"]): r for r in rows}
    assert by_level[0, "tensor"]["measured(bytes)"] == tensor.predicted_bytes + 1000
    less = by_level[0, BUCKETS_EXCLUDED]
    assert (
        less["predicted(bytes)"] == tensor.predicted_bytes - bucket
        and less["measured(bytes)"] == less["predicted(bytes)"] + 1000
    )
    assert by_level[1, "resident_set"]["measured(bytes)"] == int(
        1.0 * GIB
    )  # every rank's VmHWM, live tensors or not


def _peak_steps(peaks: list[float], ends: list[float], allocator_free: float | None = None):
    """Two ranks' step records with these per-window peaks and end-of-window resident sets (GiB)."""
    return table_of(
        [
            step_record(step=s + 1, rank=r, peak_rss_gib=p, rss_gib=e, allocator_free_gib=allocator_free)
            for r in (0, 1)
            for s, (p, e) in enumerate(zip(peaks, ends))
        ]
    )


def _prediction(persistent: float, transient: float, retained_heap: float = 0.0) -> PeakPrediction:
    terms = {"runtime_baseline": int((persistent - retained_heap) * GIB), "activations": int(transient * GIB)}
    if retained_heap:
        terms["retained_heap"] = int(retained_heap * GIB)
    split = peak_split(terms)
    return PeakPrediction(
        scheme="zero3_offload_all",
        ranks=2,
        accelerator="cpu",
        metric=column("peak_rss_gib"),
        what="resident-set peak of the rank's process (VmHWM)",
        terms_bytes=terms,
        persistent_bytes=split.persistent,
        transient_bytes=split.transient,
        total_bytes=split.total,
        runtime_baseline=None,
        levels={
            "resident_set": PredictedPeak(
                predicted_bytes=split.total, terms_bytes=terms, what="resident-set peak"
            )
        },
    )


def test_peak_rows_within_tolerance_and_outside_it_name_the_part_that_is_off():
    steps = _peak_steps([1.0, 1.1, 1.05], [0.9, 1.0, 1.0])  # run peak 1.1 GiB at step 2, 1.0 held after it
    close = peak_rows(_prediction(1.0, 0.1), steps)
    assert [r["rank"] for r in close] == [0, 1]
    assert (
        close[0]["error(%)"] == pytest.approx(0.0, abs=1e-6)
        and close[0]["within_tolerance"]
        and close[0]["off"] is None
    )
    low = peak_rows(_prediction(0.6, 0.1), steps)  # persistent 0.4 GiB short
    assert not low[0]["within_tolerance"] and low[0]["error(%)"] == pytest.approx(-100 * 0.4 / 1.1)
    assert (
        low[0]["diagnosis"]["off"] == "persistent"
        and "under-predicted" in low[0]["off"]
        and "step 2" in low[0]["off"]
    )
    high = peak_rows(_prediction(1.0, 0.6), steps)  # transient 0.5 GiB over
    assert high[0]["diagnosis"]["off"] == "transient" and "over-predicted" in high[0]["off"]
    model_states = compare(
        recorded_counts(), setup_from_config(recorded_ds_config(), recorded_run_spec()), {}
    )
    table = with_peaks(model_states, _prediction(0.6, 0.1), steps)
    assert table.peak.within_tolerance is False and table.peak.max_abs_error_percent > 15


def test_a_persistent_miss_says_how_much_of_it_the_allocator_kept_free():
    # Of the 1.0 GiB held after step 2, 0.3 GiB freed and kept by the allocator.
    steps = _peak_steps([1.0, 1.1, 1.05], [0.9, 1.0, 1.0], allocator_free=0.3)
    low = peak_rows(_prediction(0.6, 0.1), steps)[0]  # persistent 0.4 GiB short
    assert low["diagnosis"]["parts"]["persistent"]["allocator_free(bytes)"] == int(0.3 * GIB)
    assert "307.20 MiB (322.12 MB) is freed memory the C allocator kept" in low["off"]
    assert "leaves the persistent terms 102.40 MiB (107.37 MB) short" in low["off"]
    # Beside the prediction: the prediction plus the measured freed memory, and its error (1.0 vs 1.1 GiB).
    assert low["with_allocator_free(bytes)"] == int(0.7 * GIB) + int(0.3 * GIB)
    assert low["with_allocator_free_error(%)"] == pytest.approx(-100 * 0.1 / 1.1, abs=1e-6)
    # Freed memory that explains the persistent miss leaves the transient part as the one that is off.
    steps = _peak_steps([1.0, 1.1, 1.05], [0.9, 1.0, 1.0], allocator_free=0.45)
    both = peak_rows(_prediction(0.6, 0.05), steps)[
        0
    ]  # persistent 0.4 short (freed memory covers it), transient 0.05 short
    assert both["diagnosis"]["off"] == "transient" and "persistent terms 0 B short" in both["off"], both[
        "off"
    ]
    # Without the record (older runs, no glibc) the note says nothing of it.
    steps = _peak_steps([1.0, 1.1, 1.05], [0.9, 1.0, 1.0], allocator_free=None)
    unrecorded = peak_rows(_prediction(0.6, 0.1), steps)[0]
    assert "allocator" not in unrecorded["off"] and unrecorded["with_allocator_free(bytes)"] is None
    # An over-prediction is not explained by freed memory.
    steps = _peak_steps([1.0, 1.1, 1.05], [0.9, 1.0, 1.0], allocator_free=0.3)
    assert "allocator" not in peak_rows(_prediction(1.5, 0.1), steps)[0]["off"]
    # A predicted retained heap (0.2 of the 0.6 GiB persistent) is what the measured freed memory stands in
    # for: the column beside is 0.6 - 0.2 + 0.3 + 0.1 GiB, and only the 0.1 GiB measured above the predicted
    # heap explains the persistent miss.
    predicted_heap = peak_rows(_prediction(0.6, 0.1, retained_heap=0.2), steps)[0]
    assert predicted_heap["with_allocator_free(bytes)"] == pytest.approx(0.8 * GIB, abs=4)
    assert "predicted as retained_heap: 204.80 MiB" in predicted_heap["off"]
    assert "leaves the persistent terms 307.20 MiB (322.12 MB) short" in predicted_heap["off"]


def test_the_cpu_peak_counts_what_zero3_keeps_gathered():
    # test_floor_comms imports this module: importing it back at the top would be circular.
    from tests.unit.test_floor_comms import cpu_setup

    model = ModelCounts(
        total=1115,
        largest_layer=1000,
        numels=(1000, 100, 10, 5),
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=False,
    )
    setup = cpu_setup(prefetch_bucket=5, persistence_threshold=50)
    # DeepSpeed's default reuse distance (1e9 elements): both non-persistent parameters stay gathered.
    assert peak_terms(model, setup, 0)["gathered_parameters"] == 4 * (1100 + 5)
    # A short distance releases each after use: the largest one plus the prefetch bucket.
    short = dataclasses.replace(setup, max_reuse_distance=10)
    assert peak_terms(model, short, 0)["gathered_parameters"] == 4 * (1000 + 5)
    # Never more than the model.
    assert (
        peak_terms(model, dataclasses.replace(setup, prefetch_bucket=10**6), 0)["gathered_parameters"]
        == 4 * 1115
    )


def test_a_rendered_reuse_distance_reaches_the_setup():
    ds, spec = rendered()
    assert "stage3_max_reuse_distance" not in ds.raw["zero_optimization"]
    assert setup_from_config(ds, spec).max_reuse_distance == deepspeed_defaults().max_reuse_distance
    distance = {
        "path": "zero_optimization.stage3_max_reuse_distance",
        "value": 1234,
        "reason": "release early",
    }
    ds, spec = rendered(overrides=[distance])
    assert setup_from_config(ds, spec).max_reuse_distance == 1234


def test_peak_terms_on_gpus_are_the_device_terms():
    counts, setup = claim_counts(), claim_setup()
    terms = peak_terms(counts, setup, None)
    assert terms == zerogate_terms(counts, setup).device and "runtime_baseline" not in terms


def test_the_heap_keeps_the_per_parameter_copies_while_the_optimizers_mapped_copy_comes_and_goes():
    """glibc keeps a freed storage of at most 32 MiB resident and unmaps a larger one (zerogate.runtime.heap):
    a phase of small storages and a later phase of a large one leave the resident set at the sum of the two
    size classes' peaks, the tensor peak at the larger phase."""
    # test_floor_comms imports this module: importing it back at the top would be circular.
    from tests.unit.test_floor_comms import cpu_setup

    mib = 2**20
    # Two parameters in fp32: 8 Mi elements (32 MiB, the heap's largest) and 16 Mi (64 MiB, mapped).
    model = ModelCounts(
        total=24 * mib,
        largest_layer=16 * mib,
        numels=(8 * mib, 16 * mib),
        hidden=1,
        layers=1,
        heads=1,
        vocab=1,
        tied_embeddings=False,
    )
    setup = cpu_setup()
    copies, step_copy = (
        96 * mib,
        100 * mib,
    )  # every parameter's gathered copy; the optimizer step's flat fp32 copy
    terms = {"parameters": 48 * mib, "gathered_parameter_copies": copies, "fp32_gradient_copy": step_copy}
    # The heap's peak is the 32 MiB parameter's copy, the mapped class's the step's copy (above the 64 MiB
    # one): 32 + 100 MiB resident, 100 MiB of it the tensor peak's transient.
    assert retained_heap_bytes(terms, model, setup, {}) == 32 * mib
    # A 30 MiB step copy is the heap's too: the heap then peaks at 32 MiB, the mapped class at 64 MiB.
    small_step = {**terms, "fp32_gradient_copy": 30 * mib}
    assert retained_heap_bytes(small_step, model, setup, {}) == 0
    # Not predicted where the activations are not traced (no size classes).
    assert retained_heap_bytes(terms, model, setup, None) is None

    # Through peak_terms: traced activations bring their classes, the resident set holds the retained heap
    # and the tensor peak does not.
    tiny = count_parameters(planned_model_config(TINY, 256, 64))
    classes = {
        "forward": {"heap": 1000, "mapped": 0},
        "backward": {"heap": 1500, "mapped": 0},
        "backward_from_first_gradient": {"heap": 1200, "mapped": 0},
    }
    traced = ActivationFigures(
        saved_bytes=1000,
        backward_transient_bytes=500,
        basis="traced",
        how="by hand",
        at_first_gradient_bytes=900,
        after_first_gradient_bytes=300,
        size_classes=classes,
    )
    resident = peak_terms(tiny, setup, 0, lambda _: traced)
    levels = peak_levels(tiny, setup, 0, lambda _: traced)
    assert resident["retained_heap"] == retained_heap_bytes(resident, tiny, setup, classes)
    assert "retained_heap" in levels["resident_set"].terms_bytes
    assert "retained_heap" not in levels["tensor"].terms_bytes
    untraced = dataclasses.replace(traced, size_classes=None)
    assert "retained_heap" not in peak_terms(tiny, setup, 0, lambda _: untraced)
