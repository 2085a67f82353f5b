"""The planner's activation terms: traced from the run's architecture for every setup it considers, the
formula beside them, and the searches that use them (largest micro-batch, the changes that lower the need)."""

import dataclasses
from pathlib import Path

from transformers import GPT2Config, LlamaConfig

from tests.conftest import CPU_FINGERPRINT
from tests.unit.helpers import described, settings
from tests.unit.test_ledger import claim_counts, claim_setup, rendered
from zerogate.config.machines import from_fingerprint, load_description, to_fingerprint
from zerogate.predict.activation_figures import activation_bytes
from zerogate.predict.activations import TracedActivations, as_cuda_sdpa_runs
from zerogate.predict.fit import checks, largest_micro_batch
from zerogate.predict.phases import device_levels
from zerogate.predict.planned_run import run_setup
from zerogate.predict.planner import plan_for_run
from zerogate.predict.suggestions import device_changes
from zerogate.predict.trace import MicroStep, trace_micro_step
from zerogate.predict.zero_terms import zerogate_terms

REPO = Path(__file__).resolve().parents[2]
CLAIM_BOX = REPO / "config/machines/claim-rtx5070-rtx4090.yaml"


def small_llama() -> LlamaConfig:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    config._attn_implementation = "sdpa"
    return config


def test_the_ledger_takes_the_trace_of_each_setup_once():
    activations = TracedActivations(small_llama())
    setup = claim_setup(micro_batch=2, seq_len=32, device_kind="cpu", dtype="fp32")
    figures = activations(setup)
    traced = trace_micro_step(small_llama(), MicroStep(2, 32, "fp32", "sdpa", False))
    assert (figures.saved_bytes, figures.backward_transient_bytes) == (
        traced.total_bytes,
        traced.backward_transient_bytes,
    )
    assert (
        figures.per_layer_bytes == traced.per_layer_bytes
        and figures.layers == 3
        and figures.basis == "traced"
    )
    activations(dataclasses.replace(setup, ranks=8, stage=1))  # not an activation setting: the same trace
    assert activations.traces == 1
    checkpointed = activations(dataclasses.replace(setup, activation_checkpointing=True))
    assert activations.traces == 2 and checkpointed.saved_bytes < figures.saved_bytes
    device = zerogate_terms(claim_counts(), setup, activations).device
    assert (
        device["activations"] == traced.total_bytes
        and device["backward_transient"] == traced.backward_transient_bytes
    )


def test_a_cuda_target_traces_sdpa_without_the_attention_dropout_its_fused_kernels_regenerate():
    config = GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        vocab_size=128,
        attn_pdrop=0.1,
        resid_pdrop=0.1,
        embd_pdrop=0.1,
    )
    config._attn_implementation = "sdpa"
    changed, how = as_cuda_sdpa_runs(config)
    assert changed.attn_pdrop == 0.0 and changed.resid_pdrop == 0.1 and config.attn_pdrop == 0.1
    assert "(attn_pdrop 0.1) traced as 0" in how
    cpu_setup = claim_setup(micro_batch=1, seq_len=64, device_kind="cpu")
    on_cpu = TracedActivations(config)(cpu_setup)
    on_cuda = TracedActivations(config)(dataclasses.replace(cpu_setup, device_kind="cuda"))
    # The CPU's math kernel saves the s x s probabilities per head; CUDA's fused kernel does not.
    assert on_cuda.per_layer_bytes < on_cpu.per_layer_bytes and "math kernel" in on_cpu.how
    assert on_cuda.saved_bytes == trace_micro_step(changed, MicroStep(1, 64, "fp16", "sdpa")).total_bytes
    eager = dataclasses.replace(cpu_setup, device_kind="cuda", attention="eager")
    assert "traced as 0" not in TracedActivations(config)(eager).how  # eager saves its dropout mask anywhere
    assert as_cuda_sdpa_runs(small_llama())[1] == ""  # nothing to change without attention dropout


