"""`execrl eval` grading code while it samples (on a GPU: `--grading-share`, half the sandbox's workers by default)
against grading after sampling (`--grading-share 0`), each share in turn, alternating in one process: MBPP's test problems x
--samples completions, a random-init model saved as an HF directory and loaded as `execrl eval --model` loads it, the
whole `evaluate` call timed (loading, sampling, grading, as a user waits for it). A random-init model writes no code,
so each sample's graded program is its problem's reference solution (`run.make_sample` patched, as
bench/streamed_grading.py's environment does): every program costs the sandbox what a passing MBPP program costs.
The random weights run to the token limit; with more samples than the engine's slots, they end in waves.

    python bench/eval_grading.py --arch qwen2.5-0.5b --samples 5      # shares 0.25, 0.5, 1 and 0
    python bench/eval_grading.py --arch tiny --problems 4 --samples 2 --new 8 --rounds 1   # CPU smoke
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import ARCHS, device_name, save_arch, table

import execrl.eval.run as run
from execrl.extract import Extracted
from execrl.rewards import Sample

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def reference_graded(cfg, problem, text: str, num_tokens: int, sampled: bool = True, cut: bool = False) -> Sample:
    """The model's text, graded as its problem's reference solution (make_sample's signature)."""
    return Sample(problem, text, Extracted(text, True, problem.metadata["reference"]), num_tokens=num_tokens,
                  max_tokens=cfg.max_new_tokens if sampled else 0, cut=cut)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    ap.add_argument("--data", default=str(DATA / "mbpp"), help="shared/data's mbpp/")
    ap.add_argument("--problems", type=int, default=500, help="MBPP test problems (all: 500)")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--new", type=int, default=256, help="max new tokens")
    ap.add_argument("--shares", default="0.25,0.5,1,0", help="grading shares to compare (0: after sampling, the baseline)")
    ap.add_argument("--rounds", type=int, default=2, help="timed calls of each, alternating, after one untimed each")
    ap.add_argument("--workers", type=int, default=0, help="sandbox workers (0: one per CPU)")
    args = ap.parse_args()
    run.make_sample = reference_graded
    shares = [float(s) for s in args.shares.split(",")]
    walls: dict[float, list[float]] = {s: [] for s in shares}
    with tempfile.TemporaryDirectory() as work:
        save_arch(args.arch, Path(work))
        for r in range(args.rounds + 1):
            for share in shares:
                cfg = run.EvalConfig(dataset="mbpp", split="test", data_path=args.data, limit=args.problems,
                                     samples=args.samples, ks=(1,), temperature=0.8, max_new_tokens=args.new,
                                     out=str(Path(work) / "out"), workers=args.workers, grading_share=share)
                t = time.perf_counter()
                summary = run.evaluate(cfg, model_name=str(Path(work) / "model"))
                if r:  # (the first of each: the process's kernels compiled)
                    walls[share].append(time.perf_counter() - t)
    base = statistics.median(walls[0.0]) if 0.0 in walls else None
    rows = [[f"{s:g}" + (" (after sampling)" if s == 0 else ""), f"{statistics.median(w):.2f}",
             f"{base / statistics.median(w):.2f}x" if base else ""] for s, w in walls.items()]
    table(f"execrl eval, {args.arch} on {device_name()}: {summary['problems']} MBPP test problems x {args.samples} "
          f"samples, up to {args.new} new tokens, each program its reference solution; verdicts {summary['outcomes']}; "
          f"medians of {args.rounds} calls", ["grading share while sampling", "evaluate s", "against after"], rows)


if __name__ == "__main__":
    main()
