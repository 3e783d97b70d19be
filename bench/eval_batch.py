"""`execrl eval`'s sampling by how many sequences it decodes at once: its default (on a GPU, as many as half the
free memory holds the KV cache of) against `--batch-size 16` (its only size before), on MBPP's test prompts and a
random-init model saved as an HF directory and loaded as `execrl eval --model` loads it. Greedy, one sample per
problem; the random weights run to the token limit. A first untimed call pays the process's kernel compilation.

    python bench/eval_batch.py --arch qwen2.5-1.5b                      # 256 problems, 512 new tokens
    python bench/eval_batch.py --arch tiny --problems 6 --new 8         # CPU smoke
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path

import torch
from common import ARCHS, device_name, save_arch, table, timed

from execrl.eval.generate import generate
from execrl.models import load_model_and_tokenizer
from execrl.prompts import PromptConfig, build_messages, render
from execrl.tasks import load_problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--problems", type=int, default=256, help="MBPP test problems")
    ap.add_argument("--new", type=int, default=512, help="max new tokens (execrl eval's default)")
    ap.add_argument("--sizes", default="16,auto", help="batch sizes to compare (the first: the baseline)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        save_arch(args.arch, Path(work))
        model, tok = load_model_and_tokenizer(str(Path(work) / "model"))
    problems, _ = load_problems("mbpp", "test", None, 0)
    prompts = [render(build_messages(p, PromptConfig()), tok) for p in problems[: args.problems]]

    def sample(size: int | None, on_slots=None):
        return generate(model, tok, prompts, 1, args.new, 0.0, 1.0, size, "execrl", 0, on_slots=on_slots)

    sample(None)  # untimed: the process's first call compiles its kernels
    rows, base = [], None
    for size in (None if s == "auto" else int(s) for s in args.sizes.split(",")):
        slots = []
        outs, seconds = timed(partial(sample, size, slots.append))
        tokens = sum(n for out in outs for _, n, _ in out)
        rate = tokens / seconds
        base = base or rate
        rows.append(["auto" if size is None else size, slots[-1], tokens, f"{seconds:.2f}", f"{rate:,.0f}",
                     f"{rate / base:.2f}x"])
    table(f"{args.arch} on {device_name()}, torch {torch.__version__}: execrl eval's sampling of {len(prompts)} MBPP "
          f"test prompts, greedy, up to {args.new} new tokens",
          ["--batch-size", "at once", "tokens", "s", "tok/s", "against the first"], rows)


if __name__ == "__main__":
    main()
