"""The trainer's parts at a GRPO batch's shapes, each beside the way it ran before (same run): the forward and
backward of per-token logprobs over right-padded rows with the padding mask against the causal mask alone
(trainer/step.py take); the chunked LM head with the compiled torch ops and bf16 weight-gradient products against
the one-pass kernels (algo/head_kernels.py) and the fp32 GEMM (algo/logprobs.py); the bf16 copy's refresh from the
fp32 master tensor by tensor against one foreach copy (trainer/precision.py); and AdamW's foreach step against the
fused kernel (trainer/optim.py, GPU); and a training pass with a row per sample against each group's prompt
forwarded once (trainer/shared_prompt.py).

    python bench/trainer_parts.py --arch qwen2.5-0.5b --rows 128 --prompt 128 --new 256
    python bench/trainer_parts.py --arch qwen2.5-1.5b --rows 16 --prompt 128 --new 4096   # a long trace's micro-batch
    python bench/trainer_parts.py --arch qwen2.5-1.5b --rows 128 --new 4096 --lengths lognormal --micro 8 --parts shared
    python bench/trainer_parts.py --arch tiny --rows 8 --prompt 16 --new 32               # CPU smoke
"""

from __future__ import annotations

import argparse

import torch
from common import DEVICE, build, median_of, sync, table

from execrl.algo import logprobs
from execrl.trainer.optim import fused_kernel
from execrl.trainer.policy import compile_layers
from execrl.trainer.precision import Weights
from execrl.trainer.step import token_logprobs


def median_time(fn) -> float:
    """fn's median time over 5 calls after 2 untimed ones."""
    for _ in range(2):
        fn()
    return median_of(5, fn)[1]


def batch(rows: int, prompt: int, new: int, vocab: int):
    """Right-padded rows: the prompt and a completion of a length between new / 4 and new (the longest at new)."""
    g = torch.Generator().manual_seed(0)
    lengths = [prompt + new] + [prompt + int(new * (0.25 + 0.75 * torch.rand(1, generator=g).item()))
                                for _ in range(rows - 1)]
    ids = torch.randint(3, min(vocab, 259), (rows, prompt + new), generator=g)
    attn = torch.zeros_like(ids)
    select = torch.zeros(rows, prompt + new - 1, dtype=torch.bool)
    for i, n in enumerate(lengths):
        attn[i, :n] = 1
        select[i, prompt - 1:n - 1] = True
    return ids.to(DEVICE), attn.to(DEVICE), select.to(DEVICE)


def attention_rows(model, ids, attn, select) -> list:
    adv = torch.randn(ids.shape[0], 1, device=DEVICE)

    def step(mask):
        def run():
            logp = token_logprobs(model, ids, mask, select)[0]
            (logp * adv).mean().backward()
            model.zero_grad(set_to_none=True)
        return run

    tokens = int(attn.sum())
    with_mask, causal = median_time(step(attn)), median_time(step(None))
    return [["logprobs forward + backward, right-padded rows", f"padding mask: {with_mask * 1000:.1f} ms",
             f"causal only: {causal * 1000:.1f} ms", f"{with_mask / causal:.2f}x",
             f"{tokens / causal:,.0f} tok/s"]]


def head_rows(model, select) -> list:
    n, weight = int(select.sum()), model.get_output_embeddings().weight
    hidden = torch.randn(n, weight.shape[1], device=DEVICE, dtype=weight.dtype, requires_grad=True)
    targets = torch.randint(0, weight.shape[0], (n,), device=DEVICE)
    g = torch.randn(n, device=DEVICE)

    def run():
        logp = logprobs.token_logprobs_from_hidden(hidden, weight, targets)[0]
        (logp * g).sum().backward()
        hidden.grad = None
        weight.grad = None

    def cast_added(total, a, b):  # the weight gradient as it was accumulated before: the chunk's product in bf16
        total += (a @ b).to(total.dtype)

    now = median_time(run)
    accumulate, logprobs._accumulate = logprobs._accumulate, cast_added
    logprobs.ONE_PASS = False  # the compiled torch ops (several passes over each chunk's logits)
    try:
        before = median_time(run)
        logprobs.ONE_PASS = True
        one_pass = median_time(run)
    finally:
        logprobs._accumulate, logprobs.ONE_PASS = accumulate, True
    return [["chunked LM head, forward + backward", f"compiled ops, bf16 products cast-added: {before * 1000:.1f} ms",
             f"one-pass kernels: {one_pass * 1000:.1f} ms; and the fp32 GEMM: {now * 1000:.1f} ms",
             f"{before / now:.2f}x", f"{n:,} tokens"]]


def refresh_rows(model) -> list:
    """The bf16 copy's refresh from an fp32 master of the model, then (optimizer_rows) AdamW's step on that master."""
    import copy

    weights = Weights(copy.deepcopy(model).float(), model, torch.bfloat16)

    @torch.no_grad()
    def one_by_one():
        for m, c in weights._pairs:
            c.copy_(m)

    before, now = median_time(one_by_one), median_time(weights.refresh)
    rows = [["bf16 copy from the fp32 master", f"tensor by tensor: {before * 1000:.2f} ms",
             f"foreach: {now * 1000:.2f} ms", f"{before / now:.2f}x", f"{len(weights._pairs)} tensors"]]
    return rows + optimizer_rows([m for m, _ in weights._pairs])


