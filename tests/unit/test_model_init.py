"""A randomly initialised model is the architecture's own initialisation, and the same weights from the same
seed whether built whole (DDP, ZeRO-0..2, FSDP2) or partitioned by ZeRO-3 (a real zero.Init in a world of
one rank): the engines' loss curves can then be compared from the first step."""

import torch
from transformers import LlamaConfig

from zerogate.model.build import build_model

ZERO3 = {
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 3},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
}


def tiny_llama() -> LlamaConfig:
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=32,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return config


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter whole (a ZeRO-3 partition gathered)."""
    import deepspeed

    found = {}
    for name, parameter in model.named_parameters():
        with deepspeed.zero.GatheredParameters(
            [parameter]
        ):  # a no-op for a parameter that is not partitioned
            found[name] = parameter.detach().clone()
    return found


def test_zero3_and_a_whole_build_draw_the_same_initial_weights(one_rank_world):
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    torch.manual_seed(0)
    partitioned_model = build_model(tiny_llama(), ZERO3)
    assert all(hasattr(p, "ds_id") for p in partitioned_model.parameters())  # really partitioned
    partitioned = full_weights(partitioned_model)
    torch.manual_seed(0)
    whole_model = build_model(tiny_llama(), {"zero_optimization": {"stage": 2}})
    assert not is_deepspeed_zero3_enabled()  # the earlier ZeRO-3 build does not partition this one
    assert not any(hasattr(p, "ds_id") for p in whole_model.parameters())
    whole = full_weights(whole_model)
    assert whole.keys() == partitioned.keys()
    for name in whole:
        assert torch.equal(whole[name], partitioned[name]), name


def test_the_initialisation_is_the_architectures_not_torchs_defaults(one_rank_world):
    """Llama initialises embeddings and projections from a normal of std initializer_range (0.02); torch's
    defaults would give an embedding of std 1 and projections of std 1/sqrt(3 x fan_in)."""
    config = tiny_llama()
    for ds_config in (ZERO3, None):
        torch.manual_seed(0)
        weights = full_weights(build_model(config, ds_config))
        for name in ("model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"):
            assert (
                abs(float(weights[name].std()) - config.initializer_range) < 0.2 * config.initializer_range
            ), name
        assert torch.equal(weights["model.norm.weight"], torch.ones(config.hidden_size))
