"""Every model family the rollout engine runs, at one shape (Qwen2.5-0.5B's dimensions, random init, bf16): the
engine against transformers on the same weights in the same run.

    python bench/architectures.py                          # every family, both sections
    python bench/architectures.py --families gemma3 olmo2 --sections check
Sections:
  check    greedy choices and logprobs against the HF forward (teacher-forced), and how many greedy completions
           are identical to transformers' `generate`
  rollout  P prompts x (128 + N) tokens forced to full length: the engine (compiled, CUDA graphs) vs `generate`
  step     `execrl train` GRPO steps on a saved random-init model of the family (16 prompts x 8, ~128-token
           prompts, 256 new tokens forced, bf16 mixed precision): time per step and its phases
Sliding windows are set below the sequence length (128 tokens) so that the windowed paths are the ones measured.
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import contextmanager
from functools import partial

import torch
from common import ARCHS, DEVICE, byte_tokenizer, device_name, fresh_peak, median_of, peak_gib, table, timed


def family_config(family: str, arch: str, vocab: int, tok):
    """The family's HF config at the architecture's dimensions (the tokenizer's special ids)."""
    import transformers as tf

    a = ARCHS[arch]
    dims = dict(vocab_size=vocab, hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096,
                tie_word_embeddings=a.tied, eos_token_id=tok.eos_token_id, bos_token_id=None)
    head = a.hidden // a.heads
    window = ["sliding_attention"] * 5 + ["full_attention"]
    return {
        "llama": lambda: tf.LlamaConfig(**dims),
        "qwen2": lambda: tf.Qwen2Config(**dims),
        "qwen3": lambda: tf.Qwen3Config(head_dim=head, **dims),
        "qwen3-sliding": lambda: tf.Qwen3Config(head_dim=head, use_sliding_window=True, sliding_window=128,
                                                max_window_layers=a.layers // 2, **dims),
        "mistral-sliding": lambda: tf.MistralConfig(sliding_window=128, **dims),
        "granite": lambda: tf.GraniteConfig(embedding_multiplier=12.0, attention_multiplier=1 / head,
                                            residual_multiplier=0.22, logits_scaling=8.0, **dims),
        "olmo2": lambda: tf.Olmo2Config(**dims),
        "phi3": lambda: tf.Phi3Config(pad_token_id=tok.pad_token_id, **dims),
        "phi4-mini": lambda: tf.Phi3Config(pad_token_id=tok.pad_token_id, partial_rotary_factor=0.75, **dims),
        "starcoder2": lambda: tf.Starcoder2Config(sliding_window=128, **dims),
        # no file in rollout/models/: the engine's generic path (transformers' own layers over its cache)
        "gpt-neox (generic)": lambda: tf.GPTNeoXConfig(**{k: v for k, v in dims.items() if k != "num_key_value_heads"}),
        "gpt-neox (generic, not compiled)": lambda: family_config("gpt-neox (generic)", arch, vocab, tok),
        "qwen2 (generic)": lambda: tf.Qwen2Config(**dims),  # forced onto the generic path: its cost against the file
        # the same, its decode attention as transformers' SDPA does it (each key/value head copied per query head)
        "qwen2 (generic repeat_kv)": lambda: tf.Qwen2Config(**dims),
        "gemma3": lambda: tf.Gemma3TextConfig(head_dim=head, sliding_window=128, query_pre_attn_scalar=head,
                                              layer_types=(window * a.layers)[:a.layers], **dims),
        # mixtures of experts: Qwen3-30B-A3B's routing (128 experts, 8 a token) scaled to 64 experts of 512
        "qwen3-moe": lambda: tf.Qwen3MoeConfig(head_dim=head, num_experts=64, num_experts_per_tok=8,
                                               moe_intermediate_size=512, norm_topk_prob=True, **dims),
        "mixtral": lambda: tf.MixtralConfig(num_local_experts=8, num_experts_per_tok=2, **dims),
        "olmoe": lambda: tf.OlmoeConfig(num_experts=64, num_experts_per_tok=8,
                                        **{**dims, "intermediate_size": 512}),
    }[family]()


FAMILIES = ["llama", "qwen2", "qwen3", "qwen3-sliding", "mistral-sliding", "granite", "olmo2", "phi3", "phi4-mini",
            "gemma3", "starcoder2", "qwen3-moe", "mixtral", "olmoe", "gpt-neox (generic)",
            "gpt-neox (generic, not compiled)", "qwen2 (generic)", "qwen2 (generic repeat_kv)"]


def build(family: str, arch: str, dtype: torch.dtype = torch.bfloat16):
    from transformers import AutoModelForCausalLM

    from execrl.rollout.fuse import fuse_projections

    tok = byte_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(family_config(family, arch, ARCHS[arch].vocab, tok),
                                             attn_implementation="sdpa").to(DEVICE, dtype).eval()
    fuse_projections(model)  # as the trainer does with the execrl backend
    return model, tok


@contextmanager
def on_its_path(family: str):
    """Engines made inside take the family's path: Qwen2 forced onto the generic path for the "qwen2 (generic...)"
    rows (a family with a file, measured on the other path), with transformers' own SDPA decode attention for
    "repeat_kv"."""
    from execrl.rollout import engine as engine_module
    from execrl.rollout.generic import GenericDecoder

    make_decoder = engine_module.make_decoder

    def generic(m, s, n, _):
        dec = GenericDecoder(m, s, n)
        if "repeat_kv" in family:
            dec.grouped = []  # (each key/value head copied per query head, as transformers' SDPA does with a mask)
        return dec

    if family.startswith("qwen2 (generic"):
        engine_module.make_decoder = generic
    try:
        yield
    finally:
        engine_module.make_decoder = make_decoder


def compiles(family: str) -> bool:
    """Whether the family's engine compiles its decode step, as a run's does on a GPU."""
    return DEVICE == "cuda" and "not compiled" not in family


def section_check(family: str, arch: str, rows: list, dtype: torch.dtype) -> None:
    from execrl.rollout import RolloutEngine, SamplingParams, hf_generate

    model, tok = build(family, arch, dtype)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 259, (16, 160), generator=g).tolist()  # longer than the windows
    with on_its_path(family):
        engine = RolloutEngine(model, tok, slots=16, max_len=256, compile=compiles(family))
    outs = [grp[0] for grp in engine.generate(prompts, 1, 64, SamplingParams(0.0, ignore_eos=True))]
    seq = torch.tensor([p + c.ids for p, c in zip(prompts, outs)], device=DEVICE)
    with torch.no_grad():
        logits = model(seq).logits[:, 159:-1].float()  # [16, 64, V]: the positions predicting the completion
    chosen = torch.tensor([c.ids for c in outs], device=DEVICE)
    gap = logits.max(-1).values - logits.gather(-1, chosen[..., None])[..., 0]
    lp = torch.log_softmax(logits, -1).gather(-1, chosen[..., None])[..., 0]
    lp_diff = (lp - torch.tensor([c.logprobs for c in outs], device=DEVICE)).abs()
    ref = [grp[0].ids for grp in hf_generate(model, tok, prompts, 1, 64, 0.0, batch_size=16, ignore_eos=True)]
    same = sum(a == b.ids for a, b in zip(ref, outs))
    first = [next((i for i, (x, y) in enumerate(zip(a, b.ids)) if x != y), 64) for a, b in zip(ref, outs)]
    rows.append([family, f"{(gap == 0).float().mean().item():.4f}", f"{gap.max().item():.3f}",
                 f"{lp_diff.max().item():.4f}", f"{lp_diff.mean().item():.5f}",
                 f"{same}/16 (first difference at token {statistics.median(first):.0f}, median)"])
    del engine, model


def section_rollout(family: str, arch: str, rows: list, prompts_n: int, new: int, baseline: bool) -> None:
    from execrl.rollout import RolloutEngine, SamplingParams, hf_generate

    model, tok = build(family, arch)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 259, (prompts_n, 128), generator=g).tolist()
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    fresh_peak()
    with on_its_path(family):
        engine = RolloutEngine(model, tok, slots=prompts_n, max_len=128 + new, compile=compiles(family))
    call = partial(engine.generate, prompts, 1, new, params)
    _, first = timed(call)  # compiles, captures the graphs
    outs, t = median_of(3, call)
    made = sum(len(c.ids) for grp in outs for c in grp)
    row = [family, f"{made / t:,.0f}", f"{t:.2f}", f"{first:.1f}", f"{peak_gib():.1f}"]
    del call, engine
    if baseline:
        fresh_peak()
        outs, t_hf = timed(partial(hf_generate, model, tok, prompts, 1, new, 1.0, batch_size=prompts_n,
                                   ignore_eos=True))
        made_hf = sum(len(c.ids) for grp in outs for c in grp)
        row += [f"{made_hf / t_hf:,.0f}", f"{made / t / (made_hf / t_hf):.1f}x"]
    rows.append(row)
    del model


