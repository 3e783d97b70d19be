"""Grading while generation runs: each sample handed to its environment (the sandbox) as soon as the engine ends it,
the default, against the same step's samples all graded after generation, alternating in one process. One step's
rollouts through execrl's episode runner: --prompts MBPP train problems x --group samples, on the engine with its CUDA
graphs (compiled on a GPU), the sandbox with its default workers (one per CPU).

A random-init model writes no code, so the environment here (`reference_graded`, registered below) grades each
problem's reference solution against the problem's tests in place of the model's text: every sample costs the sandbox
what a passing MBPP program costs (--task gsm8k: math-verify checks each problem's reference solution). With
--slow-every N, every Nth sample's program also loops until its time limit (--timeout-s), as a model's wrong answers
do. Completions end at log-normal lengths (bench/lengths.py's draw, one per prompt: its samples share it), as real
ones do: forced to one length, every sample ends at once and there is nothing to overlap.

    python bench/streamed_grading.py --arch qwen2.5-0.5b
    python bench/streamed_grading.py --arch qwen2.5-0.5b --slow-every 16
    python bench/streamed_grading.py --arch qwen2.5-0.5b --slow-every 16 --grading-share 1   # all workers meanwhile
    python bench/streamed_grading.py --arch tiny --prompts 4 --group 2 --mean 8 --max 24 --rounds 1   # CPU smoke
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from common import ARCHS, DEVICE, build, device_name, table
from lengths import draw_lengths

from execrl.config import load_config
from execrl.envs import SingleTurnEnv, Step, register
from execrl.envs.base import final_step
from execrl.extract import Extracted
from execrl.rewards import Sample, outcome
from execrl.rollout import RolloutEngine, SamplingParams
from execrl.sandbox import Grader, Limits
from execrl.tasks import load_problems
from execrl.trainer.rollouts import EpisodeRunner, episode_means, episode_sums

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOOP = "\nimport time\nwhile True:\n    time.sleep(0.01)\n"
SLOW_EVERY = [0]  # (set from --slow-every: the environment is built by name, with the run's config only)


@register("reference_graded")
class ReferenceGraded(SingleTurnEnv):
    """A single-turn code episode whose graded program is the problem's reference solution (every SLOW_EVERY[0]th
    episode's looping until its time limit), whatever the model wrote."""

    made = itertools.count(1)

    def reset(self, problem):
        self.index = next(ReferenceGraded.made)  # (episodes are made in order, in the loop's thread)
        return super().reset(problem)

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        if self.problem.kind == "math":  # (GSM8K: its reference solution's text, checked by math-verify)
            return super().step(self.problem.metadata["solution"], num_tokens)
        code = self.problem.metadata["reference"]
        if SLOW_EVERY[0] and self.index % SLOW_EVERY[0] == 0:
            code += LOOP
        sample = Sample(self.problem, assistant_text, Extracted(assistant_text, True, code), num_tokens=num_tokens,
                        max_tokens=self.cfg.policy.generation.max_new_tokens)
        return final_step(sample, self.grader, self.cfg.reward)


