"""A few `execrl train` steps on a real architecture with random weights (throughput does not depend on weight
values), on whatever device is there: step time, its parts, generated tokens/s and peak memory.

    python bench/train_smoke.py --arch qwen2.5-0.5b --steps 3
    python bench/train_smoke.py --arch tiny --steps 2 --prompts 2 --generations 4   # a smoke run on a CPU
The task is the built-in one (its byte tokenizer, so the vocabulary is small); everything else is the real path:
an HF model directory, bf16 on GPUs that have it, the default rollout backend (the execrl engine), the sandbox, the
GRPO step.
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
from common import ARCHS, QUIET, byte_tokenizer, device_name, qwen2_config, read_metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--generations", type=int, default=8)
    args = ap.parse_args()

    from transformers import Qwen2ForCausalLM

    from execrl.config import load_config
    from execrl.trainer.loop import train

    tok = byte_tokenizer()
    work = Path(tempfile.mkdtemp())
    Qwen2ForCausalLM(qwen2_config(args.arch, tok, vocab=len(tok))).save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    n = args.prompts * args.generations
    overrides = [f"policy.model_name={work / 'model'}", f"grpo.max_num_steps={args.steps}", "warmup.sft_steps=0",
                 f"grpo.num_prompts_per_step={args.prompts}", f"grpo.num_generations_per_prompt={args.generations}",
                 f"policy.train_global_batch_size={n}", "policy.train_micro_batch_size=16", "policy.logprob_batch_size=32",
                 f"policy.generation_batch_size={n}", *QUIET, f"logger.log_dir={work / 'run'}",
                 "policy.optimizer.kwargs.lr=1e-6"]
    start = time.perf_counter()
    train(load_config(None, overrides))
    total = time.perf_counter() - start
    rows = read_metrics(work / "run")
    print(f"\n{args.arch} on {device_name()}, torch {torch.__version__}, {args.prompts} x {args.generations} samples/step")
    print(f"{'step':>4} {'generate s':>11} {'grade s':>8} {'train s':>8} {'gen tok/s':>10} {'peak GiB':>9}")
    for r in rows:
        tokens = r["train/completion_len_mean"] * n
        print(f"{r['step']:>4} {r['time/generate']:>11.2f} {r['time/grade']:>8.2f} {r['time/train']:>8.2f} "
              f"{tokens / r['time/generate']:>10.0f} {r.get('memory/peak_gib', 0):>9.1f}")
    print(f"total {total:.1f}s (model set-up included)")


if __name__ == "__main__":
    main()
