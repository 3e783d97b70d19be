"""A learned reward model beside the policy on one GPU: the GRPO step without and with it, in the same run.

    python bench/reward_model.py                              # on a GPU: a 0.5B policy, a 0.6B reward model
    python bench/reward_model.py --arch tiny --rm tiny --steps 2 --no-compile   # a smoke run on a CPU
Sections:
  step   `execrl train` steps, 16 prompts x 8 samples, ~128-token prompts, 256 new tokens forced, bf16 mixed
         precision: the reward of unit tests alone, then tests + 0.1 x the reward model's score (env.reward_model: a
         copy in the trainer's process, bf16, batches of 32 conversations): time per step, the reward model's share,
         peak GPU memory
  score  the reward model alone: 128 conversations of ~400 tokens scored, conversations/s
Random-init weights of the real architectures (Qwen2.5-0.5B's for the policy, Qwen3-0.6B's with a one-output
sequence-classification head, as Skywork-Reward-V2-Qwen3-0.6B, for the reward model) with their real vocabularies;
text from the byte-level tokenizer.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

import torch
from common import (
    NO_COMPILE,
    byte_tokenizer,
    device_name,
    fresh_peak,
    median_of,
    peak_gib,
    read_metrics,
    save_arch,
    step_overrides,
    table,
)

RMS = {  # hidden, layers, heads, kv heads, head dim, intermediate, vocab
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, 151936),
    "tiny": (64, 2, 4, 2, 16, 128, 512),
}


def save_rm(name: str, work: Path) -> Path:
    """Random-init weights (seed 0) of a Qwen3 sequence-classifier with one output, bf16, and the byte tokenizer."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    hidden, layers, heads, kv, head_dim, inter, vocab = RMS[name]
    tok = byte_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, num_labels=1,
                      max_position_embeddings=40960, tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id)
    model = Qwen3ForSequenceClassification(cfg).to(torch.bfloat16)
    model.save_pretrained(work / "rm")
    tok.save_pretrained(work / "rm")
    return work / "rm"


def section_step(arch: str, rm: str, rows: list, steps: int, compile_all: bool) -> None:
    from execrl.config import load_config
    from execrl.trainer.loop import train

    work = Path(tempfile.mkdtemp())
    system = save_arch(arch, work)
    rm_dir = save_rm(rm, work)
    judged = ["env.reward_model.enabled=true", f"env.reward_model.model_name={rm_dir}",
              "env.reward_model.precision=bfloat16", "env.reward_model.batch_size=32",
              "reward.components=[{name: test_pass_fraction}, {name: reward_model, weight: 0.1}]"]
    for label, extra in (("unit tests", []), (f"unit tests + 0.1 x reward model ({rm})", judged)):
        log_dir = work / label.split()[-1].strip("()")
        overrides = [*step_overrides(work / "model", steps, 32, system, log_dir), *extra,
                     *([] if compile_all else NO_COMPILE)]
        fresh_peak()
        run = train(load_config(None, overrides))
        run.close()
        del run
        ms = read_metrics(log_dir)
        warm = ms[1:] or ms
        med = {k: statistics.median(m.get(k, 0.0) for m in warm) for k in ("time/step", "time/generate", "time/train",
                                                                          "time/reward_model")}
        rows.append([arch, label, f"{med['time/step']:.2f}", f"{med['time/generate']:.2f}", f"{med['time/train']:.2f}",
                     f"{med['time/reward_model']:.2f}", f"{peak_gib():.1f}", f"{len(warm)} steps after the first"])


def section_score(rm: str, rows: list) -> None:
    from execrl.config.schema import RewardModelConfig
    from execrl.rewards.judges import load_reward_model

    work = Path(tempfile.mkdtemp())
    rm_dir = save_rm(rm, work)
    fresh_peak()
    judge = load_reward_model(RewardModelConfig(enabled=True, model_name=str(rm_dir), precision="bfloat16",
                                                batch_size=32))
    weights = peak_gib()
    rng = random.Random(0)
    conversations = [[{"role": "user", "content": "".join(rng.choice("abcdefgh ") for _ in range(128))},
                      {"role": "assistant", "content": "".join(rng.choice("abcdefgh ") for _ in range(256))}]
                     for _ in range(128)]
    judge(conversations[:32])  # (first-call costs)
    t = median_of(3, lambda: judge(conversations))[1]
    rows.append([rm, "128 x ~400 tokens, batches of 32", f"{len(conversations) / t:,.0f}", f"{t:.3f}",
                 f"{weights:.2f}", f"{peak_gib():.2f}"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="score,step")
    ap.add_argument("--arch", default="qwen2.5-0.5b")
    ap.add_argument("--rm", default="qwen3-0.6b")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    print(f"device: {device_name()}, torch {torch.__version__}")
    for section in args.sections.split(","):
        rows: list = []
        if section == "score":
            section_score(args.rm, rows)
            table("the reward model alone, bf16", ["reward model", "input", "conversations/s", "s", "weights GiB",
                                                   "peak GiB"], rows)
        else:
            section_step(args.arch, args.rm, rows, args.steps, not args.no_compile)
            table("execrl train steps, 16 x 8 samples, 256 new tokens, bf16", ["policy", "reward", "s/step",
                  "generate s", "train s", "reward model s", "peak GiB", "note"], rows)


if __name__ == "__main__":
    main()
