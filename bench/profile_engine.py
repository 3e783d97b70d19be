"""Where a decode step's GPU time goes: the top kernels of the execrl engine (eager and compiled, no CUDA graphs,
so each kernel is visible), those of a prefill, and a breakdown of a whole `generate` call with graphs (prefill,
one decode step per attention window, host bookkeeping).

    python bench/profile_engine.py --arch qwen2.5-0.5b --slots 256
    python bench/profile_engine.py --arch qwen2.5-0.5b --slots 128 --variants prefill,breakdown
    python bench/profile_engine.py --arch qwen2.5-1.5b --slots 128 --variants compiled,whole,breakdown,breakdown-whole
    python bench/profile_engine.py --arch qwen2.5-1.5b --slots 128 --cache 4224 --variants positions  # long context
    python bench/profile_engine.py --arch qwen2.5-1.5b --slots 128 --cache 4224 --at 2176 --variants compiled
    python bench/profile_engine.py --arch qwen2.5-0.5b --slots 128 --variants admission  # prefill as a graph or eager
    python bench/profile_engine.py --arch tiny --slots 4 --variants eager,compiled,prefill,sampling,breakdown  # CPU

`whole` and `breakdown-whole`: the step compiled as one graph through every layer (as the engine did before it
compiled one layer step that every layer runs), against which the default's kernels and rate compare.

On a CPU the tables are the top torch ops by their own CPU time, and the engine runs uncompiled (it compiles only on
CUDA): the compiled and sampling (a Triton kernel) variants print a line saying they need a GPU.
"""

import argparse
import math
from functools import partial

import torch
from common import ARCHS, DEVICE, build, sync, timed
from torch.profiler import ProfilerActivity, profile

from execrl.rollout import RolloutEngine, SamplingParams

PROMPT, NEW = 128, 256


def kernels(engine, params, window: int, top: int, label: str, at: int | None = None) -> None:
    """The decode step's top kernels; `at`: every slot at that position (its window the engine's for it)."""
    engine.active.fill_(True)
    engine.limit.fill_(10_000)
    if at is None:
        step = partial(engine._step, window, params)
    else:
        window = engine._window(at + 1)

        def step():
            engine.pos.fill_(at)
            engine.n_gen.fill_(0)
            engine._step(window, params)
    top_kernels(step, 16, top, f"{label}, window {window}" + (f", position {at}" if at is not None else ""),
                "decode step")