def test_checkpointing_drops_the_traced_activations_of_the_default_run():
    for checkpointing in (False, True):
        tiny = settings("cpu-tiny")
        profile = tiny.model_copy(
            update={"training": tiny.training.model_copy(update={"activation_checkpointing": checkpointing})}
        )
        ds, spec = rendered(profile)
        assert spec.training.activation_checkpointing is checkpointing
        result = plan_for_run(spec, ds, from_fingerprint(CPU_FINGERPRINT, "here"), profile.plan, "cpu-tiny")
        if not checkpointing:
            without = result.ledger.activations
        else:
            with_ = result.ledger.activations
    assert with_.basis == without.basis == "traced" and with_.saved_bytes < without.saved_bytes
    # Checkpointing keeps each decoder layer's input only (a micro-batch x 64 tokens x 64 hidden fp32 = 16
    # KiB).
    assert with_.per_layer_bytes == 64 * 64 * 4
    assert with_.formula_bytes < without.formula_bytes  # the cross-check column moves the same way


def test_the_largest_micro_batch_is_the_last_that_fits():
    counts, box = claim_counts(), load_description(CLAIM_BOX)
    box = described(box, host={"ram_total_bytes": 10**12})
    setup = claim_setup(activation_checkpointing=True)

    def need(b):
        return device_levels(zerogate_terms(counts, dataclasses.replace(setup, micro_batch=b)).device).device

    # The small card exactly as large as micro-batch 5 needs: 5 fits, 6 does not.
    small, large = box.plain()["gpus"]
    tight = described(box, gpus=[{**small, "memory_total_bytes": need(5)}, large])
    assert need(5) < need(6) and largest_micro_batch(counts, setup, tight) == 5
    # A card too small for one: none.
    tiny = described(box, gpus=[{**small, "memory_total_bytes": need(1) - 1}, large])
    assert largest_micro_batch(counts, setup, tiny) == 0
    huge = [{**g, "name": "a card of 1 PB", "memory_total_bytes": 10**15} for g in box.plain()["gpus"]]
    assert largest_micro_batch(counts, setup, described(box, gpus=huge), limit=64) == 64


def test_device_changes_give_the_smallest_cards_need_after_each_change():
    counts, box = claim_counts(), load_description(CLAIM_BOX)
    changes = {c.change: c for c in device_changes(counts, claim_setup(), box)}
    assert list(changes)[:2] == ["activation checkpointing", "sequence length 256 instead of 512"]
    checkpointed = changes["activation checkpointing"]
    assert checkpointed.settings.activation_checkpointing and checkpointed.settings.seq_len is None
    assert (
        checkpointed.smallest_device_need_bytes
        == device_levels(zerogate_terms(counts, claim_setup(activation_checkpointing=True)).device).device
    )
    assert not checkpointed.fits  # the claimed box's host RAM is still short
    assert changes["sequence length 128 instead of 512"].settings.seq_len == 128
    assert device_changes(counts, claim_setup(device_kind="cpu"), described(box, gpus=[])) == []


def test_gpt2_xl_from_its_config_plans_for_the_claimed_box_with_fit_and_largest_micro_batch():
    """The shipped claim-gpt2-xl profile (GPT-2 XL's own config.json): plan.json says whether it fits and
    the largest micro-batch per rank that does; each is consistent with the checks."""
    profile = settings("claim-gpt2-xl")
    machine = load_description(CLAIM_BOX)
    ds, spec = rendered(profile, to_fingerprint(machine))
    result = plan_for_run(spec, ds, machine, profile.plan, "claim-gpt2-xl")
    assert result.ledger.parameters == 1_557_611_200 and result.dtype == "fp16"
    assert result.fits and result.largest_micro_batch_per_rank >= 1
    assert result.ledger.activations.basis == "traced" and result.ledger.activations.layers == 48
    assert "(attn_pdrop 0.1) traced as 0" in result.ledger.activations.how
    counts, setup, activations = run_setup(spec, ds, machine.nodes)
    largest = result.largest_micro_batch_per_rank
    assert all(
        c.fits for c in checks(counts, dataclasses.replace(setup, micro_batch=largest), machine, activations)
    )
    assert not all(
        c.fits
        for c in checks(counts, dataclasses.replace(setup, micro_batch=largest + 1), machine, activations)
    )
    assert result.ledger.activations.formula_bytes == activation_bytes(counts, setup, False)
