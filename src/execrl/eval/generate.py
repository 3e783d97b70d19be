"""Evaluation sampling: rendered prompts in, (text, token count) pairs out, through the rollout
backend."""

from __future__ import annotations

import torch

from execrl.prompts import conversation_ids, prompt_ids
from execrl.rollout import SamplingParams, build_generator
from execrl.rollout.engine import CacheTooLarge, free_bytes, kv_bytes_per_token

FEWEST, MOST = 16, 512  # sequences decoded at once where batch_size is None (on a CPU: FEWEST)
KV_SHARE = 0.5  # of the GPU's free memory after loading, for the engine's KV cache


def generate(model, tokenizer, prompts: list[str] | list[list[dict]], num_samples: int, max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, batch_size: int | None = None, backend: str = "execrl",
             seed: int = 0, on_batch=None, guided: tuple | list | None = None, on_slots=None,
             on_sample=None, stop_token_ids: list[int] | None = None,
             stop_strings: list[str] | None = None, on_ended=None) -> list[list[tuple[str, int, bool]]]:
    """`guided`: (kind, value) of a constraint every completion keeps to (execrl.guided), or one
    such (or None) per prompt, or None. `batch_size` None: auto_slots; `on_slots(n)` is told the
    number decoded at once. Each sample: (text, num_tokens, cut: it hit max_new_tokens before it ended).
    `on_sample(i, j, text, num_tokens, cut)`: told of sample j of prompt i as it
    ends, while the rest generate, where the generator hands completions in so (`streams`: on a
    GPU); otherwise never. `on_ended`, the same arguments: told of each sample as it ends on every generator (what
    had ended is kept when sampling is stopped). `stop_token_ids`: ids that end a completion besides the model's
    EOS ids; `stop_strings`: texts that end one (kept in it, as the run's rollouts keep them)."""
    torch.manual_seed(seed)
    # rendered prompts, or conversations (each message's text as text), as drop_long_prompts counted them
    ids = prompt_ids(prompts, tokenizer) if all(isinstance(p, str) for p in prompts) else \
        conversation_ids(prompts, tokenizer)
    if not ids:
        return []
    max_len = max(map(len, ids)) + max_new_tokens
    if batch_size is None:
        batch_size = auto_slots(model, max_len) if backend == "execrl" else FEWEST
    slots = min(batch_size, len(ids) * num_samples)
    if on_slots is not None:
        on_slots(slots)
    try:
        generator = build_generator(model, tokenizer, backend, slots, max_len, stop_token_ids=stop_token_ids)
    except CacheTooLarge as e:  # (--max-new-tokens 1000000000 was the allocator's traceback: a hunt's find)
        raise ValueError(f"{e}: lower --max-new-tokens (now {max_new_tokens:,}; the longest prompt is "
                         f"{max_len - max_new_tokens:,} tokens) or --batch-size (now {slots:,})") from None
    per_prompt = guided if isinstance(guided, list) else [guided] * len(ids)
    guides = {"guides": [None if c is None else generator.guides.get(*c) for c in per_prompt]} if any(per_prompt) else {}
    told = [f for f in (on_ended, on_sample if getattr(generator, "streams", False) else None) if f is not None]
    streamed = {"on_sample": lambda i, j, c: [f(i, j, c.text, len(c.ids), c.truncated) for f in told]} if told else {}
    outs = generator.generate(ids, num_samples, max_new_tokens,
                              SamplingParams(temperature, top_p), stop_strings=stop_strings, on_batch=on_batch,
                              **guides, **streamed)
    return [[(c.text, len(c.ids), c.truncated) for c in group] for group in outs]


def auto_slots(model, max_len: int) -> int:
    """Sequences for the engine to decode at once: on a GPU as many as KV_SHARE of what it can still give (its free
    memory and torch's unused reserve: engine.free_bytes) holds the KV cache of (max_len tokens each), between FEWEST
    and MOST; FEWEST on a CPU. A decode step costs about as much at 16 sequences as at 128 on a GPU (bench/README.md,
    "Slots")."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return FEWEST
    return slots_for(free_bytes(device), kv_bytes_per_token(model) * max_len)


def slots_for(free: float, bytes_per_slot: float) -> int:
    return max(FEWEST, min(MOST, int(KV_SHARE * free // max(bytes_per_slot, 1))))


