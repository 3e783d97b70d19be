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
        MixtralConfig,
        Olmo2Config,
        OlmoeConfig,
        Phi3Config,
        Qwen2Config,
        Qwen3Config,
        Qwen3MoeConfig,
        Starcoder2Config,
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
        "qwen3-moe": lambda v: Qwen3MoeConfig(vocab_size=v, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                              moe_intermediate_size=32, mlp_only_layers=[1], norm_topk_prob=True,
                                              **SMALL),
        "mixtral-sliding": lambda v: MixtralConfig(vocab_size=v, num_local_experts=4, num_experts_per_tok=2,
                                                   sliding_window=6, **SMALL),
        "starcoder2-sliding": lambda v: Starcoder2Config(vocab_size=v, sliding_window=6, **SMALL),
        "olmoe": lambda v: OlmoeConfig(vocab_size=v, num_experts=8, num_experts_per_tok=3, **SMALL),
    }


CASES = list(_configs())


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(corpus(), vocab_size=384)


def build(case, tok, scale=0.15, **config):
    """A tiny random model of the family, its weights `scale` x N(0, 1); `config` set on its HF config first (e.g. a
    larger head dim)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    hf_config = _configs()[case](len(tok))
    for key, value in config.items():
        setattr(hf_config, key, value)
    model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # larger random weights than the init: varied text instead of one token repeated
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # (the experts' weights are 3-D)
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            elif "norm" in name and name.endswith("weight"):  # non-trivial norm weights (Gemma's: offsets from 1)
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + (0.0 if case == "gemma3" else 0.75))
    return model


def save_family(case, directory, **config):
    """A tiny random model of the family (as build makes it, `config` set on its HF config) and the byte-level
    tokenizer, saved as an HF directory: what a user's policy.model_name names. Returns the directory."""
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build(case, tok)
    for key, value in config.items():
        setattr(model.config, key, value)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def prompts(tok):
    texts = ["Read two integers and print their sum.", "hi", "print the maximum of a and b, " * 2]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def recomputed(model, prompt, ids, temperature):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


