"""The engine's rollout rate against its slots (policy.generation_batch_size): a step's samples decoded a few at a
time, as a NeMo RL config's `generation_batch_size: 32` used to be read, against all of them at once, as vLLM decodes
them and as such a config now reads. Ratios are against the fewest slots, measured in the same run.

    python bench/slots.py --arch qwen2.5-1.5b                          # 32 prompts x 16, 128 + 384 new forced
    python bench/slots.py --arch tiny --prompts 4 --generations 4 --new 8 --slots 4,16   # CPU smoke
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from common import ARCHS, DEVICE, build, device_name, fresh_peak, peak_gib, table, timed

from execrl.rollout import RolloutEngine, SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (NeMo RL's grpo_math_1B: 32)")
    ap.add_argument("--generations", type=int, default=16, help="samples per prompt (grpo_math_1B: 16)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    ap.add_argument("--new", type=int, default=384, help="tokens generated per sample (forced)")
    ap.add_argument("--slots", default="32,64,128,256,512", help="slot counts to compare (the first: the baseline)")
    args = ap.parse_args()
    model, tok = build(args.arch)
    prompts = torch.randint(3, 259, (args.prompts, args.prompt), generator=torch.Generator().manual_seed(0)).tolist()
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    samples = args.prompts * args.generations
    rows, base = [], None
    for slots in (int(s) for s in args.slots.split(",")):
        fresh_peak()
        engine = RolloutEngine(model, tok, slots=slots, max_len=args.prompt + args.new, compile=DEVICE == "cuda")
        run = partial(engine.generate, prompts, args.generations, args.new, params)
        run()  # compiles and captures
        _, seconds = timed(run)
        rate = samples * args.new / seconds
        base = base or rate
        rows.append([slots, f"{seconds:.2f}", f"{rate:,.0f}", f"{rate / base:.2f}x", f"{peak_gib():.1f}"])
        del engine, run
    table(f"{args.arch} on {device_name()}, torch {torch.__version__}: {args.prompts} prompts x {args.generations} "
          f"samples, {args.prompt} + {args.new} tokens forced, by the engine's slots",
          ["slots", "s", "tok/s", "against the first", "peak GiB"], rows)


if __name__ == "__main__":
    main()
