"""Does bf16 training learn? The built-in task (`execrl train`'s default) with a model larger than the CPU default:
one supervised warm-up in fp32 (the default 80 steps, saved), then from those same weights, with the same seed and a
small learning rate, GRPO three ways: fp32; bf16 mixed precision (policy.precision=bfloat16: fp32 master weights,
bf16 compute); and pure bf16 (weights, gradients and AdamW state all bf16: execrl before issue 18, kept only here).
Prints one table of train reward and greedy eval pass@1. (Warming up each run on its own would compare warm-ups:
from random weights at the warm-up's large learning rate, runs diverge from any difference in rounding.)

    python bench/precision.py                     # on a GPU: hidden 512, 4 layers, 100 steps at lr 1e-5
    python bench/precision.py --hidden 64 --layers 2 --steps 2 --warmup-steps 2 --device cpu   # a smoke run

The warm-up runs alone (the run's set-up and its supervised warm-up, as `execrl train` starts, and the master weights
saved): a run of no GRPO steps is not a valid config (grpo.max_num_steps >= 1).
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import byte_tokenizer, read_metrics, table

from execrl.config import load_config
from execrl.models import build_tiny_model
from execrl.trainer import precision
from execrl.trainer.loop import train, warm_up
from execrl.trainer.setup import build_run

TORCHAO_8BIT = "policy.optimizer.name=torchao.optim.AdamW8bit"
ROUND = "policy.optimizer.kwargs.bf16_stochastic_round=true"
# mode: (policy.precision, pure bf16, more overrides)
MODES = {"fp32": ("float32", False, []), "bf16 mixed": ("bfloat16", False, []),
         "pure bf16 (before)": ("bfloat16", True, []),
         "bf16 mixed + cpu_offload": ("bfloat16", False, ["policy.cpu_offload=true"]),
         "bf16 mixed + AdamW8bit": ("bfloat16", False, [TORCHAO_8BIT]),
         "bf16 stochastic rounding": ("bfloat16", False, ["policy.optimizer.name=torchao.optim._AdamW", ROUND]),
         "bf16 stochastic rounding + AdamW8bit": ("bfloat16", False, [TORCHAO_8BIT, ROUND])}
DEFAULT_MODES = "fp32,bf16 mixed,pure bf16 (before)"


def warm_start(overrides: list[str], out: Path) -> int:
    """The supervised warm-up alone: the run built from the config and warmed up as `execrl train` does before its
    first GRPO step, its master weights and tokenizer saved in `out` (an HF model directory). Returns its steps."""
    run = build_run(load_config(None, overrides))
    try:
        warm_up(run)
        run.model.save_pretrained(out)
        run.tokenizer.save_pretrained(out)
    finally:
        run.close()
    return run.cfg.warmup.sft_steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--warmup-steps", type=int, default=None,
                    help="supervised warm-up steps (default: the built-in config's warmup.sft_steps)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--modes", default=DEFAULT_MODES, help="comma-separated, of: " + ", ".join(MODES) +
                    " (cpu_offload needs a GPU; AdamW8bit and stochastic rounding need torchao)")
    ap.add_argument("--set", nargs="*", default=[], help="more key=value overrides for every run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="execrl-precision-"))
    tok = byte_tokenizer()
    build_tiny_model(tok, hidden=args.hidden, layers=args.layers, heads=max(4, args.hidden // 64), seed=0) \
        .save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    warm = [f"policy.model_name={work / 'model'}", "policy.precision=float32", f"policy.device={args.device}",
            *([f"warmup.sft_steps={args.warmup_steps}"] if args.warmup_steps is not None else []),
            "checkpointing.enabled=false", f"logger.log_dir={work / 'warm'}", "logger.tensorboard_enabled=false",
            *args.set]
    start = work / "warm" / "policy"
    sft_steps = warm_start(warm, start)
    rows = []
    for mode in args.modes.split(","):
        dtype, pure, more = MODES[mode]
        precision.PURE_LOW_PRECISION = pure
        log = work / "runs" / "".join(c if c.isalnum() else "_" for c in mode)
        overrides = [f"policy.model_name={start}", "warmup.sft_steps=0", f"policy.precision={dtype}",
                     f"policy.device={args.device}", "grpo.val_at_start=true",
                     f"grpo.max_num_steps={args.steps}", f"policy.optimizer.kwargs.lr={args.lr}",
                     f"grpo.val_period={max(1, args.steps // 4)}", "checkpointing.enabled=false",
                     "logger.tensorboard_enabled=false", f"logger.log_dir={log}", *more, *args.set]
        t = time.perf_counter()
        train(load_config(None, overrides))
        seconds = time.perf_counter() - t
        metrics = read_metrics(log)
        rewards = [m["train/reward_mean"] for m in metrics if "train/reward_mean" in m]
        evals = [f"{m['eval/pass@1']:.3f}" for m in metrics if "eval/pass@1" in m]
        k = min(10, len(rewards) // 2 or 1)
        mismatch = [m["train/logprob_mismatch"] for m in metrics if "train/logprob_mismatch" in m]
        rows.append([mode, f"{statistics.mean(rewards[:k]):.3f}", f"{statistics.mean(rewards[-k:]):.3f}",
                     " -> ".join(evals), f"{statistics.mean(mismatch):.4f}" if mismatch else "", f"{seconds:.0f}"])
    precision.PURE_LOW_PRECISION = False
    table(f"Built-in task, Qwen2 hidden {args.hidden} x {args.layers} layers, {args.steps} GRPO steps at lr {args.lr} "
          f"from one fp32 warm-up ({sft_steps} steps), seed 0",
          ["precision", f"train reward, first {k} steps", f"last {k} steps", "eval pass@1 (every "
           f"{max(1, args.steps // 4)} steps)", "engine vs trainer logprob mismatch", "s"], rows)


if __name__ == "__main__":
    main()