def with_lora(model, **targets):
    """The model with LoRA adapters (rank 4) on `targets` (default: every linear layer), their B matrices random
    (peft starts them at 0: an adapter that changes nothing would test nothing)."""
    from execrl.config.schema import LoraConfig
    from execrl.lora import apply_lora

    apply_lora(model, LoraConfig(enabled=True, dim=4, alpha=8, **(targets or dict(match_all_linear=True))), seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    return model


def assert_equals_transformers(engine, model, tok, prompts, ref):
    """Greedy tokens equal `generate`'s (`ref`); sampled tokens' logprobs equal a recomputed forward's."""
    assert sum(len(r[0].ids) for r in ref) > 24
    for r, o in zip(ref, engine.generate(prompts, 1, 24, SamplingParams(temperature=0.0))):
        r, o = r[0].ids, o[0].ids  # (where generate's row ends at a real token equal to the pad id, _cut ends it)
        assert o[:len(r)] == r and (len(o) == len(r) or o[len(r)] == tok.pad_token_id)
    torch.manual_seed(0)
    for prompt, group in zip(prompts, engine.generate(prompts, 2, 24, SamplingParams(temperature=0.8))):
        for c in group:
            torch.testing.assert_close(torch.tensor(c.logprobs), recomputed(model, prompt, c.ids, 0.8),
                                       atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("case", CASES)
def test_greedy_tokens_and_logprobs_equal_transformers(case, tok, prompts):
    model = build(case, tok)
    assert len(prompts[2]) > 16  # longer than every sliding window above
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    fuse_projections(model)  # (as the trainer does before building its engine)
    engine = RolloutEngine(model, tok, slots=3, max_len=128)
    assert_equals_transformers(engine, model, tok, prompts, ref)
    whole = [c.ids for g in engine.generate(prompts, 2, 24, SamplingParams(temperature=0.0)) for c in g]
    engine.dec.prefill_logits_bytes = 1  # one prompt a prefill chunk
    assert [c.ids for g in engine.generate(prompts, 2, 24, SamplingParams(temperature=0.0)) for c in g] == whole


@pytest.mark.parametrize("case", ["qwen3", "phi3", "gemma3", "olmo2", "qwen3-moe", "starcoder2-sliding"])
@pytest.mark.parametrize("merge", [False, True])
def test_lora_adapters_on_every_projection_group(case, merge, tok, prompts):
    targets = dict(match_all_linear=False, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]) if "moe" in case \
        else {}  # (a mixture of experts: LoRA on attention; see the test below)
    model = with_lora(build(case, tok), **targets)
    fuse_projections(model)
    engine = RolloutEngine(model, tok, slots=2, max_len=128, merge_adapters=merge)
    assert engine.dec.merge == merge
    torch.manual_seed(0)
    for prompt, group in zip(prompts, engine.generate(prompts, 1, 16, SamplingParams(temperature=0.8))):
        torch.testing.assert_close(torch.tensor(group[0].logprobs), recomputed(model, prompt, group[0].ids, 0.8),
                                   atol=2e-4, rtol=2e-4)


def layer_graphs() -> int:
    """How many compiled versions dynamo holds of the decode step's layer function."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from execrl.rollout.decoder import CachedDecoder

    return len(_debug_get_cache_entry_list(CachedDecoder._decode_layer.__code__))


KINDS = {"qwen2": 1, "gemma3": 2, "phi3": 1, "qwen3-moe": 2, "mixtral-sliding": 1}  # sliding/full; routed/dense


@pytest.mark.parametrize("case", list(KINDS))
def test_the_compiled_decode_step_is_one_layer_every_layer_of_its_kind_runs(case, tok, prompts, monkeypatch):
    """decoder.compile_decode (what a GPU engine does): dynamo compiles the layer step once per kind of layer, whatever
    the number of layers and the attention window (64 and 128 positions here), and the tokens and logprobs are still
    transformers'. With LoRA (its low-rank path), one version too. Mixtures of experts run their static-shape path
    (a GPU's in float32: every expert, masked), as the CPU's loop over routed rows breaks the graph at each expert."""
    from execrl.rollout.engine import compiled
    from execrl.rollout.models import layers

    monkeypatch.setattr(layers, "experts_one_by_one", layers.experts_masked)
    model = build(case, tok)
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    fuse_projections(model)
    engine = RolloutEngine(model, tok, slots=3, max_len=128)  # (on a CPU the engine compiles nothing itself)
    engine.share_prompts, engine.units.shortest = True, 1  # (as on a GPU: a prompt's samples in units)
    torch._dynamo.reset()
    engine.dec.compile_decode(compiled)
    assert_equals_transformers(engine, model, tok, prompts, ref)
    # one version for calls of one sample per prompt, one for those whose slots share prompts (engine.units)
    assert layer_graphs() == 2 * KINDS[case]
    pos = torch.full((3,), 9)  # steps of a batch's tail (attention split by position): one more version, generic
    with torch.no_grad():  # in the split (dynamo specializes an int of 1, the split of every other step)
        for tail in (8, 16, 4):
            engine.dec.decode(torch.full((3,), 5), pos, 128, pos, tail)
    assert layer_graphs() == 3 * KINDS[case]
    if case == "qwen2":
        lora = with_lora(build(case, tok))
        engine = RolloutEngine(lora, tok, slots=2, max_len=128)
        torch._dynamo.reset()
        engine.dec.compile_decode(compiled)
        torch.manual_seed(0)
        for prompt, group in zip(prompts, engine.generate(prompts, 1, 16, SamplingParams(temperature=0.8))):
            torch.testing.assert_close(torch.tensor(group[0].logprobs), recomputed(lora, prompt, group[0].ids, 0.8),
                                       atol=2e-4, rtol=2e-4)
        assert layer_graphs() == 1


@pytest.mark.parametrize("case", list(KINDS))
def test_every_family_gives_the_same_samples_on_the_busy_slots_rows(case, tok, prompts, monkeypatch):
    """The tail of a batch on the busy slots' rows only (the engine's _rows) in every kind of layer: sliding windows,
    q/k norms, mixtures of experts; the samples are token for token those of steps over every slot."""
    from execrl.rollout.models import layers

    monkeypatch.setattr(layers, "experts_one_by_one", layers.experts_masked)
    model = build(case, tok)
    fuse_projections(model)
    params = SamplingParams(temperature=0.8, ignore_eos=True)

    def run(fewer: bool):
        engine = RolloutEngine(model, tok, slots=64, max_len=128, sync_every=4)
        if not fewer:
            engine._rows = lambda busy: None
        return engine.generate(prompts, 21, [2, 40, 20], params, seeds=[4, 5, 6])  # 63 busy, then 42, then 21

    for group, ref in zip(run(True), run(False)):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-4, rtol=1e-4)


def test_a_step_over_some_rows_compiles_one_version_for_every_count(tok):
    """The tail of a batch on fewer rows (the engine's _rows): the compiled layer step gets one more version, generic
    in the count of rows, whatever the count (16, 32, 16 here, in no order of slots), and its logits are the step
    over every slot's at those slots."""
    from execrl.rollout.engine import compiled

    model = build("qwen2", tok)
    fuse_projections(model)
    engine = RolloutEngine(model, tok, slots=64, max_len=128)
    torch._dynamo.reset()
    engine.dec.compile_decode(compiled)
    g = torch.Generator().manual_seed(0)
    tokens, pos = torch.randint(3, len(tok), (64,), generator=g), torch.randint(0, 100, (64,), generator=g)
    with torch.no_grad():
        every = engine.dec.decode(tokens, pos, 128, pos)
        for n in (16, 32, 16):
            rows = torch.randperm(64, generator=g)[:n]
            got = engine.dec.decode(tokens[rows], pos[rows], 128, pos[rows], 1, rows)
            torch.testing.assert_close(got, every[rows], atol=1e-4, rtol=1e-4)
    assert layer_graphs() == 2


def test_lora_on_every_linear_of_a_routed_moe_model_leaves_its_experts_to_the_base(tok):
    """peft's conversion for transformers 4's adapters put adapters on the experts' 3-D weights where the run named
    every linear layer (and the engine refused them); the experts are no linear layer, and keep the base's weights."""
    from execrl.config.schema import LoraConfig
    from execrl.lora import adapted, apply_lora

    model = build("qwen3-moe", tok)
    apply_lora(model, LoraConfig(enabled=True, dim=4, alpha=8, match_all_linear=True), seed=0)
    names = [n for n, m in model.named_modules() if m in adapted(model)]
    assert names and not any("experts" in n for n in names)
    RolloutEngine(model, tok, slots=1, max_len=64)  # (built: nothing of the experts' to add)


GENERIC = {  # families with no file in rollout/models/: transformers' own forward over the engine's cache
    "gpt_neox": lambda v: __import__("transformers").GPTNeoXConfig(vocab_size=v, **{**SMALL, "num_key_value_heads": 4}),
    "gpt2": lambda v: __import__("transformers").GPT2Config(vocab_size=v, n_embd=64, n_layer=2, n_head=4),
    "stablelm": lambda v: __import__("transformers").StableLmConfig(vocab_size=v, **SMALL),
    "gemma2-sliding": lambda v: __import__("transformers").Gemma2Config(vocab_size=v, head_dim=16, sliding_window=6,
                                                                         **SMALL),
    # (every GPT-Neo config holds a window_size, for its "local" layers: one with none was refused)
    "gpt_neo-global": lambda v: __import__("transformers").GPTNeoConfig(
        vocab_size=v, hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global"], 2]],
        max_position_embeddings=512),
}


@pytest.mark.parametrize("case", list(GENERIC))
def test_the_generic_path_equals_transformers_for_a_family_without_a_file(case, tok, prompts):
    from transformers import AutoModelForCausalLM

    from execrl.rollout.generic import GenericDecoder

    torch.manual_seed(0)
    attn = "eager" if case.startswith(("gemma2", "gpt_neo")) else "sdpa"  # (no sdpa path in transformers)
    model = AutoModelForCausalLM.from_config(GENERIC[case](len(tok)), attn_implementation=attn).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    engine = RolloutEngine(model, tok, slots=2, max_len=128)  # (2 slots for 3 prompts: a slot is refilled)
    assert isinstance(engine.dec, GenericDecoder)
    assert_equals_transformers(engine, model, tok, prompts, ref)



def peaked(config):
    """A random model of `config` with weights of std 0.15: distributions with a clear top (at init's 0.02 they are
    near uniform, where a wrong mask or cache changes little)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    return model


@pytest.mark.parametrize("rope", ["longrope", "dynamic"])
def test_a_rope_that_depends_on_the_length_gives_the_trainers_logprobs_within_it(tok, prompts, rope):
    """Phi-3.5 / Phi-4-mini's longrope (short factors up to original_max_position_embeddings, long ones past it) and
    dynamic NTK change every position's rotary with the sequence's length. The engine's tables were computed once
    for its whole cache, past the bound: a sample within it was sampled with the long frequencies and scored with
    the short ones (logprobs off by up to 3.9)."""
    import transformers

    from execrl.trainer.step import token_logprobs

    small = {**SMALL, "vocab_size": len(tok), "pad_token_id": 0}
    config = (transformers.Phi3Config(**small, rope_parameters=dict(
        rope_type="longrope", rope_theta=10000.0, short_factor=[1.0] * 8, long_factor=[4.0] * 8,
        original_max_position_embeddings=64), original_max_position_embeddings=64) if rope == "longrope" else
        transformers.LlamaConfig(**{**small, "max_position_embeddings": 64},
                                 rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=4.0)))
    model = peaked(config)
    fuse_projections(model)
    with torch.no_grad():  # (a forward past the bound first: dynamic NTK's module keeps the long frequencies, and the
        model(torch.randint(3, len(tok), (1, 120)))  # engine's short table was made of them: 14 nats off)
    out = RolloutEngine(model, tok, slots=2, max_len=256).generate([prompts[0]], 1, 16,
                                                                    SamplingParams(temperature=1.0), seeds=[3])
    c = out[0][0]
    ids = torch.tensor([prompts[0] + c.ids])
    select = torch.zeros(1, ids.shape[1] - 1, dtype=torch.bool)
    select[0, len(prompts[0]) - 1:] = True
    with torch.no_grad():
        trained = token_logprobs(model, ids, torch.ones_like(ids), select)[0][select]
    torch.testing.assert_close(torch.tensor(c.logprobs), trained, atol=2e-4, rtol=0)
    # the trainer's micro-batches keep a sample within the bound apart from longer ones (beside a 120-token row it
    # took the long frequencies: 11.8 nats from the engine's logprobs), and never pack it with them
    from execrl.config import load_config
    from execrl.config.batch import Split
    from execrl.rollout.models.base import rotary_bound
    from execrl.trainer.step import TrainBatch, micro_batches, score_tokens, sharing

    row = ids.shape[1]
    long = torch.randint(3, len(tok), (1, 120))
    both = torch.zeros(2, 120, dtype=torch.long)
    both[0, :row], both[1] = ids[0], long[0]
    attn = (torch.arange(120)[None] < torch.tensor([[row], [120]])).long()
    mask = torch.zeros(2, 119)
    mask[0, len(prompts[0]) - 1:row - 1] = 1
    batch = TrainBatch(both, attn, mask, torch.zeros(2), prompt_lens=torch.tensor([len(prompts[0])] * 2), group_size=2)
    assert rotary_bound(model) == 64 and micro_batches(batch, range(2), Split(2), bound=64) == [[0], [1]]
    assert not sharing(load_config(None, []), model)
    scored = score_tokens(model, batch, Split(2), 1.0)[0][mask[0] > 0]
    torch.testing.assert_close(torch.tensor(c.logprobs), scored, atol=2e-4, rtol=0)


def test_the_generic_path_refuses_a_rotary_that_depends_on_the_length(tok):
    """Transformers' layers on the generic path take one rotary for all the slots decoded together: a 40-token
    sample beside a 300-token one took the long frequencies (0.67 nats)."""
    import transformers

    from execrl.rollout import UnsupportedModel

    neox = peaked(transformers.GPTNeoXConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=96, max_position_embeddings=64,
                                             rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=4.0,
                                                                  partial_rotary_factor=0.25)))
    with pytest.raises(UnsupportedModel, match="'gpt_neox'.*change past 64 tokens.*backend=transformers"):
        RolloutEngine(neox, tok, slots=2, max_len=128)


def mask_added_to_scores(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention as Falcon's was before transformers 5.25: the boolean mask added to the scores (+1 where visible),
    nothing masked."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)  # [B, H, K, D]
    scores = query @ key.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)  # [B, H, Q, K]
    if attention_mask is not None:
        scores = scores + attention_mask[..., :key.shape[-2]].to(scores.dtype)
    return (torch.softmax(scores, -1) @ value).transpose(1, 2), None  # [B, Q, H, D]


def test_a_family_the_generic_path_cannot_run_is_refused_naming_the_backend(tok):
    """The generic path checks itself against the model's own forward when it is made: attention that adds the
    engine's boolean mask to its scores (Falcon's, before transformers 5.25: nothing masked) is refused, and hybrid
    models' convolution or recurrent layers, which failed mid-run on the engine's cache."""
    import transformers
    from transformers import AttentionInterface

    AttentionInterface.register("mask_added_to_scores", mask_added_to_scores)
    neox = peaked(GENERIC["gpt_neox"](len(tok)))
    neox.config._attn_implementation = "mask_added_to_scores"
    with pytest.raises(UnsupportedModel, match="'gpt_neox'.*other next-token distributions.*backend=transformers"):
        RolloutEngine(neox, tok, slots=2, max_len=64)
    if not hasattr(transformers, "Lfm2Config"):
        return
    lfm2 = peaked(transformers.Lfm2Config(**{**SMALL, "vocab_size": len(tok)},
                                          layer_types=["conv", "full_attention", "conv"]))
    with pytest.raises(UnsupportedModel, match="cannot run 'lfm2'.*backend=transformers"):
        RolloutEngine(lfm2, tok, slots=2, max_len=64)


def test_falcon_is_refused_or_runs_as_transformers_does(tok, prompts):
    """Falcon's attention added the boolean mask to its scores before transformers 5.25 (refused, naming the
    backend); from 5.25 on it takes transformers' attention functions, and the generic path runs it as `generate`
    does."""
    import transformers

    falcon = peaked(transformers.FalconConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                                              num_attention_heads=4, new_decoder_architecture=False,
                                              multi_query=True))
    try:
        engine = RolloutEngine(falcon, tok, slots=2, max_len=128)
    except UnsupportedModel as e:
        assert "'falcon'" in str(e) and "other next-token distributions" in str(e) and "backend=transformers" in str(e)
        return
    assert_equals_transformers(engine, falcon, tok, prompts, hf_generate(falcon, tok, prompts, 1, 24, temperature=0.0))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_the_compiled_engine_on_a_gpu_equals_transformers_with_one_layer_compiled_per_kind(case, tok, prompts):
    """As a run on a GPU decodes (the layer step compiled, the step replayed as CUDA graphs), every family's greedy
    tokens are `generate`'s, and dynamo holds one version of the layer step per kind of layer (sliding or full
    attention, a routed or a dense MLP), not one per layer."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = build(case, tok).cuda()
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    fuse_projections(model)
    torch._dynamo.reset()
    engine = RolloutEngine(model, tok, slots=3, max_len=128, compile=True)
    for r, o in zip(ref, engine.generate(prompts, 1, 24, SamplingParams(temperature=0.0))):
        r, o = r[0].ids, o[0].ids
        assert o[:len(r)] == r and (len(o) == len(r) or o[len(r)] == tok.pad_token_id)
    assert layer_graphs() == len({(p.sliding, p.routed) for p in engine.dec.parts})  # (3 layers, 1 or 2 kinds)


