"""Where a GRPO step's GPU waits, unprofiled: `execrl train` on the benchmarks' step (16 prompts x 8 samples, 128 +
256 tokens forced) with a CUDA event recorded at a few host markers (the step's start, the engine's first admission,
its last harvest, the train phase's first forward), and the host's time in each part of the way from the last
harvest's entry to that forward (`time.perf_counter` around each function). Unlike `bench/profile_train.py --whole`
nothing slows the host, so the gaps are those of a real step; the profile names more parts.

    python bench/step_timeline.py --arch qwen2.5-0.5b --steps 12
    python bench/step_timeline.py --arch qwen2.5-1.5b --steps 10 --micro 32
    python bench/step_timeline.py --arch tiny --steps 3 --new 16 --micro 16   # CPU smoke: the host's times only

A marker's event completes when the GPU reaches it: where the GPU had run dry, that is when the host recorded it, so
the time between the last harvest's event (after the last decode step) and the first forward's is the GPU's idle
time between generation and training (plus the few kernels launched in between). Medians over the steps from the
third (the first ones compile and capture).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from common import DEVICE, NO_COMPILE, save_arch, step_overrides, table

from execrl.config import load_config
from execrl.rollout import engine
from execrl.rollout.masks import SlotMasks
from execrl.trainer import loop, pipeline, precision, rollouts, step

# the parts timed from the last harvest's entry to the first forward: (owner, attribute, label)
PARTS = [(engine.RolloutEngine, "_completion", "each completion's text (the last harvest)"),
         (engine.Call, "finish", "handing each to its environment (on_sample)"),
         (SlotMasks, "release", "releasing the ended slots"),
         (rollouts.Answers, "pending", "the answers still waiting started"),
         (rollouts.EpisodeRunner, "finish", "the episodes' finish (grading thread)"),
         (loop, "advantages", "advantages"),
         (loop, "build_batch", "build_batch"),
         (precision.Weights, "zero_grad", "zero_grad"),
         (step, "micro_batches", "micro_batches"),
         (step, "take", "take (batch to device)"),
         (step, "packed_rows", "packed_rows")]
HARVEST = "the last harvest (its wait for the last decode steps included)"
LAUNCH, FORWARD = "the train phase begins at (launch_step)", "the first forward is launched at"
ORDER = [*(p[2] for p in PARTS[:3]), HARVEST, *(p[2] for p in PARTS[3:5]), LAUNCH, *(p[2] for p in PARTS[5:]), FORWARD]


class Timeline:
    """The markers and part times of each step, recorded through patched execrl functions."""

    def __init__(self):
        self.step, self.window, self.since = 0, False, 0.0
        self.marks: dict[int, dict[str, tuple]] = defaultdict(dict)  # step -> marker -> (event or None, host time)
        self.parts: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # step -> part -> ms
        self.harvest: dict[str, float] = defaultdict(float)  # the current harvest's parts, ms

    def mark(self, name: str, first: bool = True) -> None:
        if first and name in self.marks[self.step]:
            return
        event = None
        if DEVICE == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        self.marks[self.step][name] = (event, time.perf_counter())

    def patch(self) -> None:
        for owner, attr, label in PARTS:
            setattr(owner, attr, self._timed(getattr(owner, attr), label))
        real_next, real_admit, real_harvest = (pipeline.RolloutPipeline.next, engine.RolloutEngine._admit,
                                               engine.RolloutEngine._harvest)
        real_forward, real_launch = step.token_logprobs, loop.launch_step

        def next_(*args, **kwargs):
            self.step += 1
            self.mark("step start")
            return real_next(*args, **kwargs)

        def admit(*args, **kwargs):
            self.mark("admission")
            return real_admit(*args, **kwargs)

        def harvest(eng, call, busy):
            self.harvest = defaultdict(float)
            began = time.perf_counter()
            self.mark("harvest", first=False)
            out = real_harvest(eng, call, busy)
            if not busy:  # the last one: the window to the first forward opens
                self.window, self.since = True, began
                parts = self.parts[self.step]
                parts.update(self.harvest)
                parts[HARVEST] = (time.perf_counter() - began) * 1e3
            return out

        def launch(*args, **kwargs):
            if self.window:
                self.parts[self.step][LAUNCH] = (time.perf_counter() - self.since) * 1e3
            return real_launch(*args, **kwargs)

        def forward(*args, **kwargs):
            if self.window:
                self.window = False
                self.mark("first forward")
                self.parts[self.step][FORWARD] = (time.perf_counter() - self.since) * 1e3
            return real_forward(*args, **kwargs)

        pipeline.RolloutPipeline.next, engine.RolloutEngine._admit = next_, admit
        engine.RolloutEngine._harvest, step.token_logprobs, loop.launch_step = harvest, forward, launch

    def _timed(self, fn, label: str):
        def inner(*args, **kwargs):
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = (time.perf_counter() - began) * 1e3
                self.harvest[label] += spent  # (kept where the harvest was the last)
                if self.window:
                    self.parts[self.step][label] += spent
        return inner

    def segments(self, s: int) -> dict[str, float] | None:
        """ms between step s's markers (GPU: between events; CPU: the host's times), None where one is missing."""
        here, after = self.marks.get(s, {}), self.marks.get(s + 1, {})
        names = ["step start", "admission", "harvest", "first forward"]
        if any(n not in here for n in names) or "step start" not in after:
            return None

        def ms(a: tuple, b: tuple) -> float:
            return a[0].elapsed_time(b[0]) if a[0] is not None else (b[1] - a[1]) * 1e3

        start, admit, harvest, fwd, end = (*(here[n] for n in names), after["step start"])
        return {"step period": ms(start, end), "start -> admission": ms(start, admit),
                "admission -> the last harvest (decode)": ms(admit, harvest),
                "the last harvest -> the first forward": ms(harvest, fwd),
                "the first forward -> the next step (training)": ms(fwd, end)}


def medians(rows: list[dict[str, float]]) -> list[list[str]]:
    return [[k, f"{statistics.median(r.get(k, 0.0) for r in rows):.2f}",
             f"{min(r.get(k, 0.0) for r in rows):.2f}-{max(r.get(k, 0.0) for r in rows):.2f}"] for k in rows[0]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps (medians over those from the third)")
    ap.add_argument("--micro", type=int, default=128, help="policy.train_micro_batch_size")
    ap.add_argument("--new", type=int, default=256, help="new tokens forced per sample")
    args = ap.parse_args()
    timeline = Timeline()
    timeline.patch()
    work = Path(tempfile.mkdtemp())
    system = save_arch(args.arch, work)
    overrides = step_overrides(work / "model", args.steps, args.micro, system, work / "log", args.new)
    loop.train(load_config(None, overrides + ([] if DEVICE == "cuda" else NO_COMPILE)))
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    first = min(3, args.steps - 1)  # (a smoke run of a few steps: its last but one)
    measured = range(first, args.steps)  # (the last step has no next step's start)
    segments = [seg for s in measured if (seg := timeline.segments(s)) is not None]
    parts = [{k: timeline.parts[s].get(k, 0.0) for k in ORDER} for s in measured if s in timeline.parts]
    clock = "GPU (CUDA events)" if DEVICE == "cuda" else "host (a CPU: no GPU to idle)"
    if segments:
        table(f"{args.arch}: the step's parts by the {clock}, ms, medians over {len(segments)} steps",
              ["segment", "median", "range"], medians(segments))
    if parts:
        table(f"{args.arch}: the host's time from the last harvest's entry, ms, medians over {len(parts)} steps",
              ["part", "median", "range"], medians(parts))


if __name__ == "__main__":
    main()
