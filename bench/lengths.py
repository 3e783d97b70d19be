"""Realistic completion lengths: real runs do not force every sample to full length. Completions here end at lengths
drawn from a log-normal (mean --mean, at most --max tokens, each sample its own budget), and the engine's figures are
set beside the same samples forced to the mean length, measured in the same run:

    python bench/lengths.py --arch qwen2.5-1.5b --mean 1024 --max 4096
    python bench/lengths.py --arch tiny --mean 8 --max 24 --samples 32 --slots 8   # a smoke run on a CPU
Reported per batch shape (a GRPO step's samples all in slots at once; more samples than slots, refilled as they end):
tokens/s; the decode batch's fullness (generated tokens / (decode steps x slots)) against what batches run to their
longest (no refill) would reach; the milliseconds per decode step (forced to the mean: in brackets); and the training
padding of the same sequences (128-token prompts + completions) in micro-batches of --micro: sorted by length as
execrl's trainer does, in generation order, and by a token budget. Each batch twice: as the engine runs it (once at
most half the slots are busy, steps run on the busy slots' rows only) and with every slot's row in each step. Then what
a decode step costs with a sixteenth of the slots live (the tail of a real-length step) against all of them live,
the tail's positions unsplit and split in runs of --tail-positions (on every row), and as the engine runs it.
"""

from __future__ import annotations

import argparse
import math
import statistics
from contextlib import contextmanager, nullcontext

import torch
from common import ARCHS, build, device_name, timed

from execrl.config.batch import Split
from execrl.rollout import RolloutEngine, SamplingParams, attention
from execrl.rollout.engine import MIN_ROWS
from execrl.trainer.shared_prompt import group_parts

PROMPT = 128


def draw_lengths(n: int, mean: float, most: int, seed: int = 0) -> list[int]:
    """n log-normal lengths (sigma 1, the mean `mean` before the cap), between 1 and `most`."""
    g = torch.Generator().manual_seed(seed)
    sigma = 1.0
    mu = math.log(mean) - sigma ** 2 / 2
    drawn = torch.exp(mu + sigma * torch.randn(n, generator=g))
    return [max(1, min(most, round(x))) for x in drawn.tolist()]


def padding(lengths: list[int], parts: list[list[int]]) -> float:
    """The share of padded positions when each micro-batch is padded to its longest sequence."""
    padded = sum(len(p) * max(lengths[i] for i in p) for p in parts)
    return 1 - sum(lengths) / padded


def layer_tokens(lengths: list[int], micro: int, group: int) -> tuple[int, int]:
    """(rows, packed): the tokens a training pass runs through each layer, in micro-batches of `micro` rows
    sorted by length and padded to each one's longest (policy.shared_prompts=false), and with each group's
    prompt once, its samples' completions after it (trainer/shared_prompt.py, the default)."""
    seqs = [PROMPT + x for x in lengths]
    rows = sum(len(p) * max(seqs[i] for i in p) for p in Split(micro).parts(seqs, range(len(seqs))))
    parts = group_parts(seqs, range(len(seqs)), group, micro, None, None)
    packed = sum(-(-len(p) // group) * max(PROMPT + sum(lengths[j] for j in p[i:i + group])
                                           for i in range(0, len(p), group)) for p in parts)
    return rows, packed


def run(engine: RolloutEngine, prompts: list[list[int]], budgets: list[int]) -> tuple[float, int]:
    """(seconds, decode steps) of one generate call, each prompt its own budget; the same call run once before,
    untimed, so that the graphs of every attention window and split it reaches are compiled and captured (a run
    captures each once, at its first step that needs it)."""
    engine.generate(prompts, 1, budgets, SamplingParams(1.0, ignore_eos=True))
    steps = [0]
    step = engine._step

    def counted(*args):
        steps[0] += 1
        return step(*args)

    engine._step = counted
    try:
        _, seconds = timed(lambda: engine.generate(prompts, 1, budgets, SamplingParams(1.0, ignore_eos=True)))
    finally:
        del engine._step
    return seconds, steps[0]


@contextmanager
def every_row(engine: RolloutEngine):
    """The engine's steps over every slot's row, as before they ran on the busy slots' rows only (engine._rows)."""
    engine._rows = lambda busy: None
    try:
        yield
    finally:
        del engine._rows


@contextmanager
def tail_runs(positions: int):
    """Attention's split of a few live slots' positions (attention.tail_splits) in runs of about `positions` (0: no
    split at any window) while in the block."""
    chosen = (attention.TAIL_FROM, attention.TAIL_POSITIONS)
    attention.TAIL_FROM, attention.TAIL_POSITIONS = (1 << 30, 1) if positions == 0 else (chosen[0], positions)
    try:
        yield
    finally:
        attention.TAIL_FROM, attention.TAIL_POSITIONS = chosen