@pytest.mark.gpu
def test_a_batchs_tail_on_fewer_rows_on_a_gpu_gives_every_rows_tokens(tok, prompts):
    """On a GPU, compiled and in CUDA graphs: once at most half the slots are busy the steps run on their rows only
    (one graph per count of rows), and the samples are token for token those of steps over every slot."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = build("qwen2", tok).cuda()
    fuse_projections(model)
    torch._dynamo.reset()
    engine = RolloutEngine(model, tok, slots=64, max_len=128, compile=True)
    params = SamplingParams(temperature=0.8, ignore_eos=True)
    budgets = [3, 60, 40]  # 21 samples each: 63 busy, then 42 (every row), then 21 (32 rows)
    out = engine.generate(prompts, 21, budgets, params, seeds=[1, 2, 3])
    # (the decode graphs' keys: window, sampling, tail split, count of rows, units)
    assert {key[3] for key in engine.graphs if key[0] != "admit"} == {None, 32}
    engine._rows = lambda busy: None
    every = engine.generate(prompts, 21, budgets, params, seeds=[1, 2, 3])
    for group, ref in zip(out, every):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_units_of_a_shared_prompt_on_a_gpu_sample_what_every_slot_reading_its_own_does(tok, prompts):
    """On a GPU (the Triton kernels, compiled, in CUDA graphs): the samples of one prompt admitted together read their
    prompt once per unit (engine.units); token for token, and logprobs within 1e-3, what every slot reading its own
    copy gives, with samples ending early (stop tokens) and their slots refilled with other prompts' samples, and a
    batch's tail on the busy slots' rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config).eval().cuda()  # (head dim 64: the Triton kernels' path)
    fuse_projections(model)
    torch._dynamo.reset()
    runs = []
    for share in (True, False):
        engine = RolloutEngine(model, tok, slots=40, max_len=256, compile=True, stop_token_ids=list(range(40, 60)))
        engine.share_prompts, engine.units.shortest = share, 1  # (short prompts: in units too)
        runs.append(engine.generate([p * 4 for p in prompts], 12, [60, 90, 40], SamplingParams(temperature=0.8),
                                    seeds=[1, 2, 3]))
        steps = [key for key in engine.graphs if key[0] != "admit"]  # (window, sampling, tail, rows, shared)
        assert {key[-1] for key in steps} == {share} and {key[3] for key in steps} == {None, 16}
    assert len({len(c.ids) for group in runs[0] for c in group}) > 3  # (samples ended at different lengths)
    for group, ref in zip(*runs):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("case", ["llama", "qwen3", "phi4-mini-partial-rotary", "gemma3", "mistral-sliding",
                                  "qwen3-moe", "granite", "olmo2"])
