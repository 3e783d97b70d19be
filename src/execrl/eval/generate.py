"""Reference generation with transformers `generate` (batched, sampled or greedy). The fast engine comes later."""

from __future__ import annotations

import torch


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], num_samples: int, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, batch_size: int = 8, seed: int = 0, on_batch=None) -> list[list[tuple[str, int]]]:
    """For each prompt, `num_samples` (completion text, completion token count) pairs."""
    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    out: list[list[tuple[str, int]]] = []
    per_batch = max(1, batch_size // num_samples)
    for start in range(0, len(prompts), per_batch):
        chunk = prompts[start:start + per_batch]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        sampled = temperature > 0
        gen = model.generate(**enc, do_sample=sampled, temperature=temperature if sampled else None,
                             top_p=top_p if sampled else None, top_k=0 if sampled else None,
                             max_new_tokens=max_new_tokens, num_return_sequences=num_samples,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        new = gen[:, enc["input_ids"].shape[1]:]  # [len(chunk) * num_samples, <= max_new_tokens]
        for i in range(len(chunk)):
            rows = new[i * num_samples:(i + 1) * num_samples]
            out.append([(tokenizer.decode(r, skip_special_tokens=True), _length(r, tokenizer)) for r in rows])
        if on_batch is not None:
            on_batch(len(chunk))
    return out


def _length(tokens: torch.Tensor, tokenizer) -> int:
    """Tokens up to and including the first EOS (the rest is padding)."""
    eos = (tokens == tokenizer.eos_token_id).nonzero()
    return int(eos[0, 0]) + 1 if len(eos) else int((tokens != tokenizer.pad_token_id).sum())
