"""The trainer reads a model's logits as final_hidden @ W.T x head_multiplier only where that is the model's own
forward (a hunt's find: HyperCLOVAX multiplies by the logits_scaling Granite divides by, Inkling divides its hidden
state and cuts its vocabulary, Dory scales each token's logit; each was scored nats off the model, unsaid)."""

import pytest
import torch
import transformers as T

from execrl.trainer.step import head_shortcut, token_logprobs

SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2)


def build(config, dtype=torch.float32):
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)  # (logits of several units: bf16's rounding of them is what is tolerated)
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", [
    T.Qwen2Config(**SMALL), T.LlamaConfig(**SMALL, tie_word_embeddings=True),
    T.GraniteConfig(**SMALL, logits_scaling=4.0), T.CohereConfig(**SMALL, logit_scale=0.5),
], ids=["qwen2", "llama-tied", "granite", "cohere"])
def test_the_families_whose_head_is_a_product_are_read_as_one(config, dtype):
    assert head_shortcut(build(config, dtype))


@pytest.mark.parametrize("scale", [0.25, 4.0])
def test_a_head_that_scales_otherwise_is_read_from_the_models_own_logits(scale):
    model = build(T.HyperCLOVAXConfig(**SMALL, logits_scaling=scale))
    assert not head_shortcut(model)
    ids = torch.randint(0, 97, (2, 12))
    select = torch.ones(2, 11, dtype=torch.bool)
    with torch.no_grad():
        ours = token_logprobs(model, ids, None, select)[0]
        own = torch.log_softmax(model(ids).logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(ours, own, atol=1e-5, rtol=1e-5)


def test_a_config_of_per_layer_shapes_sizes_the_cache_by_its_largest_layer():
    """(A hunt's find) Gemma 4 keeps head_dim per layer (its full-attention layers' global_head_dim): reading the
    config's head_dim raised, a traceback of `execrl train --dry-run` off the CPU and of `execrl eval` on a GPU."""
    from execrl.models import kv_shape

    if not hasattr(T, "Gemma4TextConfig"):
        pytest.skip("this transformers has no Gemma 4")
    config = T.Gemma4TextConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                                sliding_window=6, vocab_size_per_layer_input=300, hidden_size_per_layer_input=16)
    assert kv_shape(config) == (4, 2, 32)
    assert kv_shape(T.Qwen2Config(**SMALL)) == (1, 2, 8)
