"""Where a GRPO step's train phase goes: `execrl train` on the benchmarks' step (16 prompts x 8 samples, 128 + 256
tokens forced), one train phase after the first ones profiled (its top GPU kernels, their total against the phase's
wall time, and the top host ops), and each train phase's wall time unprofiled.

With `--whole`, the whole loop iteration of that step (from the end of the step before: its logging, the rollouts'
generation and grading, the train phase) is profiled instead, and its time is split by where the host was when the
GPU had nothing to run: the GPU's busy time against the wall, and its idle time under each part of the loop (the
engine's admit / decode / harvest, building the batch, the optimizer, logging, ...), the largest gaps first.

    python bench/profile_train.py --arch qwen2.5-0.5b --micro 128
    python bench/profile_train.py --arch qwen2.5-1.5b --micro 32
    python bench/profile_train.py --arch qwen2.5-0.5b --micro 128 --whole   # where the step's GPU waits
    python bench/profile_train.py --arch qwen2.5-0.5b --micro 128 --whole --stacks   # ... by execrl function too
    python bench/profile_train.py --arch qwen2.5-0.5b --micro 128 --syncs   # the step's host syncs, by where
    python bench/profile_train.py --arch tiny --micro 16 --new 16 --steps 2   # CPU smoke: host ops only
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch
from common import DEVICE, save_arch, step_overrides, sync
from torch.profiler import ProfilerActivity, profile, record_function

from execrl.config import load_config
from execrl.rollout.engine import RolloutEngine
from execrl.trainer import loop, pipeline, precision, rollouts, step

# The parts of a loop iteration the whole-step profile names: (owner, attribute, label). Each is wrapped in a
# record_function of its label; the GPU's idle time goes to the innermost one the host was in.
PARTS = [(pipeline.RolloutPipeline, "next", "rollouts (pipeline.next)"),
         (rollouts.EpisodeRunner, "start", "episodes (EpisodeRunner.start)"),
         (RolloutEngine, "_admit", "engine admit (prefill)"),
         (RolloutEngine, "_decode", "engine decode"),
         (RolloutEngine, "_harvest", "engine harvest (host sync)"),
         (loop, "launch_step", "train phase (launch_step)"),
         (loop, "advantages", "advantages"),
         (loop, "build_batch", "build_batch"),
         (loop, "optimize", "optimize"),
         (step, "micro_batches", "micro_batches"),
         (step, "take", "take (batch to device)"),
         (step, "packed_rows", "packed_rows"),
         (step, "token_logprobs", "token_logprobs (forward)"),
         (precision.Weights, "accumulate_grads", "accumulate_grads"),
         (precision.Weights, "clip", "clip (grad norm)"),
         (precision.Weights, "step", "optimizer step"),
         (loop, "log_step", "log_step")]


def profiled(step: int, top: int):
    """loop.launch_step, its call number `step` profiled (timed to the train phase's last kernel)."""
    real, calls = loop.launch_step, []

    def launch(run, rollouts, defer=False):
        calls.append(1)
        sync()
        start = time.perf_counter()
        if len(calls) != step:
            out = real(run, rollouts, defer)
            sync()
            print(f"train phase {len(calls)}: {time.perf_counter() - start:.3f} s", flush=True)
            return out
        gpu = DEVICE == "cuda"
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if gpu else [])]) as prof:
            out = real(run, rollouts, defer)
            sync()
        wall, events = time.perf_counter() - start, prof.key_averages()
        print(f"train phase {len(calls)}, profiled: {wall:.3f} s", end="")
        if gpu:
            kernels = [e for e in events if e.device_type.name == "CUDA"]
            total = sum(e.self_device_time_total for e in kernels)
            print(f", GPU kernels {total / 1e6:.3f} s, {sum(e.count for e in kernels)} kernels")
            for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:top]:
                print(f"{e.self_device_time_total / 1000:9.2f} ms {e.count:6d}x  {e.key[:110]}")
        else:
            print()
        print("top host ops by their total time")
        for e in sorted([e for e in events if e.device_type.name == "CPU"], key=lambda e: -e.cpu_time_total)[:top]:
            print(f"{e.cpu_time_total / 1000:9.2f} ms {e.count:6d}x  {e.key[:110]}")
        return out

    return launch


def labelled(fn, label: str):
    def inner(*args, **kwargs):
        with record_function(label):
            return fn(*args, **kwargs)
    return inner


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, merged [start, end) intervals."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def gaps(busy: list[tuple[float, float]], span: tuple[float, float]) -> list[tuple[float, float]]:
    """The intervals of `span` that the merged `busy` intervals leave uncovered."""
    out, at = [], span[0]
    for a, b in busy:
        if a > at:
            out.append((at, min(a, span[1])))
        at = max(at, b)
    if at < span[1]:
        out.append((at, span[1]))
    return [(a, b) for a, b in out if b > a]


