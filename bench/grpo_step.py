"""Rollout, training and end-to-end GRPO-step throughput, each beside its baseline measured in the same run.

    python bench/grpo_step.py                      # all sections, both architectures
    python bench/grpo_step.py --sections rollout --archs qwen2.5-0.5b
    python bench/grpo_step.py --archs tiny --prompts 16 --new-tokens 16 --steps 2 --micro 16 --no-compile  # CPU smoke
Sections:
  rollout  256 prompts x (128 + 256) tokens, forced to full length: the execrl engine vs transformers `generate`
  check    the engine at 0.5B in bf16 against transformers: greedy choices and logprobs (teacher-forced)
  train    forward + backward of per-token logprobs, 8 x 1024 tokens: chunked LM head vs full fp32 log-softmax; MFU
  step     `execrl train` steps, 16 prompts x 8 samples, ~128-token prompts, 256 new tokens forced: engine vs
           the transformers backend, and (`--step-backends ...,trl,trl-cb`, where `pip install trl` was run) TRL's
           GRPO step on the same model and prompts, generating with `generate` or continuous batching
           (bench/trl_baseline.py)
Random-init weights of the real architectures with their real vocabulary (throughput does not depend on weight
values); prompts come from a byte-level tokenizer whose ids are a subset of that vocabulary. MFU uses the dense
bf16 peak of an H100/H200 (989 TFLOP/s); the FLOPs are 6 x (matmul parameters) per token plus causal attention.
On a CPU the engine runs uncompiled and without CUDA graphs (both CUDA only): the rollout section's compiled rows say
they need a GPU, and MFU is left blank.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from functools import partial
from pathlib import Path

import torch
from common import (
    DEVICE,
    NO_COMPILE,
    QUIET,
    build,
    device_name,
    fresh_peak,
    median_of,
    peak_gib,
    read_metrics,
    save_arch,
    table,
    timed,
)

PEAK = 989e12  # dense bf16 FLOP/s of an H100/H200


def matmul_params(model) -> int:
    c = model.config
    d, hd = c.hidden_size, c.hidden_size // c.num_attention_heads
    attn = d * (c.num_attention_heads + 2 * c.num_key_value_heads) * hd + c.num_attention_heads * hd * d
    return c.num_hidden_layers * (attn + 3 * d * c.intermediate_size) + c.vocab_size * d


def train_flops(model, batch: int, seq: int) -> float:
    c = model.config
    attention = 6 * c.num_hidden_layers * seq * c.hidden_size  # causal: QK^T and AV over seq/2 keys on average, x3
    return batch * seq * (6 * matmul_params(model) + attention)


def section_rollout(arch: str, rows: list, compile_engine: bool, n: int = 256, new: int = 256):
    """n sequences of 128 prompt + `new` tokens; the GRPO shape: n / 8 prompts x 8 samples."""
    from execrl.rollout import RolloutEngine, SamplingParams, hf_generate

    model, tok = build(arch)
    plen = 128
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 259, (n, plen), generator=g).tolist()
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    variants = [("execrl engine", {"compile": True}), ("execrl engine, not compiled", {})]
    if compile_engine:  # also without CUDA graphs, and with decode's down projection as one GEMM (decoder.down_parts)
        variants += [("execrl engine, no CUDA graphs", {"cuda_graphs": False}),
                     ("execrl engine, down projection as one GEMM", {"compile": True, "down_parts": 1})]
    speeds = {}
    for name, kwargs in variants:
        if DEVICE != "cuda" and name != "execrl engine, not compiled":  # (the engine compiles, and graphs, on CUDA)
            rows.append([arch, name, "needs a GPU", "", "",
                         f"compile and CUDA graphs are CUDA only, not run on {DEVICE}"])
            continue
        fresh_peak()
        kwargs = dict(kwargs)
        parts = kwargs.pop("down_parts", None)
        engine = RolloutEngine(model, tok, slots=n, max_len=plen + new, **kwargs)
        if parts is not None:
            engine.dec.down_parts = parts
        run = partial(engine.generate, prompts, 1, new, params)
        _, first = timed(run)  # captures the CUDA graphs
        outs, t = median_of(3, run)
        made = sum(len(c.ids) for grp in outs for c in grp)
        speeds[name] = made / t
        rows.append([arch, name, f"{made / t:,.0f}", f"{t:.2f}", f"{peak_gib():.1f}", f"first call {first:.2f}s"])
        del engine
    made = speeds.get("execrl engine", speeds["execrl engine, not compiled"])
    fresh_peak()
    outs, t_hf = timed(lambda: hf_generate(model, tok, prompts, 1, new, 1.0, batch_size=n, ignore_eos=True))
    made_hf = sum(len(c.ids) for grp in outs for c in grp)
    rows.append([arch, "transformers generate", f"{made_hf / t_hf:,.0f}", f"{t_hf:.2f}", f"{peak_gib():.1f}",
                 f"engine = {made / (made_hf / t_hf):.1f}x"])
    # the GRPO shape: n / 8 prompts x 8 samples, each prompt prefilled once
    fresh_peak()
    engine = RolloutEngine(model, tok, slots=n, max_len=plen + new, compile=True)
    k = max(1, n // 8)
    engine.generate(prompts[:k], 8, new, params)
    outs, t = median_of(3, lambda: engine.generate(prompts[:k], 8, new, params))
    made = sum(len(c.ids) for grp in outs for c in grp)
    rows.append([arch, f"execrl engine, {k} prompts x 8", f"{made / t:,.0f}", f"{t:.2f}", f"{peak_gib():.1f}",
                 "" if engine.compiled else "not compiled"])


def section_check(arch: str, rows: list):
    from execrl.rollout import RolloutEngine, SamplingParams, hf_generate

    model, tok = build(arch)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 259, (32, 64), generator=g).tolist()
    engine = RolloutEngine(model, tok, slots=64, max_len=256)
    for temp in (0.0, 1.0):
        outs = [grp[0] for grp in engine.generate(prompts, 1, 64, SamplingParams(temp, ignore_eos=True))]
        seq = torch.tensor([p + c.ids for p, c in zip(prompts, outs)], device=DEVICE)
        with torch.no_grad():
            logits = model(seq).logits[:, 63:-1].float()  # [32, 64, V] positions predicting the completion
        logp = torch.log_softmax(logits / (temp or 1.0), -1)
        chosen = torch.tensor([c.ids for c in outs], device=DEVICE)
        picked = logp.gather(-1, chosen[..., None])[..., 0]
        lp_diff = (picked - torch.tensor([c.logprobs for c in outs], device=DEVICE)).abs()
        if temp == 0:
            best = logits.max(-1).values
            gap = best - logits.gather(-1, chosen[..., None])[..., 0]
            argmax_agree = (gap == 0).float().mean().item()
            ref = [grp[0].ids for grp in hf_generate(model, tok, prompts, 1, 64, 0.0, batch_size=32, ignore_eos=True)]
            same = sum(a == b.ids for a, b in zip(ref, outs))
            first_diff = [next((i for i, (x, y) in enumerate(zip(a, b.ids)) if x != y), 64) for a, b in zip(ref, outs)]
            rows.append([arch, "greedy", f"{argmax_agree:.4f}", f"{gap.max().item():.4f}",
                         f"{lp_diff.max().item():.4f}", f"{lp_diff.mean().item():.5f}",
                         f"{same}/32 identical to generate; first difference at token {statistics.median(first_diff):.0f} "
                         "(median)"])
        else:
            rows.append([arch, "sampled, T=1", "", "", f"{lp_diff.max().item():.4f}", f"{lp_diff.mean().item():.5f}", ""])


def section_train(arch: str, rows: list, compile_layers: bool):
    from execrl.trainer.step import token_logprobs

    model, _ = build(arch)
    model.train()
    batch, seq = 8, 1024
    ids = torch.randint(3, 259, (batch, seq), device=DEVICE)
    attn = torch.ones_like(ids)
    select = torch.ones(batch, seq - 1, dtype=torch.bool, device=DEVICE)
    adv = torch.randn(batch, 1, device=DEVICE)
    flops = train_flops(model, batch, seq)

    def ours():
        logp = token_logprobs(model, ids, attn, select)[0]
        (logp * adv).mean().backward()

    def full_fp32():  # what the trainer did before: the whole batch's logits in fp32
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        (logp * adv).mean().backward()

    variants = [("full fp32 log-softmax (before)", full_fp32), ("chunked LM head", ours)]
    if compile_layers:
        def compiled():
            if not getattr(model, "_bench_compiled", False):
                for layer in model.model.layers:
                    layer.compile()
                model._bench_compiled = True
            ours()
        variants.append(("chunked + compiled layers (execrl default)", compiled))
    for name, fn in variants:
        fresh_peak()
        try:
            for _ in range(2):
                fn()
                model.zero_grad(set_to_none=True)
            times = []
            for _ in range(5):
                _, t = timed(fn)
                times.append(t)
                model.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            rows.append([arch, name, "OOM", "", "", ""])
            continue
        t = statistics.median(times)
        mfu = f"{flops / t / PEAK:.1%}" if DEVICE == "cuda" else ""  # (of a GPU's peak)
        rows.append([arch, name, f"{batch * seq / t:,.0f}", f"{t * 1000:.0f}", mfu, f"{peak_gib():.1f}"])


def section_step(arch: str, rows: list, backends: list[str], steps: int, compile_all: bool, micro_execrl: int,
                 pure_too: bool = False, new: int = 256, checkpointing: str | None = None):
    """pure_too: also the execrl step in pure bf16 (no fp32 master: execrl before issue 18), for its time and memory;
    `new`: the new tokens forced per sample; `checkpointing`: policy.activation_checkpointing's scope (layer, mlp),
    None: off."""
    from execrl.config import load_config
    from execrl.trainer import precision
    from execrl.trainer.loop import train

    work = Path(tempfile.mkdtemp())
    system = save_arch(arch, work)
    compiled = compile_all and DEVICE == "cuda"  # (the trainer and the engine compile on CUDA only)
    for backend in [*backends, *(["execrl (pure bf16)"] if pure_too else [])]:
        if backend in ("trl", "trl-cb"):
            trl_row(arch, rows, work, system, new, steps, min(micro_execrl, 32), backend == "trl-cb")
            continue
        precision.PURE_LOW_PRECISION = backend == "execrl (pure bf16)"
        rows_only = backend == "execrl-rows"  # each sample its own row: its group's prompt forwarded with it
        label, backend = ("execrl (a row per sample)", "execrl") if rows_only else (backend, backend.split()[0])
        n_steps = steps if backend == "execrl" else 2
        micro = micro_execrl if backend == "execrl" else min(micro_execrl, 32)  # transformers' generate takes room
        log_dir = work / label.replace(" ", "_")
        overrides = [f"policy.model_name={work / 'model'}", f"grpo.max_num_steps={n_steps}", "warmup.sft_steps=0",
                     "grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8",
                     "policy.train_global_batch_size=128", f"policy.train_micro_batch_size={micro}",
                     "policy.logprob_batch_size=32", "policy.generation_batch_size=128",
                     f"policy.max_total_sequence_length={max(400, 144 + new)}",
                     f"policy.generation.max_new_tokens={new}",
                     "policy.generation.ignore_eos=true", f"policy.generation.backend={backend}",
                     f"prompt.system_prompt={system}", *QUIET, f"logger.log_dir={log_dir}",
                     "policy.optimizer.kwargs.lr=1e-6", f"policy.activation_checkpointing={bool(checkpointing)}",
                     f"policy.activation_checkpointing_scope={checkpointing or 'layer'}",
                     f"policy.shared_prompts={not rows_only}"]
        if not compile_all or backend != "execrl":
            overrides += NO_COMPILE
        fresh_peak()
        train(load_config(None, overrides))
        ms = read_metrics(log_dir)
        warm = ms[1:] or ms
        med = {k: statistics.median(m[k] for m in warm) for k in ("time/generate", "time/grade", "time/train")}
        total = sum(med.values())
        tokens = statistics.median(m["train/completion_len_mean"] for m in warm) * 128
        mismatch = statistics.median(m.get("train/logprob_mismatch", float("nan")) for m in warm)
        rows.append([arch, f"{label}, micro-batch {micro}", f"{total:.2f}", f"{med['time/generate']:.2f}", f"{med['time/grade']:.2f}",
                     f"{med['time/train']:.2f}", f"{tokens / med['time/generate']:,.0f}", f"{peak_gib():.1f}",
                     f"{len(warm)} steps" + (", compiled" if compiled and backend == "execrl" else "")
                     + (f", activation checkpointing ({checkpointing})" if checkpointing else "")
                     + (f", engine vs trainer {mismatch:.4f}" if backend == "execrl" else "")])
    precision.PURE_LOW_PRECISION = False


def trl_row(arch: str, rows: list, work: Path, system: str, new: int, steps: int, micro: int, batching: bool) -> None:
    """TRL's GRPO step on the same model and prompts (bench/trl_baseline.py), or why it cannot run here; `batching`:
    with transformers' continuous batching (`trl-cb`) in place of `generate`."""
    import trl_baseline

    missing = trl_baseline.available()
    if missing:
        rows.append([arch, "trl", missing, "", "", "", "", "", ""])
        return
    fresh_peak()
    r = trl_baseline.trl_step(work / "model", system, new, max(2, min(steps, 3)), micro, batching)
    how = "transformers continuous batching" if batching else "transformers generate"
    rows.append([arch, f"trl {__import__('trl').__version__} ({how}), micro-batch {micro}",
                 f"{r['step']:.2f}", f"{r['generate']:.2f}", "(in train)", f"{r['train']:.2f}",
                 f"{r['tokens'] / r['generate']:,.0f}", f"{r['peak']:.1f}", f"{r['steps']} steps"])


