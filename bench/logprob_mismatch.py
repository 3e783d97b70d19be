"""Where the engine-vs-trainer logprob mismatch comes from (issue 44): the engine's sampler logprobs and the trainer's
logprobs of the same tokens differ by a mean of 0.013 per token at 0.5B and 0.065 at 7B (bench/memory.py, bf16,
random weights). Is the engine wrong, or is that what bf16 arithmetic gives?

    python bench/logprob_mismatch.py                                       # on a GPU: 0.5B, 3B and 7B shapes
    python bench/logprob_mismatch.py --archs tiny --prompts 4 --new 16     # a smoke run on a CPU

For each architecture (random-init weights, seed 0, bf16 with fused projections as the trainer runs them), the engine
samples --prompts completions of --new tokens at T=1 and keeps each token's logprob as its sampler saw it. The same
tokens are then scored by the trainer's own function (trainer/step.token_logprobs) twice: with the same bf16 weights,
and with an fp32 copy of them (the reference: the same function, the same weights, no bf16 rounding anywhere). If the
engine is as far from fp32 as the trainer's bf16 pass is, the mismatch between the two is bf16 rounding in two
different orders of the same sums, not a bug in either. Also printed: the fp32 logits' standard deviation (rounding
errors scale with the logits), and the mismatch over the first and the last quarter of the completion.
"""

from __future__ import annotations

import argparse
import copy

import torch
from common import DEVICE, build, device_name, table


def score(model, seq: torch.Tensor, plen: int) -> torch.Tensor:
    """The trainer's logprobs of the completion tokens seq[:, plen:]: [B, new]."""
    from execrl.trainer.step import token_logprobs

    select = torch.zeros(seq.shape[0], seq.shape[1] - 1, dtype=torch.bool, device=seq.device)
    select[:, plen - 1:] = True
    with torch.no_grad():
        logp = token_logprobs(model, seq, torch.ones_like(seq), select)[0]
    return logp[:, plen - 1:].float()


def logit_std(model, seq: torch.Tensor, plen: int) -> float:
    with torch.no_grad():
        logits = model(seq[:, :plen + 8]).logits[:, plen - 1:].float()  # a few positions are enough
    return logits.std(-1).mean().item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="qwen2.5-0.5b,qwen2.5-3b,qwen2.5-coder-7b")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--plen", type=int, default=128)
    ap.add_argument("--new", type=int, default=512)
    args = ap.parse_args()
    from execrl.rollout import RolloutEngine, SamplingParams

    rows = []
    for arch in args.archs.split(","):
        model, tok = build(arch, init=DEVICE)
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(3, 259, (args.prompts, args.plen), generator=g).tolist()
        engine = RolloutEngine(model, tok, slots=args.prompts, max_len=args.plen + args.new)
        outs = [grp[0] for grp in engine.generate(prompts, 1, args.new, SamplingParams(1.0, ignore_eos=True))]
        del engine
        seq = torch.tensor([p + c.ids for p, c in zip(prompts, outs)], device=DEVICE)
        sampled = torch.tensor([c.logprobs for c in outs], device=DEVICE, dtype=torch.float32)  # [B, new]
        trainer_bf16 = score(model, seq, args.plen)
        reference = copy.deepcopy(model).float()  # the same weights, exactly, in fp32
        del model
        fp32 = score(reference, seq, args.plen)
        std = logit_std(reference, seq, args.plen)
        del reference
        q = max(1, args.new // 4)
        for name, a, b in (("engine vs trainer (bf16)", sampled, trainer_bf16), ("engine vs fp32", sampled, fp32),
                           ("trainer (bf16) vs fp32", trainer_bf16, fp32)):
            d = (a - b).abs()
            rows.append([arch, name, f"{d.mean().item():.4f}", f"{d.max().item():.3f}",
                         f"{d[:, :q].mean().item():.4f}", f"{d[:, -q:].mean().item():.4f}", f"{std:.2f}"])
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    table(f"Per-token logprob differences, {args.prompts} x ({args.plen} + {args.new}) tokens sampled at T=1 by the "
          f"engine in bf16, random-init weights, on {device_name()}",
          ["arch", "pair", "mean |diff|", "max", f"first {q} tokens", f"last {q}", "fp32 logits std"], rows)


if __name__ == "__main__":
    main()
