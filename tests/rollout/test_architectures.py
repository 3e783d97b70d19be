"""Every family the engine runs, as a tiny random model of its real HF class, against transformers on CPU (fp32):
greedy tokens identical to `generate`, per-token logprobs equal to a recomputed forward pass, and the same with LoRA
adapters (low-rank path and merged). Sliding windows are smaller than the prompts, so the windowed paths (prefill
mask, decode bound) are exercised. Adding an architecture = a file in rollout/models/ and its config here."""

import pytest
import torch

from execrl.models import build_tokenizer
from execrl.rollout import RolloutEngine, SamplingParams, UnsupportedModel, hf_generate
from execrl.rollout.fuse import fuse_projections
from execrl.tasks.arith import corpus

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=512)


def _configs():
    from transformers import (
        Gemma3TextConfig,
        GraniteConfig,
        LlamaConfig,
        MistralConfig,
        Olmo2Config,
        Phi3Config,
        Qwen2Config,
        Qwen3Config,
    )

    return {
        "llama": lambda v: LlamaConfig(vocab_size=v, **SMALL),
        "qwen2": lambda v: Qwen2Config(vocab_size=v, **SMALL),
        "qwen3": lambda v: Qwen3Config(vocab_size=v, head_dim=16, **SMALL),
        "qwen3-sliding": lambda v: Qwen3Config(vocab_size=v, head_dim=16, use_sliding_window=True, sliding_window=7,
                                               max_window_layers=1, **SMALL),
        "mistral-sliding": lambda v: MistralConfig(vocab_size=v, sliding_window=6, **SMALL),
        "granite": lambda v: GraniteConfig(vocab_size=v, embedding_multiplier=6.0, attention_multiplier=0.2,
                                           residual_multiplier=0.3, logits_scaling=4.0, **SMALL),
        "olmo2": lambda v: Olmo2Config(vocab_size=v, **SMALL),
        "phi3": lambda v: Phi3Config(vocab_size=v, pad_token_id=0, **SMALL),
        "phi4-mini-partial-rotary": lambda v: Phi3Config(vocab_size=v, pad_token_id=0, partial_rotary_factor=0.75,
                                                         **SMALL),
        "gemma3": lambda v: Gemma3TextConfig(vocab_size=v, head_dim=16, sliding_window=5, query_pre_attn_scalar=24,
                                             layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                             final_logit_softcapping=30.0, **SMALL),
    }


CASES = list(_configs())


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(corpus(), vocab_size=384)


def build(case, tok):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_configs()[case](len(tok)), attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # larger random weights than the init: varied text instead of one token repeated
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
            elif "norm" in name:  # non-trivial norm weights (Gemma's are offsets from 1)
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + (0.0 if case == "gemma3" else 0.75))
    return model


@pytest.fixture(scope="module")
def prompts(tok):
    texts = ["Read two integers and print their sum.", "hi", "print the maximum of a and b, " * 2]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def recomputed(model, prompt, ids, temperature):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_and_logprobs_equal_transformers(case, tok, prompts):
    model = build(case, tok)
    assert len(prompts[2]) > 16  # longer than every sliding window above
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    fuse_projections(model)  # (as the trainer does before building its engine)
    engine = RolloutEngine(model, tok, slots=3, max_len=128)
    greedy = engine.generate(prompts, 1, 24, SamplingParams(temperature=0.0))
    assert sum(len(r[0].ids) for r in ref) > 24
    for r, o in zip(ref, greedy):  # (where generate's row ends at a real token equal to the pad id, _cut ends it)
        r, o = r[0].ids, o[0].ids
        assert o[:len(r)] == r and (len(o) == len(r) or o[len(r)] == tok.pad_token_id)
    torch.manual_seed(0)
    for prompt, group in zip(prompts, engine.generate(prompts, 2, 24, SamplingParams(temperature=0.8))):
        for c in group:
            torch.testing.assert_close(torch.tensor(c.logprobs), recomputed(model, prompt, c.ids, 0.8),
                                       atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("case", ["qwen3", "phi3", "gemma3", "olmo2"])
@pytest.mark.parametrize("merge", [False, True])
def test_lora_adapters_on_every_projection_group(case, merge, tok, prompts):
    from execrl.config.schema import LoraConfig
    from execrl.lora import apply_lora

    model = build(case, tok)
    apply_lora(model, LoraConfig(enabled=True, dim=4, alpha=8, match_all_linear=True), seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    fuse_projections(model)
    engine = RolloutEngine(model, tok, slots=2, max_len=128, merge_adapters=merge)
    assert engine.dec.merge == merge
    torch.manual_seed(0)
    for prompt, group in zip(prompts, engine.generate(prompts, 1, 16, SamplingParams(temperature=0.8))):
        torch.testing.assert_close(torch.tensor(group[0].logprobs), recomputed(model, prompt, group[0].ids, 0.8),
                                   atol=2e-4, rtol=2e-4)


def test_a_family_the_engine_does_not_run_names_the_fix(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    with pytest.raises(UnsupportedModel, match="backend=transformers"):
        RolloutEngine(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)), tok, 1, 16)
