"""Decode attention alone at long windows: the Triton kernel with one program per (slot, kv head) against the same
positions split over several programs and combined (rollout/attention.py: split-K), as the GB/s of keys and values
read. Every slot reads its whole window (its last position is window - 1): a long trace's late steps.

    python bench/decode_attention.py --arch qwen2.5-1.5b
    python bench/decode_attention.py --arch qwen2.5-1.5b --slots 8,16,32 --windows 8192,16384 --splits 1,2,4,8,auto
    python bench/decode_attention.py --arch tiny --slots 4 --windows 1024   # CPU: the reference path only
    python bench/decode_attention.py --arch qwen2.5-1.5b --slots 128 --windows 4096 --mixed 1024 --splits 1,2,4,8,16

`auto` is the split count the engine picks (attention.splits_for); the others are forced. `--mixed MEAN`: each slot
reads a prompt of 128 positions and a completion drawn log-normal (mean MEAN, capped by the window; bench/lengths.py's
draw), as a refilled batch at realistic lengths holds them, instead of the whole window; GB/s then counts the
positions read.
"""

import argparse
from functools import partial

import torch
from common import ARCHS, DEVICE, device_name, timed
from lengths import draw_lengths

from execrl.rollout import attention

PROMPT = 128  # --mixed: each slot's prompt positions


def run(q, k, v, pos, window: int, splits: int | None) -> float:
    """Seconds per call, `splits` forced (None: the engine's choice)."""
    pick = attention.splits_for
    if splits is not None:
        attention.splits_for = lambda *_: splits
    try:
        fn = partial(attention.decode_attention, q, k, v, pos, window, q.shape[-1] ** -0.5)
        fn()
        return timed(fn, 50)[1]
    finally:
        attention.splits_for = pick


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b", choices=sorted(ARCHS))
    ap.add_argument("--slots", default="32,128,256")
    ap.add_argument("--windows", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--splits", default="1,2,4,8,auto", help="split counts to time (1: no split; auto: the engine's)")
    ap.add_argument("--mixed", type=int, default=None, help="each slot's positions: 128 + a log-normal completion "
                    "of this mean (capped by the window), not the whole window")
    args = ap.parse_args()
    a = ARCHS[args.arch]
    hkv, group, dim = a.kv_heads, a.heads // a.kv_heads, a.hidden // a.heads
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    variants = args.splits.split(",")
    gpu = DEVICE == "cuda" and attention.triton is not None
    print(f"{args.arch} decode attention on {device_name()}, torch {torch.__version__}: {hkv} kv heads x {group} "
          f"queries, head dim {dim}, {dtype}; " + (f"each slot reads {PROMPT} + a log-normal completion (mean "
                                                   f"{args.mixed}) positions" if args.mixed else
                                                   "every slot reads its whole window"))
    if not gpu:
        print("(the Triton kernel needs a GPU: timing the reference path, masked scaled_dot_product_attention)")
        variants = ["reference"]
    names = [s if s == "reference" else f"splits {s}" for s in variants]
    print("| slots | window | KV read MB | " + " | ".join(f"{n} GB/s (us)" for n in names) + " | best vs 1 split |")
    print("|---|---|---|" + "---|" * (len(variants) + 1))
    for slots in map(int, args.slots.split(",")):
        for window in map(int, args.windows.split(",")):
            q = torch.randn(slots, hkv, group, dim, device=DEVICE, dtype=dtype)
            k, v = (torch.randn(slots, hkv, window, dim, device=DEVICE, dtype=dtype) for _ in range(2))
            pos = torch.full((slots,), window - 1, device=DEVICE)
            if args.mixed:
                drawn = draw_lengths(slots, args.mixed, window - PROMPT, seed=slots)
                pos = torch.tensor([PROMPT + x - 1 for x in drawn], device=DEVICE)
            read = 2 * int(pos.sum() + slots) * hkv * dim * k.element_size()
            if gpu:
                seconds = [run(q, k, v, pos, window, None if s == "auto" else int(s)) for s in variants]
                auto = f" (auto: {attention.splits_for(slots, hkv, window)})" if "auto" in variants else ""
            else:
                seconds = [timed(partial(attention.reference, q, k, v, pos, window, dim**-0.5), 3)[1]]
                auto = ""
            rates = [read / s / 1e9 for s in seconds]
            best = f"{max(rates) / rates[0]:.2f}x" if variants[0] == "1" else "-"
            print(f"| {slots} | {window} | {read / 1e6:,.0f} | "
                  + " | ".join(f"{r:,.0f} ({1e6 * t:.0f})" for r, t in zip(rates, seconds))
                  + f" | {best}{auto} |", flush=True)


if __name__ == "__main__":
    main()