def positions(engine, params, arch: str, at: list[int]) -> None:
    """A decode step's time with every slot at each position (its CUDA graph replayed on a GPU), and the
    fit time = fixed + per position x position: the cache's marginal read rate."""
    a = ARCHS[arch]
    kv_bytes = engine.slots * a.layers * 2 * a.kv_heads * (a.hidden // a.heads) * 2  # per position, bf16
    engine.active.fill_(True)
    engine.limit.fill_(100_000)
    rows = []
    for p in at:
        window = engine._window(p + 35)  # (every position the 34 steps below reach)
        step = partial(engine._step, window, params)
        for _ in range(2):
            engine.pos.fill_(p)
            engine.n_gen.fill_(0)
            step()
        engine.pos.fill_(p)  # (the 32 steps timed run from p to p + 32)
        engine.n_gen.fill_(0)
        ms = timed(step, 32)[1] * 1000
        rows.append((p, ms))
        print(f"| {p:,} | {window:,} | {ms:.3f} | {engine.slots / ms * 1000:,.0f} | {p * kv_bytes / 1e9:.2f} |", flush=True)
    if len(rows) > 1:
        (p0, t0), (p1, t1) = rows[0], rows[-1]
        per = (t1 - t0) / (p1 - p0)  # ms per position
        print(f"fit: {t0 - per * p0:.3f} ms + {per * 1000:.3f} us per position ({kv_bytes / 1e6:.2f} MB of keys and "
              f"values each: {kv_bytes / per / 1e9:.2f} TB/s at the margin)", flush=True)


def top_kernels(fn, repeat: int, top: int, label: str, unit: str) -> None:
    """The top GPU kernels of fn, per call (on a CPU: the top torch ops by their own CPU time)."""
    gpu = DEVICE == "cuda"
    for _ in range(3):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        for _ in range(repeat):
            fn()
        sync()
    events = [e for e in prof.key_averages() if e.device_type.name == ("CUDA" if gpu else "CPU")]

    def self_us(e) -> float:
        return e.self_device_time_total if gpu else e.self_cpu_time_total

    total = sum(self_us(e) for e in events) / repeat
    what, ops = ("GPU kernel time", "kernels") if gpu else ("CPU time in torch ops (their own)", "ops")
    print(f"\n{label}: {total / 1000:.3f} ms of {what} per {unit}, "
          f"{sum(e.count for e in events) / repeat:.0f} {ops} per {unit}", flush=True)
    for e in sorted(events, key=lambda e: -self_us(e))[:top]:
        print(f"{self_us(e) / repeat / 1000:8.3f} ms {e.count // repeat:5d}x  {e.key[:110]}")


def sampling(slots: int, vocab: int) -> None:
    """One sampling of [slots, V] bf16 logits at temperature 1: torch ops compiled (as they were in the decode
    step) against the kernels (fused_sampling), their first one in a few tilings (rows per program, columns per
    block, warps)."""
    from execrl.rollout import fused_sampling
    from execrl.rollout.sampling import sample, sample_torch

    logits = torch.randn(slots, vocab, device="cuda").to(torch.bfloat16)
    keys = torch.arange(slots, device="cuda", dtype=torch.int32)
    params = SamplingParams(1.0)
    step = torch.compile(lambda x, k: sample_torch(x, params, k))
    step(logits, keys)
    base = timed(lambda: step(logits, keys), 100)[1] * 1000
    want = sample(logits, params, keys)[0]
    fused = torch.compile(lambda x, k: sample(x, params, k))  # the kernel reads its tiling at each call
    default = (fused_sampling.ROWS, fused_sampling.BLOCK, fused_sampling.WARPS)
    print(f"\nsampling {slots} x {vocab:,} logits: torch ops, compiled {base:.3f} ms", flush=True)
    for tiling in (default, (1, 512, 4), (1, 2048, 8), (2, 512, 4), (2, 1024, 8), (4, 256, 4)):
        fused_sampling.ROWS, fused_sampling.BLOCK, fused_sampling.WARPS = tiling
        # (another tiling sums in another order: a draw within rounding of a column's edge may take its neighbour)
        same = (fused(logits, keys)[0] == want).float().mean().item()
        ms = timed(lambda: fused(logits, keys), 100)[1] * 1000
        print(f"  kernels, rows {tiling[0]}, block {tiling[1]}, warps {tiling[2]}{' (default)' * (tiling == default)}:"
              f" {ms:.3f} ms ({base / ms:.2f}x), tokens as the default's {same:.3f}", flush=True)
    fused_sampling.ROWS, fused_sampling.BLOCK, fused_sampling.WARPS = default


def whole_step(engine) -> None:
    """The engine's decode step compiled whole (one graph, the layers unrolled) instead of per layer."""
    from execrl.rollout.engine import compiled

    dec = engine.dec
    dec.decode_layer, dec.final_logits = dec._decode_layer, dec._final_logits
    engine.sample_step = engine._sample
    engine.body = compiled(engine._body)


def breakdown(engine, prompts, params) -> None:
    """A generate call's wall time against its parts: prefill alone, and graph replays of one step per window."""
    engine.generate(prompts, 1, NEW, params)  # compile and capture every window
    total = timed(lambda: engine.generate(prompts, 1, NEW, params))[1]
    prefill = timed(lambda: engine.generate(prompts, 1, 1, params))[1]
    engine.generate(prompts, 1, 1, params)
    engine.active.fill_(True)
    engine.limit.fill_(10_000)
    steps, parts = 0.0, []
    for lo, window in ((0, 128), (128, 256), (256, 384)):
        if window > engine.dec.max_len:
            break
        per = timed(partial(engine._step, window, params), 32)[1]
        n = max(0, min(PROMPT + NEW, window) - max(PROMPT, lo))  # decode steps whose window this is
        steps += n * per
        parts.append(f"window {window}: {per * 1000:.3f} ms/step x {n}")
    made = len(prompts) * NEW
    print(f"\nbreakdown, {len(prompts)} slots: generate {total:.3f} s ({made / total:,.0f} tok/s) = prefill {prefill:.3f} s"
          f" + decode steps {steps:.3f} s (replayed back to back: {'; '.join(parts)}) + other "
          f"{total - prefill - steps:.3f} s (host syncs, bookkeeping)", flush=True)


def admission(model, tok, slots: int, mean: int) -> None:
    """An admission (prefill and first tokens) as a CUDA graph (on a GPU) and eager, in turn in one process. A generate
    call of P prompts x 8 samples and one new token (the admission and the host sync), prompts of 128 and 97 tokens:
    ms, the median of 15 calls after 3 untimed. Then a workload whose slots are refilled as samples end: 4 x slots
    prompts of one sample each, budgets log-normal (sigma 1, the mean `mean`, at most 4 x `mean`), new tokens/s, the
    median of 3 calls after 1 untimed."""
    engine = RolloutEngine(model, tok, slots=slots, max_len=PROMPT + 4 * mean, compile=True)
    params = SamplingParams(1.0, ignore_eos=True)
    if DEVICE != "cuda":
        print(f"\n(admission on {DEVICE}: no CUDA graphs, both columns eager)", flush=True)

    def both(call, n: int) -> list[float]:  # (graph, eager): the median of n calls each, after untimed ones
        times = []
        for graphed in (True, False):
            engine.admit_graphs = graphed
            for _ in range(3 if n > 3 else 1):
                call()
            times.append(sorted(timed(call)[1] for _ in range(n))[n // 2])
        engine.admit_graphs = True
        return times

    rows = []
    for p in (1, 2, 4, 16):
        for width in (PROMPT, 97):
            prompts = torch.randint(3, 259, (p, width)).tolist()
            graph, eager = both(partial(engine.generate, prompts, 8, 1, params), 15)
            rows.append(f"| {p} x {width} | {graph * 1000:.2f} | {eager * 1000:.2f} | {eager / graph:.2f}x |")
    print(f"\nadmission, {slots} slots: a generate call of P prompts x 8 samples, 1 new token (ms, median)\n"
          "| prompts x tokens | admission as a graph | eager | |\n|---|---:|---:|---:|\n" + "\n".join(rows), flush=True)
    g = torch.Generator().manual_seed(0)
    mu = math.log(mean) - 0.5  # (sigma 1: the mean is `mean`)
    budgets = [max(1, min(4 * mean, round(math.exp(mu + torch.randn(1, generator=g).item())))) for _ in range(4 * slots)]
    prompts = torch.randint(3, 259, (4 * slots, PROMPT), generator=g).tolist()
    graph, eager = both(partial(engine.generate, prompts, 1, budgets, params), 3)
    made = sum(budgets)
    print(f"\n{4 * slots} samples refilled into {slots} slots, budgets log-normal (mean {mean}, at most {4 * mean}): "
          "new tokens/s\n| workload | admission as a graph | eager | |\n|---|---:|---:|---:|\n"
          f"| log-normal, refilled | {made / graph:,.0f} | {made / eager:,.0f} | {eager / graph:.2f}x |", flush=True)


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--rows", type=int, default=18)
    ap.add_argument("--windows", default="384")
    ap.add_argument("--cache", type=int, default=PROMPT + NEW, help="the engine's cache length per slot")
    ap.add_argument("--at", type=int, default=None, help="eager, compiled, whole: the kernels with every slot at this "
                    "position (within --cache), not after a prefill")
    ap.add_argument("--positions", default="256,1024,2048,3072,4096",
                    help="positions variant: the positions timed (each < --cache)")
    ap.add_argument("--refill-mean", type=int, default=256, help="admission variant: the refilled workload's mean "
                    "new tokens")
    ap.add_argument("--variants", default="eager,compiled",
                    help="eager, compiled (decode-step kernel tables), whole (compiled as one graph), prefill (its "
                    "kernel table), sampling, breakdown, breakdown-whole, positions (ms per step against position), admission "
                    "(generate calls of one new token, and of log-normal lengths refilled: the admission as a graph "
                    "and eager)")
    args = ap.parse_args()
    if args.cache < PROMPT + 41 or (args.at is not None and not PROMPT <= args.at < args.cache):
        ap.error(f"--cache holds a {PROMPT}-token prompt and the 40-token warm-up (>= {PROMPT + 41}); --at is a "
                 "position past the prompt within it")
    model, tok = build(args.arch)
    params = SamplingParams(1.0, ignore_eos=True)
    prompts = torch.randint(3, 259, (args.slots, PROMPT)).tolist()
    variants = {"eager": {"cuda_graphs": False}, "compiled": {"cuda_graphs": False, "compile": True},
                "whole": {"cuda_graphs": False, "compile": True}, "breakdown": {"compile": True},
                "breakdown-whole": {"compile": True}, "prefill": {"compile": True}, "positions": {"compile": True}}
    for name in args.variants.split(","):
        if name == "sampling":
            if DEVICE == "cuda":
                sampling(args.slots, ARCHS[args.arch].vocab)
            else:
                print(f"\nsampling: needs a GPU (its kernels are Triton, CUDA only), not run on {DEVICE}",
                      flush=True)
            continue
        if name == "admission":
            admission(model, tok, args.slots, args.refill_mean)
            continue
        engine = RolloutEngine(model, tok, slots=args.slots, max_len=args.cache, **variants[name])
        if variants[name].get("compile") and DEVICE != "cuda":
            if name in ("compiled", "whole"):
                print(f"\n{args.arch} compiled: needs a GPU (the engine compiles its step only on CUDA), not run on "
                      f"{DEVICE}", flush=True)
                continue
            print(f"\n({name} on {DEVICE}: the engine uncompiled and without CUDA graphs, which are CUDA only)",
                  flush=True)
        if name.endswith("whole") and DEVICE == "cuda":
            whole_step(engine)
        if name.startswith("breakdown"):
            print(f"\n({name})", flush=True)
            breakdown(engine, prompts, params)
            continue
        if name == "prefill":  # every prompt prefilled and its first token sampled
            top_kernels(partial(engine.generate, prompts, 1, 1, params), 2, args.rows,
                        f"{args.arch} prefill of {len(prompts)} x {PROMPT} tokens", "prefill")
            continue
        engine.generate(prompts, 1, 40, params)  # warm-up (and compilation)
        engine.generate(prompts, 1, 1, params)  # prefill: every slot holds a prompt
        if name == "positions":
            print(f"\n{args.arch}, {args.slots} slots, cache of {args.cache:,} positions: a decode step with every slot"
                  " at one position\n| position | window | ms per step | tok/s | KV cache read, GB |\n|---:|---:|---:|---:|---:|",
                  flush=True)
            positions(engine, params, args.arch, [int(p) for p in args.positions.split(",")])
            continue
        for window in map(int, args.windows.split(",")) if args.at is None else [0]:
            kernels(engine, params, window, args.rows, f"{args.arch} {name}, {args.slots} slots", args.at)
        del engine


if __name__ == "__main__":
    main()
