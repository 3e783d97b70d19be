"""Rollout throughput of two source trees of execrl, alternated in one run: does a change slow the engine down?

    git archive <commit> src | tar -x -C /tmp/before            # the tree to compare against
    python bench/compare_rollouts.py --before /tmp/before/src   # against ./src
Each measurement runs in its own process (each imports its own execrl): Qwen2.5-0.5B's shape, random init, bf16,
256 prompts x (128 + 256) tokens forced, the compiled engine, median of 5 calls after the first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CODE = r'''
import statistics, sys, torch
sys.path.insert(0, "bench")
from common import build, timed
from execrl.rollout import RolloutEngine, SamplingParams
model, tok = build(sys.argv[2])
prompts = torch.randint(3, 259, (int(sys.argv[3]), 128), generator=torch.Generator().manual_seed(0)).tolist()
new = int(sys.argv[4])
params = SamplingParams(temperature=1.0, ignore_eos=True)
engine = RolloutEngine(model, tok, slots=len(prompts), max_len=128 + new, compile=torch.cuda.is_available())
_, first = timed(lambda: engine.generate(prompts, 1, new, params))
times = [timed(lambda: engine.generate(prompts, 1, new, params))[1] for _ in range(5)]
t = statistics.median(times)
print(f"| {sys.argv[1]} | {len(prompts) * new / t:,.0f} | {t:.3f} | {first:.1f} |", flush=True)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the other tree's src/ directory")
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print("| tree | tok/s | s (median of 5) | first call s |\n|---|---|---|---|", flush=True)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    extra = os.environ.get("PYTHONPATH", "")
    for _ in range(args.rounds):
        for name, src in (("before", args.before), ("after (./src)", here)):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, extra) if p)}
            done = subprocess.run([sys.executable, "-c", CODE, name, args.arch, str(args.prompts), str(args.new)],
                                  env=env, capture_output=True, text=True)
            print(done.stdout.strip() or f"| {name} | failed: {done.stderr[-500:]!r} | | |", flush=True)


if __name__ == "__main__":
    main()
