"""Sampling with transformers `generate`: prompts as token ids in, completions as token ids out
(never re-tokenized)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from execrl.rollout.completion import Completion, end_ids, text_of


@torch.no_grad()
def hf_generate(model, tokenizer, prompts: list[list[int]], num_samples: int, max_new_tokens: int,
                temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
                stop_strings: list[str] | None = None, batch_size: int = 64, on_batch=None,
                ignore_eos: bool = False, stop_token_ids: list[int] | None = None,
                on_sample=None) -> list[list[Completion]]:
    """For each prompt, `num_samples` completions (greedy when temperature is 0); generation ends at
    any EOS token of the model or of `stop_token_ids`. `on_sample(i, j, completion)`: called for each
    completion as its batch is done."""
    device = next(model.parameters()).device
    pad, eos = tokenizer.pad_token_id, end_ids(model, tokenizer, stop_token_ids)
    per_batch = max(1, batch_size // num_samples)
    sampled = temperature > 0
    out: list[list[Completion]] = []
    for start in range(0, len(prompts), per_batch):
        chunk = prompts[start:start + per_batch]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)  # [P, W], left-padded
        attn = torch.zeros_like(ids)
        for i, p in enumerate(chunk):
            ids[i, width - len(p):] = torch.tensor(p)
            attn[i, width - len(p):] = 1
        with _plain_sampling(model):
            gen = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), do_sample=sampled,
                                 temperature=temperature if sampled else None, top_p=top_p if sampled else None,
                                 top_k=(top_k or 0) if sampled else None, max_new_tokens=max_new_tokens,
                                 num_return_sequences=num_samples, pad_token_id=pad, eos_token_id=eos,
                                 stop_strings=stop_strings, tokenizer=tokenizer if stop_strings else None,
                                 min_new_tokens=max_new_tokens if ignore_eos else None)
        new = gen[:, width:].tolist()  # [P * num_samples, <= max_new_tokens]
        for i in range(len(chunk)):
            out.append([_cut(row, tokenizer, eos, pad, max_new_tokens, stop_strings)
                        for row in new[i * num_samples:(i + 1) * num_samples]])
            if on_sample is not None:
                for j, c in enumerate(out[-1]):
                    on_sample(start + i, j, c)
        if on_batch is not None:
            on_batch(len(chunk))
    return out


@contextmanager
def _plain_sampling(model):
    """The model's generation_config.json out of `generate`'s way while it runs: transformers fills every setting a
    call leaves unset from it, so a checkpoint's repetition_penalty (Qwen2.5-Coder-Instruct's 1.1), min_p,
    no_repeat_ngram_size or min_length reshaped this backend's samples, and the execrl engine's (the distribution at
    the configured temperature, top_p and top_k alone) differed from them."""
    from transformers import GenerationConfig

    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # (a peft model generates by it)
    saved = model.generation_config
    model.generation_config = GenerationConfig(**{k: getattr(saved, k, None) for k in (
        "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")})
    try:
        yield
    finally:
        model.generation_config = saved


def _cut(row: list[int], tokenizer, eos: list[int], pad: int, max_new_tokens: int, stop_strings) -> Completion:
    if stop_strings and (stopped := _stopped(row, tokenizer, eos, stop_strings)):  # (generate pads a row its stop
        return Completion(row[:stopped], text_of(tokenizer, row[:stopped]), False)  # string ended: where the pad is an
    end, truncated = len(row), True  # end id, the first pad was read as a sampled end and trained on, a hunt's find)
    padded = len(row)  # where generate's padding after a stop string begins (a pad the model sampled mid-answer,
    while pad not in eos and padded and row[padded - 1] == pad:  # before other tokens, is one of its tokens)
        padded -= 1
    for j, t in enumerate(row):
        if t in eos:
            end, truncated = j + 1, False
            break
        if j == padded:
            end, truncated = j, False
            break
    ids = row[:end]
    text = text_of(tokenizer, ids)
    if truncated and stop_strings and any(text.endswith(s) for s in stop_strings):
        truncated = False
    return Completion(ids, text, truncated and len(ids) >= max_new_tokens)


def _stopped(row: list[int], tokenizer, eos: list[int], stop_strings) -> int | None:
    """The length of the shortest prefix of `row`, before its first end id, whose text holds a stop string (the token
    that completed it is the last), else None; by halving, a decode each step."""
    first_end = next((j for j, t in enumerate(row) if t in eos), len(row))
    if not any(s in text_of(tokenizer, row[:first_end]) for s in stop_strings):
        return None
    lo, hi = 1, first_end
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in text_of(tokenizer, row[:mid]) for s in stop_strings):
            hi = mid
        else:
            lo = mid + 1
    return lo
