"""Evaluation sampling: rendered prompts in, (text, token count) pairs out, through the rollout
backend."""

from __future__ import annotations

import torch

from execrl.rollout import SamplingParams, build_generator


def generate(model, tokenizer, prompts: list[str], num_samples: int, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, batch_size: int = 8, backend: str = "execrl", seed: int = 0,
             on_batch=None, guided: tuple | list | None = None) -> list[list[tuple[str, int]]]:
    """`guided`: (kind, value) of a constraint every completion keeps to (execrl.guided), or one
    such (or None) per prompt, or None."""
    torch.manual_seed(seed)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if not ids:
        return []
    slots = min(batch_size, len(ids) * num_samples)
    generator = build_generator(model, tokenizer, backend, slots, max(map(len, ids)) + max_new_tokens)
    per_prompt = guided if isinstance(guided, list) else [guided] * len(ids)
    guides = {"guides": [None if c is None else generator.guides.get(*c) for c in per_prompt]} if any(per_prompt) else {}
    outs = generator.generate(ids, num_samples, max_new_tokens,
                              SamplingParams(temperature, top_p), on_batch=on_batch, **guides)
    return [[(c.text, len(c.ids)) for c in group] for group in outs]
