"""A decode step with few slots live at long windows: each live (slot, kv head) pair's positions read by one program
(unsplit) against the engine's split (`attention.tail_splits`: at most 64 live pairs, at most window / 512 runs and
~256 programs). The cases: the tail of a GRPO step (a few of 128 slots still running, the others ended after
one token), a quarter of them live, and a small engine's full batch (evaluation, multi-turn episodes):

    python bench/few_live.py --arch qwen2.5-1.5b --new 2048
    python bench/few_live.py --arch tiny --new 24 --cases 8:2,4:4    # a smoke run on a CPU (no split kernels there)

Milliseconds per decode step of one generate call (its graphs captured by the same call run once before), new
tokens forced; each case on one engine, unsplit first, then as the engine runs it.
"""

from __future__ import annotations

import argparse

import torch
from common import ARCHS, DEVICE, build, device_name
from lengths import PROMPT, run, tail_runs

from execrl.rollout import RolloutEngine, attention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--new", type=int, default=2048, help="new tokens of each live sample")
    ap.add_argument("--cases", default="128:8,128:32,16:16,32:32", help="slots:live, comma-separated")
    args = ap.parse_args()
    model, tok = build(args.arch)
    cases = [tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")]
    g = torch.Generator().manual_seed(0)
    print(f"{args.arch} on {device_name()}: {PROMPT}-token prompts, the live samples to {args.new} new tokens, "
          "the others 1")
    print("| slots | live | kv heads | the rule's split at the last window | unsplit ms/step | split ms/step | |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for slots, live in cases:
        engine = RolloutEngine(model, tok, slots=slots, max_len=PROMPT + args.new + 16, compile=DEVICE == "cuda")
        prompts = torch.randint(3, 259, (slots, PROMPT), generator=g).tolist()
        budgets = [args.new] * live + [1] * (slots - live)
        with tail_runs(0):
            unsplit_s, unsplit_steps = run(engine, prompts, budgets)
        split_s, split_steps = run(engine, prompts, budgets)
        split = attention.tail_splits(live, engine.dec.kv_heads, engine._window(PROMPT + args.new))
        a, b = 1e3 * unsplit_s / unsplit_steps, 1e3 * split_s / split_steps
        print(f"| {slots} | {live} | {engine.dec.kv_heads} | {split} | {a:.3f} | {b:.3f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
