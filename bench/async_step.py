"""Async against sync GRPO on one device, on the same workloads: step time, generated tokens/s, what overlaps.

    python bench/async_step.py                          # both workloads, 6 steps per mode (~4 minutes on an H100)
    python bench/async_step.py --no-compile             # the same without torch.compile (faster to start)
    python bench/async_step.py --arch tiny --new-tokens 16 --prompts 4 --generations 4 --steps 3   # CPU smoke test
Workloads (each run twice, grpo.async_grpo.enabled=false then true, everything else equal):
  <arch>      grpo_step.py's step section: random-init weights of the architecture, 16 prompts x 8 samples, ~128-token
              prompts, 256 new tokens forced. Random weights write no code, so there is nothing to grade: this shows
              what async costs when there is nothing to overlap (and the bf16 engine-vs-trainer mismatch).
  tiny-coder  the built-in default (16 x 8, up to 64 new tokens, T 0.6) after its 80 supervised warm-up steps, in
              fp32: it writes real programs, graded in the sandbox against 4 tests each, so grading is a real share
              of the step, as on code tasks.
Medians over the steps after the first (which compiles, and in async generates two batches) and before the last
(which in async generates nothing). Each workload first runs 2 steps unmeasured: the first run in a process is slower
for several steps (on CPU, sync first then async showed async 0.6 s/step faster; async first, the reverse). "overlapped" is the grading time hidden behind generation and training.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import traceback
from pathlib import Path

import torch
from common import ARCHS, NO_COMPILE, QUIET, device_name, fresh_peak, peak_gib, read_metrics, save_arch, table

COMMON = [*QUIET, "logger.rollouts_period=0"]


def arch_workload(arch: str, work: Path, new_tokens: int, micro: int, compile_all: bool) -> list[str]:
    """grpo_step.py's step section, execrl backend (random weights saved as an HF directory)."""
    system = save_arch(arch, work)
    overrides = [f"policy.model_name={work / 'model'}", "warmup.sft_steps=0", f"policy.train_micro_batch_size={micro}",
                 "policy.logprob_batch_size=32", f"policy.max_total_sequence_length={144 + new_tokens}",
                 f"policy.generation.max_new_tokens={new_tokens}", "policy.generation.ignore_eos=true",
                 f"prompt.system_prompt={system}", "policy.optimizer.kwargs.lr=1e-6"]
    return overrides + ([] if compile_all else NO_COMPILE)


def tiny_coder_workload() -> list[str]:
    """The built-in default, warmed up so that it writes programs (fp32, as verified on CPU; too small to compile)."""
    return ["policy.precision=float32", *NO_COMPILE]


def measure(name: str, mode: str, overrides: list[str], log_dir: Path, steps: int, samples: int,
            rows: list) -> dict | None:
    from execrl.config import load_config
    from execrl.trainer.loop import train

    print(f"[async bench] {name}, {mode}: {steps} steps ...", flush=True)
    fresh_peak()
    try:
        train(load_config(None, [*overrides, *COMMON, f"grpo.max_num_steps={steps}", f"logger.log_dir={log_dir}",
                                 f"grpo.async_grpo.enabled={mode == 'async'}"]))
    except Exception as e:  # one failed run must not lose the others' figures
        traceback.print_exc()
        rows.append([name, mode, f"failed: {type(e).__name__}: {str(e)[:120]}"] + [""] * 10)
        return None
    ms = [m for m in read_metrics(log_dir) if "time/step" in m]
    steady = ms[1:-1] or ms

    def med(k: str) -> float:
        return statistics.median(m.get(k, float("nan")) for m in steady)

    tokens = med("train/completion_len_mean") * samples
    out = {k: med(k) for k in ("time/step", "time/generate", "time/grade", "time/grade_wait", "time/train",
                               "time/grade_overlapped", "train/trajectory_age_mean", "train/logprob_mismatch")}
    rows.append([name, mode, f"{out['time/step']:.3f}", f"{out['time/generate']:.3f}", f"{out['time/grade']:.3f}",
                 f"{out['time/grade_wait']:.3f}", f"{out['time/train']:.3f}", f"{out['time/grade_overlapped']:.3f}",
                 f"{tokens / out['time/generate']:,.0f}" if out["time/generate"] > 0 else "",
                 f"{tokens / out['time/step']:,.0f}", f"{out['train/trajectory_age_mean']:.0f}",
                 f"{out['train/logprob_mismatch']:.4f}", f"{peak_gib():.1f}"])
    print(f"[async bench] {name}, {mode}: {out['time/step']:.3f} s/step over {len(steady)} steps", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    ap.add_argument("--workloads", default="arch,tiny-coder")
    ap.add_argument("--steps", type=int, default=6, help="steps per mode (medians leave out the first and last)")
    ap.add_argument("--new-tokens", type=int, default=256, help="arch workload: tokens generated per sample")
    ap.add_argument("--micro", type=int, default=64, help="arch workload: policy.train_micro_batch_size")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step (both workloads)")
    ap.add_argument("--generations", type=int, default=8, help="samples per prompt (both workloads)")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="arch workload: neither the engine's step nor the training layers compiled")
    args = ap.parse_args()
    print(f"{device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs", flush=True)
    work = Path(tempfile.mkdtemp())
    rows, saved = [], []
    samples = args.prompts * args.generations
    shape = [f"grpo.num_prompts_per_step={args.prompts}", f"grpo.num_generations_per_prompt={args.generations}",
             f"policy.train_global_batch_size={samples}", f"policy.generation_batch_size={samples}"]
    for workload in args.workloads.split(","):
        if workload == "arch":
            name = f"{args.arch}, {args.new_tokens} new forced" + ("" if args.compile else ", not compiled")
            overrides = arch_workload(args.arch, work, args.new_tokens, args.micro, args.compile)
        elif workload == "tiny-coder":
            name, overrides = "tiny-coder, warmed up", tiny_coder_workload()
        else:
            raise SystemExit(f"--workloads: {workload!r} is not one of arch, tiny-coder")
        # a first run in a process is slower for more than its first step (allocator, caches): one not measured
        measure(name, "warm-up", overrides + shape, work / f"{workload}-warm-up", 2, samples, [])
        sync = measure(name, "sync", overrides + shape, work / f"{workload}-sync", args.steps, samples, rows)
        fast = measure(name, "async", overrides + shape, work / f"{workload}-async", args.steps, samples, rows)
        if sync and fast:
            gain = sync["time/step"] - fast["time/step"]
            saved.append(f"{name}: async saves {gain:.3f} s/step ({gain / sync['time/step']:.1%}); grading "
                         f"{fast['time/grade']:.3f} s/step, of which {fast['time/grade_overlapped']:.3f} s hidden")
    table(f"GRPO step, sync vs async (grpo.async_grpo.enabled), {args.prompts} prompts x {args.generations} samples, "
          "one device",
          ["workload", "mode", "step s", "generate s", "grade s", "grade wait s", "train s", "overlapped s",
           "gen tok/s", "tok/s (step)", "age", "logprob mismatch", "peak GiB"], rows)
    print("\n" + "\n".join(saved), flush=True)


if __name__ == "__main__":
    main()