def shared_ratio(rows: list) -> str | None:
    """The step with each group's prompt forwarded once against a row per sample, where both ran."""
    shared = [r for r in rows if r[1].startswith("execrl,")]
    alone = [r for r in rows if r[1].startswith("execrl (a row per sample)")]
    if not shared or not alone:
        return None
    (a, b) = shared[0], alone[0]
    return (f"each group's prompt forwarded once: train phase {float(b[5]) / float(a[5]):.2f}x, step "
            f"{float(b[2]) / float(a[2]):.2f}x against a row per sample, in this run")


def trl_ratio(rows: list) -> str | None:
    """execrl's step against TRL's, where both ran: the same run's ratio."""
    ours = [float(r[2]) for r in rows if r[1].startswith("execrl,")]
    theirs = {r[1].split(",")[0]: float(r[2]) for r in rows if r[1].startswith("trl ")}
    if not ours or not theirs:
        return None
    return "execrl's step is " + ", ".join(f"{t / ours[0]:.1f}x faster than {name}" for name, t in theirs.items()) \
        + " in this run"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="rollout,check,train,step")
    ap.add_argument("--archs", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--step-backends", default="execrl,transformers", help="step section: of execrl, execrl-rows "
                    "(each sample its own row in training: policy.shared_prompts=false), transformers, trl (TRL's step "
                    "with transformers generate), trl-cb (TRL with continuous batching)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=256, help="rollout section: sequences generated at once")
    ap.add_argument("--new-tokens", type=int, default=256, help="rollout and step sections: new tokens forced")
    ap.add_argument("--pure-bf16-too", action="store_true",
                    help="step section: also the step without fp32 master weights (before issue 18)")
    ap.add_argument("--micro", type=int, default=None,
                    help="step section: policy.train_micro_batch_size (default 128 at 0.5B, 32 above)")
    ap.add_argument("--activation-checkpointing", nargs="?", const="layer", choices=["layer", "mlp"], default=None,
                    help="step section: recompute activations in the backward (policy.activation_checkpointing), as "
                    "long traces need: each layer (layer, the default) or each MLP (mlp: "
                    "policy.activation_checkpointing_scope)")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="step section: the engine and training layers not compiled; rollout section: fewer variants")
    args = ap.parse_args()
    sections, archs = args.sections.split(","), args.archs.split(",")
    print(f"{device_name()}, torch {torch.__version__}, "
          f"transformers {__import__('transformers').__version__}")
    if "rollout" in sections:
        rows = []
        for arch in archs:
            section_rollout(arch, rows, args.compile, args.prompts, args.new_tokens)
        table(f"Rollouts: {args.prompts} sequences x (128 prompt + {args.new_tokens} new) tokens, T=1",
              ["arch", "backend", "new tok/s", "s", "peak GiB", "note"], rows)
    if "check" in sections:
        rows = []
        section_check("qwen2.5-0.5b" if DEVICE == "cuda" else archs[0], rows)
        table("Engine vs transformers in bf16 (teacher-forced over the engine's tokens)",
              ["arch", "mode", "engine token = argmax", "max logit gap", "max |dlogprob|", "mean |dlogprob|", "note"], rows)
    if "train" in sections:
        rows = []
        for arch in archs:
            section_train(arch, rows, args.compile)
        table("Forward + backward of per-token logprobs, 8 x 1024 tokens", ["arch", "variant", "tok/s", "ms", "MFU",
              "peak GiB"], rows)
    if "step" in sections:
        rows = []
        for arch in archs:
            section_step(arch, rows, args.step_backends.split(",") if arch == archs[0] else ["execrl"], args.steps,
                         args.compile, args.micro or (128 if arch == "qwen2.5-0.5b" else 32), args.pure_bf16_too,
                         args.new_tokens, args.activation_checkpointing)
        table(f"GRPO step (execrl train): 16 prompts x 8, ~128 + {args.new_tokens} tokens",
              ["arch", "backend", "step s", "generate s", "grade s", "train s", "gen tok/s", "peak GiB", "note"], rows)
        for ratio in (trl_ratio([r for r in rows if r[0] == archs[0]]), shared_ratio(rows)):
            if ratio:
                print(ratio)


if __name__ == "__main__":
    main()