def test_units_in_every_family_sample_what_every_slot_reading_its_own_does(case, tok, prompts):
    """Units of a shared prompt in other families (head dim 64: on a GPU the Triton kernels' path; on the CPU the
    torch path, told to share): query/key norms, partial rotary, Gemma's scaling and sliding layers beside full ones
    (units where a layer sees the whole window), routed experts. Token for token, and logprobs within 1e-3, what
    every slot reading its own copy gives."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = build(case, tok, scale=0.05, hidden_size=256, head_dim=64).to(dev)  # (smaller weights at this width:
    fuse_projections(model)  # samples that differ, not one near-greedy text)
    runs = []
    for share in (True, False):
        engine = RolloutEngine(model, tok, slots=24, max_len=160, compile=False, stop_token_ids=list(range(40, 60)))
        assert engine.dec.head_dim == 64 and engine.share_prompts == (dev == "cuda")
        engine.share_prompts, engine.units.shortest = share, 1
        runs.append(engine.generate([p * 4 for p in prompts], 6, [24, 36, 20], SamplingParams(temperature=0.8),
                                    seeds=[1, 2, 3]))
        assert engine.sharing == share
    assert all(len({tuple(c.ids) for c in group}) > 3 for group in runs[0])
    for group, ref in zip(*runs):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_admissions_on_a_gpu_run_as_cuda_graphs_and_sample_what_eager_ones_do(tok, prompts):
    """On a GPU a small admission (prefill and first tokens) is captured once per padded shape and replayed; the
    samples are token for token those of eager admissions, refills of a few prompts included."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = build("qwen2", tok).cuda()
    fuse_projections(model)
    torch._dynamo.reset()
    params = SamplingParams(temperature=0.8)
    runs = []
    for graphed in (True, False):
        engine = RolloutEngine(model, tok, slots=8, max_len=128, compile=True)
        engine.admit_graphs = graphed
        runs.append(engine.generate(prompts * 3, 5, [4, 30, 17] * 3, params, seeds=list(range(9))))
        admissions = {key[1] for key in engine.graphs if key[0] == "admit"}
        assert bool(admissions) == graphed and all(p & (p - 1) == 0 and n & (n - 1) == 0 and t % 64 == 0
                                                   for p, t, n in admissions)
    for group, ref in zip(*runs):
        assert [c.ids for c in group] == [c.ids for c in ref]
        for c, r in zip(group, ref):
            torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_the_engine_captures_its_graphs_while_another_thread_runs_the_gpu(tok, prompts):
    """Async GRPO scores with the reward model in its grading thread while the loop's thread generates, and the engine
    captures a CUDA graph whenever a step needs a new shape: neither disturbs the other (the other thread's syncs
    and allocations during a capture), and the samples are those of a run with nothing beside it."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import threading

    model = build("qwen2", tok).cuda()
    fuse_projections(model)
    judge = build("qwen2", tok).cuda()
    torch._dynamo.reset()
    params, runs, failed = SamplingParams(temperature=0.8), [], []
    for beside in (False, True):
        stop = threading.Event()

        def score(stop=stop):  # what the reward model does in the grading thread: forwards, each read back
            try:
                with torch.no_grad():
                    while not stop.is_set():
                        ids = torch.randint(0, 200, (4, int(torch.randint(2, 64, ()))))  # (no CUDA generator:
                        judge(ids.cuda()).logits[:, -1].float().cpu()  # a reward model draws no random numbers)
            except BaseException as e:  # noqa: BLE001 (reported below)
                failed.append(e)

        thread = threading.Thread(target=score)
        if beside:
            thread.start()
        try:
            engine = RolloutEngine(model, tok, slots=8, max_len=128, compile=True)
            runs.append(engine.generate(prompts * 3, 5, [4, 30, 17] * 3, params, seeds=list(range(9))))
        finally:
            stop.set()
            if beside:
                thread.join()
        assert engine.graphs and engine.admit_graphs  # (a failed admission capture turns them off)
    assert not failed, failed[0]
    for group, ref in zip(*runs):
        assert [c.ids for c in group] == [c.ids for c in ref]


@pytest.mark.gpu
def test_the_down_projection_in_parts_rounds_once_compiled_or_not(tok, prompts):
    """In 16-bit on a GPU decode's down projection is fp32 partial products (decoder.down_parts), summed and rounded
    once: each output within half a bf16 step of the exact product at the 0.5B and 1.5B shapes. Compiled and in CUDA
    graphs the engine decodes the tokens the eager engine does on that path, up to a bf16 near-tie (against the
    one-GEMM path, whose rounding differs, too; tests/rollout/test_engine.py checks the two paths equal in fp32). A
    family whose block changes the MLP's output (Gemma 3's post-MLP norm) keeps one GEMM."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout.decoder import DOWN_PARTS, partial_down, summed

    g = torch.Generator(device="cuda").manual_seed(0)
    for rows, inner, d in [(16, 4864, 896), (128, 4864, 896), (256, 8960, 1536)]:
        a = torch.randn(1, rows, inner, device="cuda", generator=g).bfloat16()
        w = (torch.randn(d, inner, device="cuda", generator=g) * 0.02).bfloat16()
        exact = a[0].double() @ w.double().T
        got = summed(partial_down(a, w, DOWN_PARTS), a)[0].double()
        worst = ((got - exact).abs() - exact.abs() * 2**-8).max().item()
        assert worst <= 1e-5, (rows, inner, d, worst)
    model = build("qwen2", tok).cuda().bfloat16()
    reference = build("qwen2", tok).cuda().bfloat16()  # (unfused: transformers' own forward)
    fuse_projections(model)
    out = {}
    for compiled in (True, False):
        torch._dynamo.reset()
        engine = RolloutEngine(model, tok, slots=3, max_len=128, compile=compiled, cuda_graphs=compiled)
        assert engine.dec.down_parts == DOWN_PARTS
        out[compiled] = [c[0] for c in engine.generate(prompts, 1, 24, SamplingParams(temperature=0.0))]
    # Compiled, inductor fuses the norms and adds in other orders than eager kernels do, so bf16 rounding differs:
    # up to the first difference the tokens are the same and each path's logprobs are within bf16's drift of the
    # model's own in float32 (both paths alike: neither is the other's reference), and at the first difference the
    # two tokens' logits (transformers' forward over the shared prefix) are a tie within bf16 rounding.
    exact = reference.float()
    for prompt, a, b in zip(prompts, out[True], out[False]):
        same = next((i for i, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y), min(len(a.ids), len(b.ids)))
        with torch.no_grad():  # (positions len(prompt) - 1 ...: the logits that chose tokens 0 ... same)
            logits = exact(torch.tensor([prompt + a.ids[:same]], device="cuda")).logits[0, len(prompt) - 1:]
        want = logits[:same].log_softmax(-1).gather(-1, torch.tensor(a.ids[:same], device="cuda")[:, None])[:, 0]
        for path in (a, b):
            drift = (torch.tensor(path.logprobs[:same]) - want.cpu()).abs().max().item()
            print(f"{'compiled' if path is a else 'eager'}: {same} tokens, logprobs within {drift:.4f} of float32's")
            assert drift <= 0.1, drift
        if same < min(len(a.ids), len(b.ids)):
            gap, scale = (logits[-1, a.ids[same]] - logits[-1, b.ids[same]]).abs().item(), logits[-1].abs().max().item()
            print(f"first difference at token {same} of {len(a.ids)}: logits {gap:.4f} apart, largest {scale:.2f}")
            assert gap <= 2**-6 * scale, (same, gap, scale)
    assert RolloutEngine(build("gemma3", tok).cuda().bfloat16(), tok, slots=2, max_len=64).dec.down_parts == 1