def section_step(family: str, arch: str, rows: list, steps: int, micro: int) -> None:
    import tempfile
    from pathlib import Path

    from common import padding_prompt, read_metrics, step_overrides

    from execrl.config import load_config
    from execrl.trainer.loop import train

    work = Path(tempfile.mkdtemp())
    tok = byte_tokenizer()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(family_config(family, arch, ARCHS[arch].vocab, tok))
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    del model
    fresh_peak()
    overrides = step_overrides(work / "model", steps, micro, padding_prompt(tok), work / "run")
    train(load_config(None, overrides))
    warm = read_metrics(work / "run")[1:]
    med = {k: statistics.median(m[k] for m in warm) for k in ("time/generate", "time/grade", "time/train")}
    tokens = statistics.median(m["train/completion_len_mean"] for m in warm) * 128
    rows.append([family, f"{sum(med.values()):.2f}", f"{med['time/generate']:.2f}", f"{med['time/train']:.2f}",
                 f"{tokens / med['time/generate']:,.0f}", f"{peak_gib():.1f}", f"{len(warm)} steps after the first"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS), help="the dimensions")
    ap.add_argument("--sections", nargs="+", default=["check", "rollout"], choices=["check", "rollout", "step"])
    ap.add_argument("--steps", type=int, default=4, help="step: GRPO steps (the first, which compiles, not counted)")
    ap.add_argument("--micro", type=int, default=32, help="step: the training micro-batch")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--no-baseline", action="store_true", help="rollout: skip transformers' generate")
    ap.add_argument("--check-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    print(f"device: {device_name()}, torch {torch.__version__}, dimensions of {args.arch}")
    if "check" in args.sections:
        rows = []
        for f in args.families:
            section_check(f, args.arch, rows, getattr(torch, args.check_dtype))
        table(f"Engine vs transformers, {args.check_dtype}, 16 prompts of 160 tokens + 64 greedy", [
            "family", "argmax agreement", "max logit gap", "max |logprob diff|", "mean |logprob diff|",
            "identical to generate"], rows)
    if "rollout" in args.sections:
        rows = []
        for f in args.families:
            section_rollout(f, args.arch, rows, args.prompts, args.new, not args.no_baseline)
        table(f"Rollouts, {args.prompts} prompts x (128 + {args.new}) tokens, forced", [
            "family", "engine tok/s", "s", "first call s", "peak GiB", *([] if args.no_baseline else
                                                                          ["generate tok/s", "engine / generate"])],
            rows)
    if "step" in args.sections:
        rows = []
        for f in args.families:
            section_step(f, args.arch, rows, args.steps, args.micro)
        table("GRPO steps, 16 prompts x 8, 128 + 256 tokens forced, bf16 mixed precision", [
            "family", "s/step", "generate s", "train s", "decode tok/s", "peak GiB", ""], rows)


if __name__ == "__main__":
    main()
