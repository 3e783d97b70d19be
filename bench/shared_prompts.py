"""A GRPO group's samples share their prompt: decode attention reading each unit's prompt once for all its samples
(`engine.units`, `attention._prefix_kernel`) against every slot reading its own copy, in one process. Rollouts of P
prompts x G samples (P x G slots, every sample forced to the same new tokens), at several prompt lengths (a coding
problem's statement is ~400-800 tokens, a GSM8K question ~100); with `--mean`, each prompt's samples end at a
length drawn log-normal (that mean, at most --new: a batch's tail, where few slots still run, is most of its steps):

    python bench/shared_prompts.py --arch qwen2.5-1.5b
    python bench/shared_prompts.py --arch qwen2.5-1.5b --prompt-lengths 640 --new 4096 --mean 1024
    python bench/shared_prompts.py --arch tiny --prompt-lengths 16,48 --new 8 --prompts 2 --group 4   # a CPU smoke run

New tokens per second and ms per decode step of one generate call, its graphs captured by the same call run once
before; the two ways alternate on one engine.
"""

from __future__ import annotations

import argparse

import torch
from common import ARCHS, DEVICE, build, device_name, timed
from lengths import draw_lengths

from execrl.rollout import RolloutEngine, SamplingParams


def run(engine: RolloutEngine, prompts: list[list[int]], group: int, new: int | list[int],
        share: bool) -> tuple[float, int]:
    """(seconds, decode steps) of one generate call, after an untimed one."""
    engine.share_prompts = share
    engine.units.shortest = 1  # (every prompt length in units, below the engine's attention.SHARED_FROM too)
    params = SamplingParams(1.0, ignore_eos=True)
    engine.generate(prompts, group, new, params)
    steps, step = [0], engine._step

    def counted(*args):
        steps[0] += 1
        return step(*args)

    engine._step = counted
    try:
        _, seconds = timed(lambda: engine.generate(prompts, group, new, params))
    finally:
        del engine._step
    return seconds, steps[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8, help="samples per prompt (grpo.num_generations_per_prompt)")
    ap.add_argument("--prompt-lengths", default="128,256,512,640,1024")
    ap.add_argument("--new", type=int, default=256, help="new tokens of every sample (with --mean: at most)")
    ap.add_argument("--mean", type=int, default=0, help="each prompt's new tokens log-normal with this mean (0: --new)")
    args = ap.parse_args()
    model, tok = build(args.arch)
    g = torch.Generator().manual_seed(0)
    slots = args.prompts * args.group
    lengths = [int(x) for x in args.prompt_lengths.split(",")]
    engine = RolloutEngine(model, tok, slots=slots, max_len=max(lengths) + args.new + 16, compile=DEVICE == "cuda")
    budgets = draw_lengths(args.prompts, args.mean, args.new) if args.mean else args.new
    print(f"{args.arch} on {device_name()}: {args.prompts} prompts x {args.group} samples ({slots} slots), new tokens "
          + (f"log-normal per prompt (mean {args.mean}, at most {args.new}): {budgets}" if args.mean else
             f"{args.new} each"))
    print("| prompt tokens | each slot its own copy: tok/s (ms/step) | a unit's prompt read once: tok/s (ms/step) | |")
    print("|---:|---:|---:|---:|")
    for length in lengths:
        prompts = torch.randint(3, 259, (args.prompts, length), generator=g).tolist()
        (own_s, own_n), (once_s, once_n) = (run(engine, prompts, args.group, budgets, share) for share in (False, True))
        tokens = args.group * (sum(budgets) if args.mean else args.prompts * args.new)
        print(f"| {length:,} | {tokens / own_s:,.0f} ({1e3 * own_s / own_n:.3f}) | {tokens / once_s:,.0f} "
              f"({1e3 * once_s / once_n:.3f}) | {own_s / once_s:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
