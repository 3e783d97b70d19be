"""LoRA against full fine-tuning on a real architecture, each beside the other in the same run.

    python bench/lora.py                          # on a GPU: qwen2.5-1.5b, both sections
    python bench/lora.py --archs tiny --steps 2 --prompts 16 --new-tokens 16 --micro 16 --no-compile   # CPU smoke
Sections:
  step     `execrl train` steps, 16 prompts x 8 samples, ~128-token prompts, 256 new tokens forced, bf16: full
           fine-tuning (fp32 master weights and AdamW state) vs LoRA (rank 16 on every linear layer of the decoder,
           the base frozen in bf16, fp32 adapters): time per step and its phases, peak GPU memory
  rollout  the engine alone, 256 prompts x (128 + 256) tokens: the model without adapters vs the same model with
           adapters, generated from merged weights (merge mode: sync GRPO) and with the low-rank path added at every
           layer (async GRPO)
Random-init weights of the real architecture with its real vocabulary; prompts from the byte-level tokenizer. On a
CPU the engine runs uncompiled and without CUDA graphs (both CUDA only).
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path

import torch
from common import (
    NO_COMPILE,
    build,
    device_name,
    fresh_peak,
    median_of,
    peak_gib,
    save_arch,
    step_medians,
    step_overrides,
    table,
    timed,
)

LORA = ["policy.lora.enabled=true", "policy.lora.dim=16", "policy.lora.alpha=32"]
TRAININGS = {"full": ("full fine-tuning", []), "lora": ("LoRA r=16, all linear", LORA)}


def section_step(arch: str, rows: list, steps: int, compile_all: bool, trainings: list[str], micro: int,
                 new: int = 256) -> None:
    from execrl.config import load_config
    from execrl.trainer.loop import train

    work = Path(tempfile.mkdtemp())
    system = save_arch(arch, work)
    for label, extra in (TRAININGS[k] for k in trainings):
        log_dir = work / label.split()[0]
        overrides = [*step_overrides(work / "model", steps, micro, system, log_dir, new), *extra,
                     *([] if compile_all else NO_COMPILE)]
        fresh_peak()
        run = train(load_config(None, overrides))
        trainable = sum(p.numel() for p in run.model.parameters() if p.requires_grad)
        run.close()
        del run
        med, count = step_medians(log_dir)
        rows.append([arch, label, f"{trainable / 1e6:,.1f}M" if trainable >= 1e6 else f"{trainable / 1e3:,.1f}K",
                     f"{med['time/step']:.2f}", f"{med['time/generate']:.2f}",
                     f"{med['time/train']:.2f}", f"{peak_gib():.1f}", f"{med['train/logprob_mismatch']:.4f}",
                     f"{count} steps after the first"])


def section_rollout(arch: str, rows: list, n: int = 256, new: int = 256) -> None:
    """n sequences of 128 prompt + `new` tokens."""
    from types import SimpleNamespace

    from execrl.lora import adapted, apply_lora
    from execrl.rollout import RolloutEngine, SamplingParams

    model, tok = build(arch)
    plen = 128
    prompts = torch.randint(3, 259, (n, plen), generator=torch.Generator().manual_seed(0)).tolist()
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    speeds = {}

    def measure(label: str, merge: bool = False) -> None:
        fresh_peak()
        engine = RolloutEngine(model, tok, slots=n, max_len=plen + new, compile=True, merge_adapters=merge)
        run = partial(engine.generate, prompts, 1, new, params)
        timed(run)  # captures the CUDA graphs
        outs, t = median_of(3, run)
        made = sum(len(c.ids) for grp in outs for c in grp)
        speeds[label] = made / t
        rows.append([arch, label, f"{made / t:,.0f}", f"{t:.2f}", f"{peak_gib():.1f}"])

    measure("no adapters")
    cfg = SimpleNamespace(dim=16, alpha=32, dropout=0.0, dropout_position="post", lora_A_init="xavier",
                          target_modules=[], exclude_modules=[], match_all_linear=True)
    apply_lora(model, cfg)
    with torch.no_grad():
        for m in adapted(model):
            m.lora_B["default"].weight.normal_(0, 1e-3)
    measure("LoRA r=16 on every linear layer, merge mode (sync GRPO)", merge=True)
    measure("LoRA r=16 on every linear layer, low-rank path (async GRPO)")
    plain = speeds["no adapters"]
    for row, speed in zip(rows[-2:], list(speeds.values())[1:]):
        row[-1] += f" ({speed / plain:.0%} of no adapters)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="rollout,step")
    ap.add_argument("--archs", default="qwen2.5-1.5b")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=256, help="rollout section: sequences generated at once")
    ap.add_argument("--new-tokens", type=int, default=256, help="both sections: new tokens forced per sequence")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--trainings", default="full,lora", help="step section: full, lora or both")
    ap.add_argument("--micro", type=int, default=32, help="step section: policy.train_micro_batch_size")
    args = ap.parse_args()
    print(f"device: {device_name()}, torch {torch.__version__}")
    for section in args.sections.split(","):
        rows: list = []
        for arch in args.archs.split(","):
            if section == "rollout":
                section_rollout(arch, rows, args.prompts, args.new_tokens)
            else:
                section_step(arch, rows, args.steps, not args.no_compile, args.trainings.split(","), args.micro,
                             args.new_tokens)
        if section == "rollout":
            table(f"engine, {args.prompts} x (128 + {args.new_tokens}) tokens, bf16",
                  ["arch", "weights", "tokens/s", "s", "peak GiB"], rows)
        else:
            table(f"execrl train steps, 16 x 8 samples, {args.new_tokens} new tokens, bf16, micro-batch {args.micro}",
                  ["arch", "training", "trainable", "s/step", "generate s", "train s", "peak GiB",
                   "engine-trainer logprob mismatch", "note"], rows)


if __name__ == "__main__":
    main()