def static_fullness(lengths: list[int], slots: int) -> float:
    """The decode batch's fullness where each batch of `slots` samples runs until its longest ends."""
    batches = [lengths[i:i + slots] for i in range(0, len(lengths), slots)]
    return sum(lengths) / (slots * sum(max(b) for b in batches))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--mean", type=int, default=1024)
    ap.add_argument("--max", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=512, help="the refill case's samples (the step case: --slots)")
    ap.add_argument("--slots", type=int, default=128, help="the engine's slots (a GRPO step of 16 x 8: 128)")
    ap.add_argument("--tail-positions", type=int, nargs="+", default=[0, 1024, 512, 256],
                    help="the tail's positions per program to compare (0: the tail unsplit)")
    ap.add_argument("--micro", type=int, default=8, help="training micro-batch (sequences)")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt (grpo.num_generations_per_prompt)")
    args = ap.parse_args()

    model, tok = build(args.arch)
    engine = RolloutEngine(model, tok, slots=args.slots, max_len=PROMPT + args.max + 1, compile=device_name() != "cpu")
    g = torch.Generator().manual_seed(0)
    print(f"{args.arch} on {device_name()}, torch {torch.__version__}: {PROMPT}-token prompts, completions log-normal "
          f"(mean {args.mean} before the cap of {args.max}), {args.slots} slots")
    print("| batch | samples | mean / median / max tokens | engine tok/s | forced to the mean, tok/s | ratio | decode "
          "batch full | without refill | ms per decode step (forced) | padding: sorted | in order | by tokens | "
          f"layer tokens, each group's prompt once / rows sorted (groups of {args.group}) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    forced_at = {}  # samples -> (seconds, steps) forced to the mean (every slot busy throughout: rows do not matter)
    batches = [("a GRPO step", args.slots, False), ("a GRPO step, every slot's row in each step", args.slots, True),
               ("refilled", args.samples, False), ("refilled, every slot's row", args.samples, True)]
    for name, n, all_rows in batches:
        lengths = draw_lengths(n, args.mean, args.max, seed=n)
        prompts = torch.randint(3, 259, (n, PROMPT), generator=torch.Generator().manual_seed(n)).tolist()
        with every_row(engine) if all_rows else nullcontext():
            seconds, steps = run(engine, prompts, lengths)
        mean = round(statistics.mean(lengths))
        if n not in forced_at:
            forced_at[n] = run(engine, prompts, [mean] * n)
        forced_s, forced_steps = forced_at[n]
        rate, forced = sum(lengths) / seconds, mean * n / forced_s
        seqs = [PROMPT + x for x in lengths]
        rows = range(n)
        budget = args.micro * (PROMPT + args.mean)
        sorted_pad = padding(seqs, Split(args.micro).parts(seqs, rows))
        in_order = padding(seqs, [list(rows[i:i + args.micro]) for i in range(0, n, args.micro)])
        by_tokens = padding(seqs, Split(args.micro, tokens=budget).parts(seqs, rows))
        as_rows, packed = layer_tokens(lengths, args.micro, args.group)
        print(f"| {name} | {n} | {mean} / {statistics.median(lengths):.0f} / {max(lengths)} | {rate:,.0f} | "
              f"{forced:,.0f} | {rate / forced:.2f} | {sum(lengths) / (steps * args.slots):.0%} | "
              f"{static_fullness(lengths, args.slots):.0%} | {1e3 * seconds / steps:.2f} ({1e3 * forced_s / forced_steps:.2f})"
              f" | {sorted_pad:.0%} | {in_order:.0%} | {by_tokens:.0%} | {packed:,} / {as_rows:,} = {packed / as_rows:.2f} |")
    # what a decode step costs with few slots live: a few samples run to --max while the rest end after one token,
    # against every slot running to --max (the tail of a real-length step, where the longest few decode alone);
    # the few-live case once per split of each slot's positions (attention.tail_splits): off, then the runs' lengths
    few = max(1, args.slots // 16)
    prompts = torch.randint(3, 259, (args.slots, PROMPT), generator=g).tolist()
    full_s, full_steps = run(engine, prompts, [args.max] * args.slots)
    print(f"\nms per decode step to {args.max} tokens, all {args.slots} slots live: {1e3 * full_s / full_steps:.2f}; "
          f"{few} of {args.slots} live, by the positions each program of the tail reads:")
    for positions in args.tail_positions:  # (on every slot's row: the split compared as it was measured)
        with tail_runs(positions), every_row(engine):
            tail_s, tail_steps = run(engine, prompts, [args.max] * few + [1] * (args.slots - few))
        name = "unsplit" if positions == 0 else f"{positions} positions"
        default = " (the default)" if positions == attention.TAIL_POSITIONS else ""
        print(f"  {name}{default}: {1e3 * tail_s / tail_steps:.2f}")
    tail_s, tail_steps = run(engine, prompts, [args.max] * few + [1] * (args.slots - few))
    print(f"  runs of {attention.TAIL_POSITIONS} positions, on the busy slots' rows only (the default: {MIN_ROWS} rows "
          f"at least): {1e3 * tail_s / tail_steps:.2f}")


if __name__ == "__main__":
    main()
