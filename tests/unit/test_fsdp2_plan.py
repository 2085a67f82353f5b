"""The planner's prediction for FSDP2 (zerogate.predict.fsdp2_terms): sharded model states like
ZeRO-3's without its separate master copy, persistent parameters or reduce bucket; the root gathered whole
plus two decoder layers; CPUOffloadPolicy taking the held terms off a GPU; and the figure the variants' table
shows."""

import dataclasses

import pytest

from tests.unit.test_ledger import QWEN14B, TINY, claim_setup, rendered
from zerogate.contracts.run import DsConfig
from zerogate.model.build import planned_model_config
from zerogate.model.counts import count_parameters
from zerogate.predict.fsdp2_terms import fsdp2_terms
from zerogate.predict.levels import fsdp2_peak_levels, peak_split
from zerogate.predict.peak import fsdp2_peak_for_run
from zerogate.predict.phases import PERSISTENT
from zerogate.predict.zero_terms import zerogate_terms
from zerogate.render.variants import variant_config
from zerogate.units import GIB


def counts_of(shape, vocab=152064, seq=512):
    return count_parameters(planned_model_config(shape, vocab, seq))


def test_fsdp2_holds_a_shard_of_sixteen_bytes_per_parameter_and_no_zero3_extras():
    counts = counts_of(QWEN14B)
    setup = claim_setup(dtype="bf16", offload_optimizer=False, offload_param=False)
    terms = fsdp2_terms(counts, setup)
    share = counts.first_dim_padded_numel(2) // 2  # each parameter padded along its first dimension
    held = sum(v for k, v in terms.items() if k in PERSISTENT)
    assert held == 16 * share  # fp32 parameters (the master), fp32 gradients, Adam's two states
    assert not {"master_parameters", "persistent_parameters", "reduce_bucket"} & set(terms)
    root = counts.total - counts.layers * counts.largest_block
    assert root > counts.largest_block  # Qwen's embeddings and head outweigh a decoder layer
    assert terms["unsharded_parameters"] == 2 * (root + 2 * counts.largest_block)  # bf16 on gathering
    assert terms["largest_layer_gradient"] == 2 * root
    zero3 = zerogate_terms(counts, setup).device
    assert terms["activations"] == zero3["activations"]  # the same model, the same activations


def test_cpu_offload_policy_takes_the_held_terms_off_a_gpu_and_not_off_the_cpu():
    counts = counts_of(QWEN14B)
    on_gpu = fsdp2_terms(counts, claim_setup(dtype="bf16", offload_param=True))
    assert not {"parameters", "gradients", "optimizer_states"} & set(on_gpu)
    cpu = dataclasses.replace(
        claim_setup(dtype="fp32", offload_param=True, offload_optimizer=True), device_kind="cpu"
    )
    assert fsdp2_terms(counts, cpu) == fsdp2_terms(
        counts, dataclasses.replace(cpu, offload_param=False, offload_optimizer=False)
    )


def test_the_cpu_prediction_is_the_runtime_baseline_plus_the_tensor_terms():
    counts = counts_of(TINY, vocab=256, seq=64)
    setup = dataclasses.replace(
        claim_setup(dtype="fp32", offload_param=False, offload_optimizer=False, seq_len=64), device_kind="cpu"
    )
    resident, levels = fsdp2_peak_levels(counts, setup, runtime_baseline=500_000_000)
    tensors = fsdp2_terms(counts, setup)
    assert levels["resident_set"].predicted_bytes == 500_000_000 + 4096 + peak_split(tensors).total
    assert levels["tensor"].predicted_bytes == peak_split(tensors).total
    assert resident["runtime_baseline"] == 500_000_000


@pytest.mark.parametrize("name", ["fsdp2", "fsdp2-offload"])
def test_a_variants_fsdp2_prediction_reads_its_config(name):
    ds_config, run_spec = rendered("cpu-tiny")
    config = DsConfig.of(variant_config(ds_config.raw, name)[0], name)
    prediction = fsdp2_peak_for_run(run_spec, config, None)
    assert prediction.scheme == name.replace("-", "_") and prediction.metric == "memory/peak_rss(GiB)"
    assert prediction.total_bytes == prediction.levels["resident_set"].predicted_bytes
    assert 0 < prediction.total_bytes < GIB