@pytest.mark.gpu
def test_grouped_expert_gemms_match_one_expert_at_a_time():
    """The GPU path (two grouped GEMMs over tokens sorted by expert) against the per-expert loop, on the same routing
    in bf16 (routing itself is the router's: in bf16 its near-ties differ from float32's)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from execrl.rollout.models.layers import experts_grouped, experts_masked, experts_one_by_one, route

    g = torch.Generator(device="cuda").manual_seed(0)
    act = torch.nn.functional.silu
    for n, d, e, i, k in [(300, 256, 16, 128, 4), (256, 896, 8, 4864, 2), (5, 256, 64, 128, 8)]:  # (5 x 8 < 64:
        x, router, gate_up, down = (torch.randn(*s, device="cuda", generator=g).bfloat16() * 0.05  # idle experts)
                                    for s in ((n, d), (e, d), (e, 2 * i, d), (e, d, i)))
        weight, expert = route(x, router, k, True)
        want = experts_one_by_one(x, weight, expert, gate_up, down, act)
        for path in (experts_grouped, experts_masked):
            torch.testing.assert_close(path(x, weight, expert, gate_up, down, act), want, atol=1e-2, rtol=1e-2)


def test_the_masked_experts_equal_the_one_by_one_loop():
    from execrl.rollout.models.layers import experts_masked, experts_one_by_one, route

    g = torch.Generator().manual_seed(0)
    x, router, gate_up, down = (torch.randn(*s, generator=g) for s in ((40, 32), (8, 32), (8, 48, 32), (8, 32, 24)))
    weight, expert = route(x, router, 3, False)
    torch.testing.assert_close(experts_masked(x, weight, expert, gate_up, down, torch.nn.functional.silu),
                               experts_one_by_one(x, weight, expert, gate_up, down, torch.nn.functional.silu))


@pytest.mark.gpu
@pytest.mark.parametrize("syncs", [False, True], ids=["graphs", "a model whose code syncs"])
def test_the_generic_path_on_a_gpu_compiled_and_in_graphs_equals_transformers(syncs, tok, prompts):
    """On a GPU the generic path runs as a run's does (its decode step compiled, replayed as CUDA graphs) and its greedy
    tokens are `generate`'s; a model whose own code reads a value back to the host cannot be captured: the engine
    says so and decodes without graphs, with the same tokens."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import warnings

    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(GENERIC["gpt_neox"](len(tok)), attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    model = model.cuda()
    torch._dynamo.reset()  # (a fresh process's compiler: dynamo does not guard on hooks, and would reuse the last code)
    if syncs:  # (a host read inside the forward, as some models' routing or bookkeeping does)
        def host_read(module, args, out):
            float((out[0] if isinstance(out, tuple) else out).sum())

        model.gpt_neox.layers[0].register_forward_hook(host_read)
    ref = hf_generate(model, tok, prompts, 1, 24, temperature=0.0)
    engine = RolloutEngine(model, tok, slots=2, max_len=128, compile=True)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        outs = engine.generate(prompts, 1, 24, SamplingParams(temperature=0.0))
    for r, o in zip(ref, outs):
        r, o = r[0].ids, o[0].ids
        assert o[:len(r)] == r and (len(o) == len(r) or o[len(r)] == tok.pad_token_id)
    assert engine.graphs_on is not syncs
    assert any("cannot be captured as a CUDA graph" in str(w.message) for w in said) is syncs


def test_the_generic_path_runs_lora_adapters_inside_the_model(tok, prompts):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = with_lora(AutoModelForCausalLM.from_config(GENERIC["gpt_neox"](len(tok))).eval())
    engine = RolloutEngine(model, tok, slots=2, max_len=128)
    torch.manual_seed(0)
    for prompt, group in zip(prompts, engine.generate(prompts, 1, 16, SamplingParams(temperature=0.8))):
        torch.testing.assert_close(torch.tensor(group[0].logprobs), recomputed(model, prompt, group[0].ids, 0.8),
                                   atol=2e-4, rtol=2e-4)


def test_grouped_decode_attention_equals_transformers_sdpa():
    """One new token per slot with grouped key/value heads: the query heads that share a head attend together, with
    the slot masks, and give transformers' SDPA result (which copies each key/value head per query head)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from execrl.rollout.generic import grouped_decode_attention

    g = torch.Generator().manual_seed(0)
    s, hq, hk, w, d = 5, 8, 2, 40, 16
    q, k, v = (torch.randn(*shape, generator=g) for shape in ((s, hq, 1, d), (s, hk, w, d), (s, hk, w, d)))
    pos = torch.tensor([0, 7, 39, 20, 3])
    mask = (torch.arange(w)[None] <= pos[:, None])[:, None, None]  # [S, 1, 1, W]
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.training = hq // hk, True, False
    got, _ = grouped_decode_attention(module, q, k, v, mask, scaling=d ** -0.5)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=d ** -0.5)
    assert got.shape == want.shape == (s, 1, hq, d)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_head_soft_caps_under_other_names_and_olmoe_clip_qkv_are_computed_as_the_model_does(tok):
    """The trainer took hidden @ W for heads soft-capped under names other than final_logit_softcapping
    (RecurrentGemma's logits_soft_cap: 7 nats off its forward at the real cap 30); OLMoE's family file left out
    clip_qkv (7 nats off): such a model now goes transformers' own layers (the generic path)."""
    from transformers import AutoModelForCausalLM, OlmoeConfig, RecurrentGemmaConfig

    from execrl.rollout.models import has_family
    from execrl.rollout.models.base import head_soft_cap
    from execrl.trainer.step import token_logprobs

    torch.manual_seed(0)
    cfg = RecurrentGemmaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                               num_attention_heads=4, num_key_value_heads=2, lru_width=64, attention_window_size=16,
                               logits_soft_cap=3.0, head_dim=16)
    assert head_soft_cap(cfg) == 3.0
    model = AutoModelForCausalLM.from_config(cfg).eval()
    ids = torch.randint(3, len(tok), (2, 12))
    select = torch.ones(2, 11, dtype=torch.bool)
    with torch.no_grad():
        got = token_logprobs(model, ids, None, select)[0]
        want = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    olmoe = AutoModelForCausalLM.from_config(OlmoeConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96,
                                                         num_hidden_layers=2, num_attention_heads=4,
                                                         num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                                         clip_qkv=0.3))
    assert not has_family(olmoe)
    olmoe.config.clip_qkv = None
    assert has_family(olmoe)


