"""TRL's GRPO step on the workload of `grpo_step.py`'s step section, for the ratio measured in the same run: the same
saved random-init model, the built-in task's prompts with the same padding system prompt (~128 tokens), 16 prompts x
8 samples, `new` tokens forced (`min_new_tokens`), 128 samples per optimizer step, learning rate 1e-6. TRL generates
with transformers' `generate` (its default; no vLLM on the device) and trains the model in the dtype it was saved in
(bf16: TRL's default from a checkpoint); gradient checkpointing is off (TRL's default turns it on; execrl's step does
not recompute). Needs `pip install trl` (not an execrl dependency): where it is missing, grpo_step.py's row says so.

    python bench/grpo_step.py --sections step --archs qwen2.5-0.5b --step-backends execrl,trl --steps 5
    python bench/trl_baseline.py --arch qwen2.5-0.5b --steps 3       # TRL's step alone
    python bench/trl_baseline.py --arch tiny --new-tokens 16 --micro 16 --steps 2   # a smoke run on a CPU
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import DEVICE, device_name, save_arch, sync


def trl_prompts(system: str, n: int) -> list[list[dict]]:
    """The first n training prompts of the built-in task as `execrl train` renders them (its system prompt
    included): conversational rows, so that TRL applies the tokenizer's chat template to them as execrl does."""
    from execrl.prompts import PromptConfig, build_messages
    from execrl.tasks import arith

    problems = arith.load(None, "train", None, count=n)
    return [build_messages(p, PromptConfig(system_prompt=system)) for p in problems]


def trl_step(model_dir: Path, system: str, new: int, steps: int, micro: int, continuous_batching: bool = False) -> dict:
    """The medians of TRL's step, generate and train seconds over its steps after the first, the tokens it generated
    per step (its own log's mean completion length) and the peak GiB. `continuous_batching`: TRL's
    use_transformers_continuous_batching (transformers' `generate_batch`) in place of `generate`."""
    import pyarrow
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    prompts, samples = 16, 8
    times: list[dict] = []

    class Clock(TrainerCallback):
        """Each optimizer step's wall time, the device synchronized at both ends."""

        def on_step_begin(self, args, state, control, **kw):
            sync()
            times.append({"start": time.perf_counter(), "generate": 0.0})

        def on_step_end(self, args, state, control, **kw):
            sync()
            times[-1]["step"] = time.perf_counter() - times[-1]["start"]

    def reward(completions, **_):  # cheap and varied (the grade is not what is compared): equal rewards give no loss
        return [float(sum(len(m["content"]) for m in c) % 7) for c in completions]

    # (a fingerprint of our own: datasets' hash of a new table pickles pyarrow's types, which fails under Python 3.12
    # with datasets 5.2 and pyarrow 26: "Can't pickle <class 'MonthDayNano'>")
    rows = [{"prompt": p} for p in trl_prompts(system, prompts * (steps + 1))]
    data = Dataset(pyarrow.Table.from_pylist(rows), fingerprint="execrl-bench-trl-prompts")
    on_gpu = DEVICE == "cuda"
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=steps, per_device_train_batch_size=micro,
                      gradient_accumulation_steps=prompts * samples // micro, num_generations=samples,
                      max_completion_length=new, generation_kwargs={"min_new_tokens": new}, learning_rate=1e-6,
                      gradient_checkpointing=False, bf16=on_gpu, use_cpu=not on_gpu, logging_steps=1,
                      report_to="none", save_strategy="no", disable_tqdm=True, seed=0, shuffle_dataset=False,
                      use_transformers_continuous_batching=continuous_batching)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward, args=args, train_dataset=data,
                          callbacks=[Clock()])
    model = trainer.model

    def clocked(generate):  # TRL's rollouts: its own calls of the model's generate (or generate_batch) in the step
        def call(*a, **kw):
            sync()
            t = time.perf_counter()
            try:
                return generate(*a, **kw)
            finally:
                sync()
                times[-1]["generate"] += time.perf_counter() - t
        return call

    model.generate, model.generate_batch = clocked(model.generate), clocked(model.generate_batch)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    done = [t for t in times if "step" in t]
    warm = done[1:] or done
    step = statistics.median(t["step"] for t in warm)
    gen = statistics.median(t["generate"] for t in warm)
    peak = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else 0.0
    lengths = [log["completions/mean_length"] for log in trainer.state.log_history if "completions/mean_length" in log]
    del trainer, model
    return {"step": step, "generate": gen, "train": step - gen, "steps": len(warm), "peak": peak,
            "tokens": prompts * samples * statistics.median(lengths[1:] or lengths)}


def available() -> str | None:
    """Why TRL cannot run here, or None."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        return f"TRL is not installed ({e.name}): pip install trl"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--micro", type=int, default=32)
    ap.add_argument("--continuous-batching", action="store_true", help="TRL's use_transformers_continuous_batching")
    args = ap.parse_args()
    missing = available()
    if missing:
        raise SystemExit(missing)
    work = Path(tempfile.mkdtemp())
    system = save_arch(args.arch, work)
    r = trl_step(work / "model", system, args.new_tokens, args.steps, args.micro, args.continuous_batching)
    how = " (continuous batching)" if args.continuous_batching else ""
    print(f"TRL GRPO step{how}, {args.arch} on {device_name()}, 16 prompts x 8, ~128 + {args.new_tokens} tokens, "
          f"micro-batch {args.micro}: {r['step']:.2f} s (generate {r['generate']:.2f}, the rest {r['train']:.2f}; "
          f"{r['tokens'] / r['generate']:,.0f} generated tok/s; peak {r['peak']:.1f} GiB; {r['steps']} steps)")


if __name__ == "__main__":
    main()