def idle_by_innermost(idle: list[tuple[float, float]], spans: list[tuple[str, float, float]], none: str
                      ) -> dict[str, float]:
    """The `idle` intervals' time by the innermost of `spans` (name, start, end: one thread's, so nested) running
    then (`none` where none is), in the intervals' unit: one sweep over the spans' ends and starts."""
    spans = [span for span in spans if span[2] > span[1]]
    marks = sorted([(e, 0, i) for i, (_, _, e) in enumerate(spans)] + [(s, 1, i) for i, (_, s, _) in enumerate(spans)])
    running: list[int] = []  # outermost first
    out: dict[str, float] = {}
    j = 0

    def advance(t: float) -> None:  # the marks up to t: (at one instant, ends before starts)
        nonlocal j
        while j < len(marks) and marks[j][0] <= t:
            _, starts, i = marks[j]
            if starts:
                running.append(i)
            elif i in running:
                running.remove(i)
            j += 1

    for a, b in sorted(idle):
        advance(a)
        t = a
        while t < b:
            hi = min(b, marks[j][0]) if j < len(marks) else b
            name = spans[running[-1]][0] if running else none
            out[name] = out.get(name, 0.0) + hi - t
            t = hi
            advance(t)
    return out


def collections_labelled():
    """Python's garbage collections as a part of their own ("gc"), through gc's callbacks (returns the callback,
    for gc.callbacks.remove)."""
    held = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            held.append(torch.ops.profiler._record_function_enter_new("gc (Python's collector)", None))
        elif held:
            torch.ops.profiler._record_function_exit._RecordFunction(held.pop())

    gc.callbacks.append(callback)
    return callback


def whole_step(step: int, stacks: bool = False):
    """The loop's iteration `step` profiled: from the launch of train phase `step - 1` (its kernels may still run:
    an optimizer step the loop defers) to the end of train phase `step`'s kernels; its GPU busy time and idle time
    by part (PARTS) printed; `stacks`: also by the innermost execrl function (Python's calls recorded: the host slows
    more)."""
    for owner, name, label in PARTS:
        setattr(owner, name, labelled(getattr(owner, name), label))
    real, calls, state = loop.launch_step, [], {}

    def launch(run, rollouts, defer=False):
        calls.append(1)
        out = real(run, rollouts, defer)
        if len(calls) == step - 1:
            state["prof"] = profile(activities=[ProfilerActivity.CPU,
                                                *([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])],
                                    with_stack=stacks)
            state["prof"].__enter__()
            state["gc"] = collections_labelled()
            state["start"] = time.perf_counter()
        elif len(calls) == step:
            sync()
            prof = state["prof"]
            gc.callbacks.remove(state["gc"])
            prof.__exit__(None, None, None)
            report(prof, time.perf_counter() - state["start"], step, stacks)
        return out

    loop.launch_step = launch


TOP_OPS = 25
SHORT_US = 20.0  # an idle gap shorter than this is the GPU between kernels (a launch's latency), not the host


def report(prof, wall: float, step: int, stacks: bool = False) -> None:
    events = prof.events()
    labels = {label for _, _, label in PARTS} | {"gc (Python's collector)"}
    host = [e for e in events if e.device_type.name == "CPU"]
    named = {e.name for e in host}  # (a record_function's span shows on the GPU's timeline too: not a kernel)
    main = next(e.thread for e in host if e.name == "train phase (launch_step)")
    parts = [(e.name, e.time_range.start, e.time_range.end) for e in host if e.name in labels and e.thread == main]
    kernels = [(e.time_range.start, e.time_range.end) for e in events if e.device_type.name == "CUDA"
               and e.name not in named and e.time_range.end > e.time_range.start]
    first = min((s for _, s, _ in parts), default=0.0)
    last = max((e for _, _, e in parts), default=first)
    idle = gaps(union(kernels), (first, last))
    long = [(a, b) for a, b in idle if b - a >= SHORT_US]
    short_us = sum(b - a for a, b in idle) - sum(b - a for a, b in long)
    span_us = last - first
    busy_us = span_us - sum(b - a for a, b in idle)
    print(f"step {step}, whole iteration profiled: {wall:.3f} s wall, {span_us / 1e6:.3f} s from its first part to "
          f"its last; GPU busy {busy_us / 1e6:.3f} s ({len(kernels)} kernels), idle between kernels (gaps < "
          f"{SHORT_US:.0f} us) {short_us / 1e6:.3f} s, idle in {len(long)} longer gaps "
          f"{sum(b - a for a, b in long) / 1e6:.3f} s")
    took: dict[str, list[float]] = {}
    for label, s, e in parts:
        took.setdefault(label, []).append(e - s)
    print(f"| part | calls | host time ms | GPU idle under it in gaps >= {SHORT_US:.0f} us (innermost part) ms |\n"
          "|---|---:|---:|---:|")
    under = idle_by_innermost(long, parts, "(none)")
    for label in sorted(set(took) | set(under), key=lambda k: -under.get(k, 0.0)):
        spans = took.get(label, [])
        print(f"| {label} | {len(spans)} | {sum(spans) / 1e3:.1f} | {under.get(label, 0.0) / 1e3:.1f} |")
    idle_table("the host's innermost op (main thread)", "op", TOP_OPS, idle_by_innermost(
        long, [(e.name, e.time_range.start, e.time_range.end) for e in host if e.thread == main], "(no host op)"))
    threads: dict[int, list] = {}
    for e in host:
        if e.thread != main:
            threads.setdefault(e.thread, []).append((e.name, e.time_range.start, e.time_range.end))
    for thread, spans in sorted(threads.items(), key=lambda kv: -len(kv[1])):
        if len(spans) < 100:  # (a thread that ran a few ops: the profiler's own, a sandbox's pool)
            continue
        busy = idle_by_innermost(long, spans, "(idle thread)")
        busy.pop("(idle thread)", None)
        if sum(busy.values()) >= 1e3:
            idle_table(f"the innermost op of thread {thread} ({len(spans)} ops; autograd runs the backward on a thread "
                       "of its own, worker pools on theirs)", "op", 12, busy)
    frames = [(e.name, e.time_range.start, e.time_range.end) for e in host if e.thread == main and "execrl/" in e.name]
    if stacks and not frames:  # (torch 2.11 with CUDA records no Python calls as events: each op's stack instead)
        frames = [(next((f for f in e.stack if "execrl/" in f), "(outside execrl)"), e.time_range.start,
                   e.time_range.end) for e in host if e.thread == main and e.stack]
    if frames:  # (--stacks: Python's calls are events too)
        idle_table("the innermost execrl function (main thread)", "function", TOP_OPS, idle_by_innermost(
            long, [(name.split("execrl/")[-1], s, e) for name, s, e in frames], "(outside execrl)"))