def optimizer_rows(master: list[torch.Tensor]) -> list:
    """AdamW's foreach step against the fused kernel, on the fp32 master (where the kernel applies: GPU tensors)."""
    if not fused_kernel(torch.optim.AdamW, master):
        return []
    for m in master:
        m.grad = torch.randn_like(m)
    foreach, fused = (median_time(torch.optim.AdamW(master, lr=1e-9, **kind).step)
                      for kind in ({"foreach": True}, {"fused": True}))
    return [["AdamW step on the fp32 master", f"foreach: {foreach * 1000:.2f} ms", f"fused: {fused * 1000:.2f} ms",
             f"{foreach / fused:.2f}x", f"{sum(m.numel() for m in master) / 1e9:.2f}B parameters"]]


def shared_rows(model, args) -> list:
    """A training pass (forward + backward over every micro-batch of --micro) of --rows samples in groups of
    --group, each group's prompt --prompt tokens and its completions --lengths: a row per sample sorted by length
    (policy.shared_prompts=false) against each group's prompt forwarded once (trainer/shared_prompt.py)."""
    from lengths import draw_lengths

    from execrl.config.batch import Split
    from execrl.trainer.step import TrainBatch, micro_batches, packed_rows, take

    g = torch.Generator().manual_seed(0)
    if args.lengths == "lognormal":
        new = draw_lengths(args.rows, args.mean, args.new, seed=args.rows)
    else:
        new = [int(args.new * (0.25 + 0.75 * torch.rand(1, generator=g).item())) for _ in range(args.rows)]
    width = args.prompt + max(new)
    ids = torch.zeros(args.rows, width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss = torch.zeros(args.rows, width - 1)
    for i, n in enumerate(new):
        if i % args.group == 0:
            prompt = torch.randint(3, 259, (args.prompt,), generator=g)
        ids[i, :args.prompt + n] = torch.cat([prompt, torch.randint(3, 259, (n,), generator=g)])
        attn[i, :args.prompt + n] = 1
        loss[i, args.prompt - 1:args.prompt + n - 1] = 1
    data = TrainBatch(ids, attn, loss, torch.zeros(args.rows), group_size=args.group,
                      prompt_lens=torch.full((args.rows,), args.prompt))
    split = Split(args.micro or args.rows)
    adv = torch.randn(args.rows, width - 1, device=DEVICE)
    counted = {}

    def run(share: bool):
        def one_pass():
            tokens = 0
            for rows in micro_batches(data, range(args.rows), split, share):
                ids, attn, mask, idx, _ = take(data, rows, DEVICE)
                packed = packed_rows(data, rows, DEVICE) if share else None
                tokens += ids.numel() if packed is None else packed.ids.numel()
                logp = token_logprobs(model, ids, attn, mask > 0, packed=packed)[0]
                (logp * adv[idx.to(DEVICE), :logp.shape[1]]).sum().backward()
            model.zero_grad(set_to_none=True)
            counted[share] = tokens
        return one_pass

    rows_s, shared_s = median_time(run(False)), median_time(run(True))
    return [[f"a training pass, {args.rows} samples in groups of {args.group}, micro-batches of {split.sequences}",
             f"a row per sample, sorted: {rows_s * 1000:.1f} ms ({counted[False]:,} layer tokens)",
             f"each group's prompt once: {shared_s * 1000:.1f} ms ({counted[True]:,} layer tokens)",
             f"{rows_s / shared_s:.2f}x", f"{int(attn.sum()):,} tokens"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--parts", default="attention,head,refresh,shared")
    ap.add_argument("--group", type=int, default=8, help="shared: samples per prompt")
    ap.add_argument("--micro", type=int, default=None, help="shared: micro-batch (default: --rows)")
    ap.add_argument("--lengths", choices=["uniform", "lognormal"], default="uniform",
                    help="shared: completions between --new / 4 and --new, or log-normal (mean --mean, at most --new)")
    ap.add_argument("--mean", type=int, default=1024)
    args = ap.parse_args()
    parts = args.parts.split(",")
    model, _ = build(args.arch)
    model.train()
    if DEVICE == "cuda":
        compile_layers(model, None)
    ids, attn, select = batch(args.rows, args.prompt, args.new, model.config.vocab_size)
    rows = attention_rows(model, ids, attn, select) if "attention" in parts else []
    rows += head_rows(model, select) if "head" in parts else []
    rows += shared_rows(model, args) if "shared" in parts else []
    model.eval()
    rows += refresh_rows(model) if "refresh" in parts else []
    sync()
    table(f"{args.arch}, {args.rows} rows x ({args.prompt} + up to {args.new}) tokens, {DEVICE}",
          ["part", "before", "now", "ratio", ""], rows)


if __name__ == "__main__":
    main()