def test_the_generic_path_refuses_local_attention_its_masks_do_not_make(tok):
    """GPT-Neo's local layers (window_size 256) and Llama 4's chunked attention passed the generic path's 9-token
    probe and then sampled 1-7 nats off the model once sequences passed the window; a multimodal config crashed with
    an AttributeError. Each is refused naming the backend that runs it."""
    from transformers import AutoModelForCausalLM, GPTNeoConfig

    neo = AutoModelForCausalLM.from_config(GPTNeoConfig(vocab_size=len(tok), hidden_size=64, num_layers=2, num_heads=4,
                                                        attention_types=[[["global", "local"], 1]], window_size=256,
                                                        max_position_embeddings=512))
    with pytest.raises(UnsupportedModel, match="window_size=256 .*backend=transformers"):
        RolloutEngine(neo, tok, slots=2, max_len=64)
    from transformers import BloomConfig, FalconConfig

    for config in (BloomConfig(vocab_size=len(tok), hidden_size=64, n_layer=2, n_head=4),  # (the refusal named a
                   FalconConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                alibi=True, new_decoder_architecture=False)):  # ValueError of a 2-D unpacking)
        with pytest.raises(UnsupportedModel, match="ALiBi .*backend=transformers"):
            RolloutEngine(AutoModelForCausalLM.from_config(config), tok, slots=2, max_len=64)


