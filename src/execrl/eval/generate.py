"""Evaluation sampling: rendered prompts in, (text, token count) pairs out, through the rollout backend."""

from __future__ import annotations

from execrl.rollout.hf import hf_generate


def generate(model, tokenizer, prompts: list[str], num_samples: int, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, batch_size: int = 8, seed: int = 0, on_batch=None) -> list[list[tuple[str, int]]]:
    import torch

    torch.manual_seed(seed)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    outs = hf_generate(model, tokenizer, ids, num_samples, max_new_tokens, temperature, top_p,
                       batch_size=batch_size, on_batch=on_batch)
    return [[(c.text, len(c.ids)) for c in group] for group in outs]
