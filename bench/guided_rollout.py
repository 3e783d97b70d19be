"""Guided decoding's cost in the engine: rollouts free against rollouts held to a constraint, same model, prompts and
sampling keys, tokens/s and the ratio (issue 23's target: a grammar at >= 85% of the free rate for the 0.5B model,
256 sequences x (128 prompt + 256 new tokens)).

    python bench/guided_rollout.py --cache .gdwheels/tok          # the GPU machine (CUDA graphs, compiled steps)
    python bench/guided_rollout.py --arch tiny --slots 8 --new 32 --vocab 500   # a smoke test on a CPU

Random-init weights of the architecture; the vocabulary is bench/guided_masks.py's byte-level BPE of `vocab` tokens
(trained here on Python sources; no tokenizer can be downloaded), so masks cost what they cost on a real code model's
vocabulary. Every sequence generates `new` tokens (EOS ignored; once a constraint is complete its mask allows only
EOS). Reported per constraint: tokens/s free and guided, their ratio, the host's wait for the masks per decode step
(from handing out the jobs to sending the masks: the engine overlaps it with the step's forward) and the share of
slot-steps held (a slot whose mask was late sits the step out), per token made: the best of --repeat calls after a
first one, whose matchers they reuse (as a training run's later steps do), against the best of --repeat free calls
made just before them (so that a machine's drift over the run does not enter the ratio); "first call": that first
call's ratio, new matchers building their lexers as they go. Each guided sample is checked against its constraint
(its masks recomputed as the trainer does). The row "masks all ones" runs the guided path with no matcher work: what
the engine's split step and masked sampling cost alone.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import ARCHS, build, device_name, sync, table
from guided_masks import LARK, LARK_STOP, REGEX, SCHEMA, build_tokenizer

import execrl.rollout.masks as masks
from execrl.guided import Guides
from execrl.rollout import RolloutEngine, SamplingParams

CONSTRAINTS = {"grammar": ("grammar", LARK), "grammar-stop": ("grammar", LARK_STOP), "regex": ("regex", REGEX),
               "json": ("json_schema", SCHEMA)}


def timed_generate(engine, prompts, new, params, guides, repeat):
    """Best of `repeat` generate calls after a first one (compilation, graphs; guided: new matchers, which later
    calls reuse): (seconds, completions, the first call's seconds)."""
    sync()
    start = time.perf_counter()
    out = engine.generate(prompts, 1, new, params, guides=guides, seeds=list(range(len(prompts))))
    sync()
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        out = engine.generate(prompts, 1, new, params, guides=guides, seeds=list(range(len(prompts))))
        sync()
        best = min(best, time.perf_counter() - start)
    return best, out, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=151000, help="the BPE vocabulary's size (<= the architecture's)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "execrl-bench"), help="where the tokenizer is kept")
    ap.add_argument("--kinds", default="engine,grammar,grammar-stop,regex,json", help="engine: the guided path with masks all "
                    "ones and no matcher work (what the engine itself adds)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--default-slices", action="store_true", help="llguidance's own slices for every kind "
                    "(execrl gives regexes and grammars its code slices instead, execrl.guided.slices_for)")
    args = ap.parse_args()

    tok = build_tokenizer(args.vocab, Path(args.cache))
    model, _ = build(args.arch)
    if ARCHS[args.arch].vocab < len(tok):
        raise SystemExit(f"--vocab {args.vocab} is larger than {args.arch}'s vocabulary")
    # the BPE's end token is the only end id (the architecture's generation config names Qwen's, which is ordinary
    # text in this vocabulary: a constraint would take it for the end of the sequence)
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    cuda = torch.cuda.is_available()
    engine = RolloutEngine(model, tok, args.slots, args.prompt + args.new + 8, cuda_graphs=cuda,
                           compile=cuda and not args.no_compile)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(len(tok) // 8, len(tok), (args.slots, args.prompt), generator=gen).tolist()
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    tokens = args.slots * args.new

    host = {"s": 0.0, "n": 0}
    start, settle = masks.SlotMasks.start, masks.SlotMasks.settle

    def timed_settle(self, *a, **k):  # the host's wait for the masks of a step (past the forward's end: a stall)
        begin = time.perf_counter()
        settle(self, *a, **k)
        host["s"] += time.perf_counter() - begin
        host["n"] += 1

    masks.SlotMasks.settle = timed_settle
    free_s, _, _ = timed_generate(engine, prompts, args.new, params, None, args.repeat)
    rows = [["free", f"{tokens / free_s:,.0f}", "1.00", "-", "-", "-", f"{free_s / args.new * 1e3:.2f}"]]
    slices_note = ""
    if args.default_slices:  # llguidance's own slices for every kind (as before execrl chose them per kind)
        import llguidance

        engine._guides = Guides(tok, engine.constraints.vocab, engine.eos_list, llguidance.LLTokenizer.general_slices())
        slices_note = " (llguidance's slices)"
    for kind in args.kinds.split(","):
        free_s = timed_generate(engine, prompts, args.new, params, None, args.repeat)[0]  # (the free rate just before)
        guide = engine.guides.get(*CONSTRAINTS["grammar" if kind == "engine" else kind])
        if kind == "engine":  # the engine's own cost: masks all ones, no matcher work (the guided path otherwise)
            masks.SlotMasks.start = lambda self, *a, **k: None
        host.update(s=0.0, n=0)
        held = engine.constraints.held
        guided_s, out, first_s = timed_generate(engine, prompts, args.new, params, [guide] * args.slots, args.repeat)
        masks.SlotMasks.start = start
        held = (engine.constraints.held - held) / (args.repeat + 1) / tokens  # slot-steps held per token made
        wait_ms = host["s"] / max(host["n"], 1) * 1e3
        name = "masks all ones (engine alone)" if kind == "engine" else kind + slices_note
        if kind != "engine":
            for group in out[:16]:  # (raises if a token is outside the constraint)
                guide.masks(group[0].ids)
        first = "-" if kind == "engine" else f"{free_s / first_s:.2f}"  # (the engine row's first call compiles)
        rows.append([name, f"{tokens / guided_s:,.0f}", f"{free_s / guided_s:.2f}", first,
                     f"{wait_ms:.2f}", f"{held:.1%}", f"{guided_s / args.new * 1e3:.2f}"])
    table(f"{args.arch}, {args.slots} x ({args.prompt} + {args.new}) tokens, vocabulary {len(tok):,}, {device_name()}, "
          f"torch {torch.__version__}{', no compile' if args.no_compile else ''}",
          ["constraint", "tokens/s", "of free", "first call", "mask wait ms/step", "slots held", "step ms"], rows)


if __name__ == "__main__":
    main()