def test_a_multimodal_model_is_refused_as_one(tok):
    """(A review's find) Gemma 3's multimodal model (gemma-3-4b-it) was refused with an AttributeError of its config;
    the refusal says why in words and names the backend that runs it."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=32, patch_size=16)
    model = Gemma3ForConditionalGeneration(Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4))
    with pytest.raises(UnsupportedModel, match=r"'gemma3' models \(a multimodal model: .*text_config\): set "
                                               "policy.generation.backend=transformers"):
        RolloutEngine(model, tok, slots=2, max_len=64)


@pytest.mark.parametrize("case", ["qwen3-moe", "mixtral-sliding", "olmoe"])
def test_routed_experts_in_bf16_sum_as_transformers_does(case, tok):
    """(A hunt's find) in bf16 the engine rounded each expert's weighted output and added them in bf16, where
    transformers' experts sum a token's top-k terms in fp32 and round once: a third to a half of an MoE block's
    outputs differed, up to 2.4 nats in a token's engine-vs-trainer logprob. Now the same bits."""
    from execrl.rollout.models import architecture_of
    from execrl.trainer.precision import compute_model

    model = compute_model(build(case, tok), torch.bfloat16, sharded=False)
    arch, layer = architecture_of(model), model.model.layers[0]
    h = torch.randn(1, 512, model.config.hidden_size, generator=torch.Generator().manual_seed(0)).bfloat16()
    with torch.no_grad():
        theirs = layer.mlp(h)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs  # (OLMoE's block also returns its router logits)
        assert torch.equal(arch.experts(layer, h), theirs)


def test_the_generic_path_makes_a_prompts_logits_at_its_last_position_only(monkeypatch):
    """(A hunt's find) A family on transformers' own layers (the generic path) made its prefill's logits at every
    prompt position ([P, T, V]: a 16K prompt of a 32K vocabulary, 2 GB in fp32, 4.4 GB of peak growth) and kept one
    each: the head now runs at each prompt's last position only, with the same first tokens."""
    import torch
    from transformers import CohereConfig, CohereForCausalLM

    from execrl.rollout.generic import GenericDecoder

    torch.manual_seed(0)
    model = CohereForCausalLM(CohereConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512))
    shapes = []
    real = model.forward

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        shapes.append(tuple(out.logits.shape))
        return out

    tokens = torch.randint(0, 300, (3, 40))
    lengths = torch.tensor([40, 17, 40])
    want = torch.stack([model(tokens[i:i + 1, :n]).logits[0, -1] for i, n in enumerate(lengths.tolist())])
    decoder = GenericDecoder(model, slots=3, max_len=64)
    assert decoder.keeps
    monkeypatch.setattr(model, "forward", spy)
    got = decoder.prefill(tokens, lengths, torch.arange(3), torch.arange(3))
    assert shapes == [(3, 2, 300)]  # (two distinct last positions)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
