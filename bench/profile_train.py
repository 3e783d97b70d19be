"""Where a GRPO step's train phase goes: `execrl train` on the benchmarks' step (16 prompts x 8 samples, 128 + 256
tokens forced), one train phase after the first ones profiled (its top GPU kernels, their total against the phase's
wall time, and the top host ops), and each train phase's wall time unprofiled.

    python bench/profile_train.py --arch qwen2.5-0.5b --micro 128
    python bench/profile_train.py --arch qwen2.5-1.5b --micro 32
    python bench/profile_train.py --arch tiny --micro 16 --new 16 --steps 2   # CPU smoke: host ops only
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import DEVICE, save_arch, step_overrides, sync
from torch.profiler import ProfilerActivity, profile

from execrl.config import load_config
from execrl.trainer import loop


def profiled(step: int, top: int):
    """loop.train_step, its call number `step` profiled."""
    real, calls = loop.train_step, []

    def train_step(run, rollouts):
        calls.append(1)
        sync()
        start = time.perf_counter()
        if len(calls) != step:
            out = real(run, rollouts)
            sync()
            print(f"train phase {len(calls)}: {time.perf_counter() - start:.3f} s", flush=True)
            return out
        gpu = DEVICE == "cuda"
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if gpu else [])]) as prof:
            out = real(run, rollouts)
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

    return train_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--micro", type=int, default=128, help="policy.train_micro_batch_size")
    ap.add_argument("--new", type=int, default=256, help="new tokens forced per sample")
    ap.add_argument("--steps", type=int, default=5, help="GRPO steps; the last but one's train phase is profiled")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    system = save_arch(args.arch, work)
    loop.train_step = profiled(max(1, args.steps - 1), args.top)
    loop.train(load_config(None, step_overrides(work / "model", args.steps, args.micro, system, work / "log",
                                                args.new)))


if __name__ == "__main__":
    main()
