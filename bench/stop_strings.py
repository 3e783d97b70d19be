"""Stop strings at long lengths (multi-turn environments stop each turn at one, e.g. a closing </code>): at each
host sync the engine looks for them in the text of every busy slot. Searched in the whole text at every sync, as
the engine did before, a sync's host work grows with the length generated; searched in the tokens since the last
sync (and a lookback), as it does now, it does not. Both measured in the same run:

    python bench/stop_strings.py --arch qwen2.5-1.5b --slots 128 --new 4096
    python bench/stop_strings.py --arch tiny --slots 8 --new 48 --lengths 16,32   # a smoke run on a CPU
First the host's work in one sync (--slots busy slots, each --lengths tokens generated, 16 since the last sync);
then whole `generate` calls of --slots samples forced to --new tokens under a stop string the text never holds
(every sync searches, none stops), with no stop string, the engine's search and the whole-text search.
"""

import argparse
import time

import torch
from common import build, device_name

from execrl.rollout import RolloutEngine, SamplingParams
from execrl.rollout.engine import Call, Slot, first_stop

STOPS = ["</never-printed>"]
SYNC = 16  # the engine's default sync_every


def whole_text(engine: RolloutEngine):
    """The search as the engine made it before: every busy slot's whole sequence fetched and decoded."""
    def stops(call: Call, busy, counts):  # (the engine's _stops, called as its own method is)
        slots = sorted(busy)
        rows = engine.out_tok[torch.tensor(slots, device=engine.out_tok.device), :max(counts)].tolist()
        cuts = {s: first_stop(engine.tokenizer, row[:counts[s]], call.stops(busy[s].request))
                for s, row in zip(slots, rows)}
        return {s: cut for s, cut in cuts.items() if cut is not None}
    return stops


def one_sync(engine: RolloutEngine, slots: int, generated: int, search) -> float:
    """Seconds of host work in one sync of `slots` busy slots with `generated` tokens each."""
    vocab = min(engine.tokenizer.vocab_size, 5000)
    engine.out_tok[:slots, :generated] = torch.randint(3, vocab, (slots, generated))
    engine.n_gen[:slots], engine.active[:slots] = generated, True
    call = Call([[5] * 8] * slots, 1, generated + 1, SamplingParams(1.0), STOPS, None, None, engine.dec.max_len)
    call.waiting.clear()
    busy = {s: Slot((s, 0), 8, generated + 1, generated, generated - SYNC) for s in range(slots)}
    engine._stops = search
    try:
        t = time.perf_counter()
        engine._harvest(call, busy)
        return time.perf_counter() - t
    finally:
        del engine._stops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-1.5b")
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--new", type=int, default=4096, help="tokens generated per sample in the generate rows")
    ap.add_argument("--lengths", default="256,1024,4096", help="tokens generated at the sync of the host rows")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    model, tok = build(args.arch)
    engine = RolloutEngine(model, tok, slots=args.slots, max_len=max(lengths + [args.new]) + 130,
                           compile=device_name() != "cpu")
    print(f"{args.arch} on {device_name()}, torch {torch.__version__}, {args.slots} slots, stop strings {STOPS}")
    print("\n| tokens generated | host ms per sync: whole text | since the last sync | ratio |\n|---|---|---|---|")
    for n in lengths:
        whole = min(one_sync(engine, args.slots, n, whole_text(engine)) for _ in range(3))
        new = min(one_sync(engine, args.slots, n, engine._stops) for _ in range(3))
        print(f"| {n} | {1e3 * whole:.1f} | {1e3 * new:.2f} | {whole / new:.0f}x |")
    prompts = torch.randint(3, 259, (args.slots, 128)).tolist()
    params = SamplingParams(1.0, ignore_eos=True)
    print(f"\n| {args.slots} x {args.new} tokens | tok/s | s |\n|---|---|---|")
    for name, stops, search in (("no stop string", None, None), ("stop string, since the last sync", STOPS, None),
                                ("stop string, whole text", STOPS, whole_text(engine))):
        if search is not None:
            engine._stops = search
        try:
            engine.generate(prompts, 1, args.new, params, stop_strings=stops)  # compiles and captures every window
            t = time.perf_counter()
            engine.generate(prompts, 1, args.new, params, stop_strings=stops)
            seconds = time.perf_counter() - t
        finally:
            if search is not None:
                del engine._stops
        print(f"| {name} | {args.slots * args.new / seconds:,.0f} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
