"""Decoding and training at once on one GPU, against one after the other: does a GRPO step gain by running the
next batch's decoding (bandwidth-bound at 128 rows) beside this batch's training (compute-bound)?

    python bench/overlap.py --arch qwen2.5-1.5b --new 4096 --micro 4 --repeat 1   # the 4K step's two phases
    python bench/overlap.py --arch qwen2.5-0.5b --new 256 --micro 32
    python bench/overlap.py --arch qwen2.5-1.5b --new 256 --micro 32 --matmuls 0 --repeat 1 --carveouts 16,32,48,66
    python bench/overlap.py --arch tiny --new 16 --micro 16 --rows 16 --matmul-size 256 --repeat 1  # CPU smoke
The engine generates --rows prompts x (--prompt + --new forced) tokens on a stream of its own, in a thread, while
the main thread runs the forward and backward of per-token logprobs over the same shape in micro-batches of
--micro (the trainer's token_logprobs, layers compiled on a GPU). Rows: each part alone, the two in turn (the sum),
and the two at once with the decoding stream at normal and at high priority, with when each part ended. First, the
same pairing with a plain loop of bf16 matmuls (--matmuls of --matmul-size squared) in place of training, either side:
a baseline free of execrl's code for whether the GPU runs a decode step's kernels beside large GEMMs at all. With
--carveouts, the training's cuBLAS GEMMs leave that many SMs to the decoding (torch's experimental SM carveout, set
while the training runs; the decode step's kernels, captured in CUDA graphs before, keep every SM): training alone
so, and the two at once (on torch 2.11 it barely slowed the compiled layers' GEMMs: bench/README.md).
"""

from __future__ import annotations

import argparse
import threading
import time
from contextlib import nullcontext
from functools import partial

import torch
from common import DEVICE, build, sync, table, timed

from execrl.rollout import RolloutEngine, SamplingParams
from execrl.trainer.policy import compile_layers
from execrl.trainer.step import token_logprobs


def together(main, side, priority: int = 0) -> tuple[float, float, float]:
    """(wall seconds, when `side` ended, when `main` ended): `side` in a thread on a stream of its own (GPU: of
    `priority`, -1 high), `main` on this thread's."""
    stream = torch.cuda.Stream(priority=priority) if DEVICE == "cuda" else None
    ended = {}

    def in_thread():
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            side()
        if stream is not None:
            stream.synchronize()
        ended["side"] = time.perf_counter() - t

    sync()
    t = time.perf_counter()
    thread = threading.Thread(target=in_thread)
    thread.start()
    main()
    sync()
    ended["main"] = time.perf_counter() - t
    thread.join()
    return time.perf_counter() - t, ended["side"], ended["main"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--rows", type=int, default=128, help="sequences generated and trained (a 16 x 8 GRPO step)")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256, help="tokens generated per sequence (forced)")
    ap.add_argument("--micro", type=int, default=32, help="training micro-batch (sequences)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of the training pairs")
    ap.add_argument("--matmuls", type=int, default=1000, help="square matmuls of the baseline pairs (0: none)")
    ap.add_argument("--matmul-size", type=int, default=8192)
    ap.add_argument("--carveouts", default="", help="SMs the training's GEMMs leave free, comma-separated (GPU)")
    args = ap.parse_args()
    model, tok = build(args.arch)
    cuda = DEVICE == "cuda"
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 259, (args.rows, args.prompt), generator=g).tolist()
    engine = RolloutEngine(model, tok, slots=args.rows, max_len=args.prompt + args.new, compile=cuda)
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    length = args.prompt + args.new
    ids = torch.randint(3, 259, (args.rows, length), generator=g).to(DEVICE)
    select = torch.zeros(args.rows, length - 1, dtype=torch.bool, device=DEVICE)
    select[:, args.prompt - 1:] = True  # [B, L-1] the completions' tokens
    if cuda:
        compile_layers(model, None)
    a = torch.randn(args.matmul_size, args.matmul_size, device=DEVICE, dtype=torch.bfloat16) if args.matmuls else None

    def generate():
        engine.generate(prompts, 1, args.new, params)

    def train(carveout: int = 0):
        if carveout:
            torch._C._set_sm_carveout_experimental(carveout)
        try:
            with torch.enable_grad():
                for i in range(0, args.rows, args.micro):
                    token_logprobs(model, ids[i:i + args.micro], None, select[i:i + args.micro])[0].mean().backward()
            model.zero_grad(set_to_none=True)
        finally:
            if carveout:
                torch.cuda.current_stream().synchronize()  # (the GEMMs launched under it have run)
                torch._C._set_sm_carveout_experimental(None)

    def matmuls():
        for _ in range(args.matmuls):
            a @ a

    generate()  # compiles and captures
    train()
    rows = []
    if args.matmuls:
        matmuls()
        m, gen = timed(matmuls)[1], timed(generate)[1]
        rows += [["-", "matmuls alone", f"{m:.3f}", "", ""], ["-", "generate alone", f"{gen:.3f}", "", ""],
                 ["-", "in turn (sum)", f"{m + gen:.3f}", "", ""]]
        for name, first, second in (("at once: matmuls here, generate in the thread", matmuls, generate),
                                    ("at once: generate here, matmuls in the thread", generate, matmuls)):
            wall, side_end, main_end = together(first, second)
            ends = {"matmuls": main_end, "generate": side_end} if first is matmuls else \
                {"matmuls": side_end, "generate": main_end}
            rows.append(["-", name, f"{wall:.3f}", f"{ends['generate']:.3f}", f"matmuls {ends['matmuls']:.3f}"])
    for r in range(args.repeat):
        gen, tr = timed(generate)[1], timed(train)[1]
        rows += [[r, "generate alone", f"{gen:.3f}", "", ""], [r, "train alone", f"{tr:.3f}", "", ""],
                 [r, "in turn (sum)", f"{gen + tr:.3f}", "", ""]]
        for name, priority in (("at once, decoding at normal priority", 0), ("at once, decoding at high priority", -1)):
            wall, gen_end, train_end = together(train, generate, priority)
            rows.append([r, name, f"{wall:.3f}", f"{gen_end:.3f}", f"train {train_end:.3f}"])
    for c in [int(c) for c in args.carveouts.split(",") if c] if cuda else []:
        train(c)  # (cuBLAS's choices for fewer SMs)
        tr = timed(partial(train, c))[1]
        rows.append(["-", f"train alone, its GEMMs leaving {c} SMs", f"{tr:.3f}", "", ""])
        wall, gen_end, train_end = together(partial(train, c), generate)
        rows.append(["-", f"at once, the training's GEMMs leaving {c} SMs", f"{wall:.3f}", f"{gen_end:.3f}",
                     f"train {train_end:.3f}"])
    table(f"{args.arch} on {DEVICE}, torch {torch.__version__}: {args.rows} rows x ({args.prompt} + {args.new}) "
          f"generated ({args.rows * args.new:,} tokens) and trained (micro-batch {args.micro})",
          ["round", "mode", "wall s", "generate ended s", "the other ended s"], rows)


if __name__ == "__main__":
    main()