class Lengths:
    """The engine, each prompt's completions ending at its own drawn length (EOS ignored); `streams`: whether it hands
    completions in as they end (the runner then grades them during generation)."""

    def __init__(self, engine: RolloutEngine, lengths: list[int], streams: bool):
        self.engine, self.lengths, self.streams = engine, lengths, streams

    def generate(self, prompts, num_samples, max_new_tokens, params, stop_strings=None, **kwargs):
        budgets = self.lengths[:len(prompts)]
        return self.engine.generate(prompts, num_samples, budgets, params, stop_strings, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    ap.add_argument("--task", default="mbpp", choices=["mbpp", "gsm8k"])
    ap.add_argument("--data", default=str(DATA), help="the folder of shared/data's mbpp/ and gsm8k/")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--mean", type=int, default=256, help="the completion lengths' mean (log-normal, before the cap)")
    ap.add_argument("--max", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3, help="steps of each way, alternating, after one untimed each")
    ap.add_argument("--workers", type=int, default=0, help="sandbox workers (0: one per CPU)")
    ap.add_argument("--slow-every", type=int, default=0, help="every Nth sample's program loops to its time limit")
    ap.add_argument("--grading-share", type=float, default=None,
                    help="env.code.grading_share: the workers that grade while generation runs (default: the config's)")
    ap.add_argument("--timeout-s", type=float, default=1.0)
    ap.add_argument("--switch-interval", type=float, default=0.0,
                    help="also stream with Python's thread switch interval set to this many seconds")
    args = ap.parse_args()
    SLOW_EVERY[0] = args.slow_every

    model, tok = build(args.arch)
    on_gpu = DEVICE == "cuda"
    cfg = load_config(None, ["env.multi_turn.kind=reference_graded", f"policy.generation.max_new_tokens={args.max}",
                             f"policy.max_total_sequence_length={args.max + 1024}", "prompt.add_instructions=false",
                             *([f"env.code.grading_share={args.grading_share}"] if args.grading_share is not None else [])])
    problems = load_problems(args.task, "train", path=str(Path(args.data) / args.task))[0][:args.prompts]
    engine = RolloutEngine(model, tok, slots=args.prompts * args.group, max_len=cfg.policy.max_total_sequence_length,
                           compile=on_gpu)
    lengths = draw_lengths(args.prompts, args.mean, args.max)
    params = SamplingParams(1.0, ignore_eos=True)
    ways = {"graded as each sample ends (default)": (True, None), "graded after generation": (False, None)}
    if args.switch_interval:
        ways[f"as each ends, thread switch interval {args.switch_interval * 1e3:g} ms"] = (True, args.switch_interval)
    rows, seen, default_interval = {w: [] for w in ways}, [], sys.getswitchinterval()
    with Grader(num_workers=args.workers, limits=Limits(timeout_s=args.timeout_s, memory_mb=1024)) as grader:
        print(grader.describe())
        for r in range(args.rounds + 1):
            for way, (streams, interval) in ways.items():
                runner = EpisodeRunner(cfg, Lengths(engine, lengths, streams), tok, grader)
                sys.setswitchinterval(interval or default_interval)
                t = time.perf_counter()
                rollouts = runner.run(problems, args.group, params, seeds=list(range(r * 100, r * 100 + len(problems))))
                wall = time.perf_counter() - t
                sys.setswitchinterval(default_interval)
                early = episode_means(episode_sums(rollouts))["answered_while_generating_frac"]
                seen = [e.sample for e in rollouts.episodes]
                if r:  # (the first round of each: compilation and graph capture)
                    rows[way].append((wall, rollouts.times["generate"], rollouts.times["grade"], early))
    print("the last step's verdicts:", dict(Counter(outcome(s) for s in seen)))
    med = {k: [statistics.median(x[i] for x in v) for i in range(4)] for k, v in rows.items()}
    tokens = sum(lengths) * args.group
    out = [[way, f"{m[0]:.3f}", f"{m[1]:.3f}", f"{m[2]:.3f}", f"{100 * m[3]:.0f}%"] for way, m in med.items()]
    table(f"{args.arch} on {device_name()}: {args.prompts} {args.task} prompts x {args.group}, {tokens} tokens (log-normal, "
          f"mean {args.mean}, at most {args.max}), {grader.pool.num_workers} sandbox workers "
          f"({runner.threads_while_generating} while generating), every "
          f"{args.slow_every or 'no'} sample looping to {args.timeout_s} s; medians of {args.rounds} steps each",
          ["grading", "generate + grade s", "generate s", "grade wait s", "answered during generation"], out)
    after = med["graded after generation"][0]
    print("\n" + "; ".join(f"{way}: {after / m[0]:.2f}x" for way, m in med.items()) + " (rollout phase, against after)")


if __name__ == "__main__":
    main()
