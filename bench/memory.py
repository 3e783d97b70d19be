"""Memory options on a real architecture, each beside the others in the same run: a GRPO step's time, phases and
peak GPU and host memory.

    python bench/memory.py        # on a GPU: 3B on the GPU, 7B offloaded, 7B on the GPU (out of memory: its message)
    python bench/memory.py --runs tiny:full,tiny:dynamic,tiny:offload --new-tokens 16 --no-compile  # a CPU smoke
                                                                          # run (offload is refused on a CPU)
Options (policy.* settings added to the step):
  full       fp32 master weights and AdamW state on the GPU (mixed precision)
  offload    policy.cpu_offload: the fp32 master and AdamW state in pinned host memory, the step on the CPU
  dynamic    policy.dynamic_batching: micro-batches by tokens (--micro x the longest sequence)
  lora       policy.lora: rank-16 adapters on every linear layer of the decoder, the base frozen in bf16
  adamw8bit  torchao's AdamW8bit: 8-bit moments over the fp32 master
  sr         torchao's AdamW with bf16_stochastic_round: bf16 weights are their own master, bf16 moments
  sr8bit     both: bf16 weights with stochastic rounding, 8-bit moments
Each row also shows the memory plan's estimate of the peak (trainer/memory_plan.py), made from the config alone.
The step: 16 prompts x 8 samples, ~128-token prompts, --new-tokens forced, bf16, activation checkpointing,
--micro sequences per micro-batch; random-init weights of the real architecture, prompts from the byte tokenizer.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    DEVICE,
    NO_COMPILE,
    byte_tokenizer,
    device_name,
    fresh_peak,
    padding_prompt,
    peak_gib,
    save_arch,
    step_medians,
    step_overrides,
    table,
)

OPTIONS = {"full": [], "offload": ["policy.cpu_offload=true"],
           "dynamic": ["policy.dynamic_batching.enabled=true"],
           "lora": ["policy.lora.enabled=true", "policy.lora.dim=16", "policy.lora.alpha=32"],
           "adamw8bit": ["policy.optimizer.name=torchao.optim.AdamW8bit"],
           "sr": ["policy.optimizer.name=torchao.optim._AdamW", "policy.optimizer.kwargs.bf16_stochastic_round=true"],
           "sr8bit": ["policy.optimizer.name=torchao.optim.AdamW8bit",
                      "policy.optimizer.kwargs.bf16_stochastic_round=true"]}


def measure(arch: str, option: str, work: Path, system: str, steps: int, new_tokens: int, micro: int,
            compile_all: bool) -> list:
    """One run's row."""
    from execrl.config import load_config
    from execrl.trainer.loop import train
    from execrl.trainer.memory_plan import plan, shape_of

    log_dir = work / option
    overrides = [*step_overrides(work / "model", steps, micro, system, log_dir),
                 f"policy.max_total_sequence_length={144 + new_tokens}", f"policy.generation.max_new_tokens={new_tokens}",
                 "policy.activation_checkpointing=true", *OPTIONS[option], *([] if compile_all else NO_COMPILE)]
    fresh_peak()
    cfg = load_config(None, overrides)
    estimate = plan(cfg, shape_of(cfg)).peak / 2**30
    try:
        run = train(cfg)
    except (RuntimeError, ValueError) as e:  # an out-of-memory (or a refusal) is a result: its message is the row
        return [arch, option, "-", "-", "-", f"{peak_gib():.1f}", f"{estimate:.1f}", "-", "-",
                " ".join(str(e).split())[:400]]
    run.close()
    del run
    med, count = step_medians(log_dir)
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB, the process's peak so far
    return [arch, option, f"{med['time/step']:.2f}", f"{med['time/generate']:.2f}", f"{med['time/train']:.2f}",
            f"{peak_gib():.1f}", f"{estimate:.1f}", f"{host:.1f}", f"{med['train/logprob_mismatch']:.5f}",
            f"{count} steps after the first"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="qwen2.5-3b:full,qwen2.5-coder-7b:offload,qwen2.5-coder-7b:full",
                    help="arch:option, comma-separated, in order (options: " + ", ".join(OPTIONS) + "); each in a "
                         "process of its own, so that none inherits another's memory")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=2048)
    ap.add_argument("--micro", type=int, default=8, help="policy.train_micro_batch_size (and logprob_batch_size)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # arch:option:model directory: the child process's run
    args = ap.parse_args()
    if args.one:
        arch, option, work = args.one.split(":", 2)
        system = save_arch(arch, Path(work), init=DEVICE) if not (Path(work) / "model").is_dir() else \
            padding_prompt(byte_tokenizer())
        print("ROW " + json.dumps(measure(arch, option, Path(work), system, args.steps, args.new_tokens, args.micro,
                                          not args.no_compile)), flush=True)
        return
    header = ["arch", "option", "step s", "generate s", "train s", "peak GPU GiB", "plan GiB", "peak host GiB (process)",
              "logprob mismatch", "note"]
    rows: list = []
    works: dict[str, str] = {}
    for run in args.runs.split(","):
        arch, option = run.split(":")
        works.setdefault(arch, tempfile.mkdtemp())
        child = subprocess.run([sys.executable, __file__, "--one", f"{arch}:{option}:{works[arch]}",
                                f"--steps={args.steps}", f"--new-tokens={args.new_tokens}", f"--micro={args.micro}",
                                *(["--no-compile"] if args.no_compile else [])], capture_output=True, text=True)
        found = [line[4:] for line in child.stdout.splitlines() if line.startswith("ROW ")]
        rows.append(json.loads(found[0]) if found else
                    [arch, option, "-", "-", "-", "-", "-", "-", "-", f"exit {child.returncode}: {child.stderr[-300:]}"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)  # (each row as it comes: a later run may not end)
    table(f"GRPO step, 16 x 8, 128 + {args.new_tokens} tokens, micro-batch {args.micro}, activation checkpointing, "
          f"on {device_name()}", header, rows)


if __name__ == "__main__":
    main()
