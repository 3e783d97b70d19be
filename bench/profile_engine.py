"""Where a decode step's GPU time goes: the top kernels of the execrl engine (eager and compiled, no CUDA graphs,
so each kernel is visible), plus the step time with graphs.

    python bench/profile_engine.py --arch qwen2.5-0.5b
"""

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from grpo_step import build  # noqa: E402

from execrl.rollout import RolloutEngine, SamplingParams  # noqa: E402


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--rows", type=int, default=18)
    ap.add_argument("--variants", default="eager,compiled")
    args = ap.parse_args()
    model, tok = build(args.arch)
    params = SamplingParams(1.0, ignore_eos=True)
    prompts = torch.randint(3, 259, (args.slots, 128)).tolist()
    variants = {"eager": {"cuda_graphs": False}, "compiled": {"cuda_graphs": False, "compile": True}}
    for name in args.variants.split(","):
        kwargs = variants[name]
        engine = RolloutEngine(model, tok, slots=args.slots, max_len=384, **kwargs)
        engine.generate(prompts, 1, 40, params)  # warm-up (and compilation)
        engine.generate(prompts, 1, 1, params)  # prefill: every slot holds a prompt
        engine.active.fill_(True)
        engine.limit.fill_(10_000)
        for _ in range(3):
            engine._step(384, params)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(16):
                engine._step(384, params)
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        total = sum(e.self_device_time_total for e in events) / 16
        print(f"\n{args.arch} {name}: {total / 1000:.2f} ms of GPU kernel time per decode step, "
              f"{sum(e.count for e in events) / 16:.0f} kernels per step")
        for e in sorted(events, key=lambda e: -e.self_device_time_total)[:args.rows]:
            print(f"{e.self_device_time_total / 16 / 1000:8.3f} ms {e.count // 16:5d}x  {e.key[:110]}")
        del engine


if __name__ == "__main__":
    main()