def idle_table(whose: str, column: str, top: int, idle: dict[str, float]) -> None:
    """The `top` names of `idle` (name -> GPU idle us under it) as a table, the most first."""
    print(f"\n{whose} while the GPU idled in gaps >= {SHORT_US:.0f} us, top {top}\n| {column} | GPU idle ms |\n"
          "|---|---:|")
    for name, us in sorted(idle.items(), key=lambda kv: -kv[1])[:top]:
        print(f"| {name[:100]} | {us / 1e3:.1f} |")


def sync_sites(step: int) -> None:
    """Each host sync of the loop's iteration `step` (torch's sync debug mode: a blocking copy, .item(), .tolist(),
    nonzero, ...) counted by where execrl's code asked for it, printed at the iteration's end."""
    real, calls, sites = loop.launch_step, [], {}

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchronizing CUDA operation" not in str(message):  # (another warning)
            return state["shown"](message, category, filename, lineno, file, line)
        frames = [f for f in traceback.extract_stack()[:-1] if "execrl/" in f.filename or "bench/" in f.filename]
        where = " < ".join(f"{f.filename.split('execrl/')[-1]}:{f.lineno} {f.name}" for f in frames[::-1][:3])
        sites[where or f"{filename}:{lineno}"] = sites.get(where or f"{filename}:{lineno}", 0) + 1

    def launch(run, rollouts, defer=False):
        calls.append(1)
        out = real(run, rollouts, defer)
        if len(calls) == step - 1:
            warnings.showwarning, state["shown"] = record, warnings.showwarning
            state["filters"] = warnings.catch_warnings()
            state["filters"].__enter__()
            warnings.simplefilter("always")
            if DEVICE == "cuda":  # (a CPU has no host syncs to count: the table is then empty)
                torch.cuda.set_sync_debug_mode("warn")
        elif len(calls) == step:
            if DEVICE == "cuda":
                torch.cuda.set_sync_debug_mode("default")
            state["filters"].__exit__(None, None, None)
            warnings.showwarning = state["shown"]
            print(f"step {step}: {sum(sites.values())} host syncs (torch's sync debug mode), by where execrl asked\n"
                  "| syncs | where (innermost execrl frame first) |\n|---:|---|")
            for where, n in sorted(sites.items(), key=lambda kv: -kv[1]):
                print(f"| {n} | {where} |")
        return out

    state: dict = {}
    loop.launch_step = launch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--micro", type=int, default=128, help="policy.train_micro_batch_size")
    ap.add_argument("--new", type=int, default=256, help="new tokens forced per sample")
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps; the last but one's train phase is profiled")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--whole", action="store_true", help="profile the last but one step's whole loop iteration")
    ap.add_argument("--stacks", action="store_true", help="--whole: the idle time by execrl function too")
    ap.add_argument("--syncs", action="store_true", help="count the host syncs of the last but one step by where")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    system = save_arch(args.arch, work)
    if args.syncs:
        sync_sites(max(2, args.steps - 1))
    elif args.whole:
        whole_step(max(2, args.steps - 1), args.stacks)
    else:
        loop.launch_step = profiled(max(1, args.steps - 1), args.top)
    loop.train(load_config(None, step_overrides(work / "model", args.steps, args.micro, system, work / "log",
                                                args.new)))


if __name__ == "__main__":
    main()
