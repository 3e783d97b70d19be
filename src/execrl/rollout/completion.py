"""What every rollout backend returns: token ids in, token ids out (never re-tokenized)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Completion:
    ids: list[int]  # the sampled tokens, up to and including EOS or the token that completed a stop string
    text: str
    truncated: bool  # hit max_new_tokens (or the context) without EOS or a stop string
    logprobs: list[float] | None = None  # the sampler's logprob of each token in ids (engine backend)
    guide: object | None = None  # the execrl.guided.Guide the tokens were sampled under (guided decoding)


def eos_ids(model, tokenizer) -> list[int]:
    """The tokenizer's EOS plus any the model's generation config lists (instruct models often have
    two)."""
    found = [tokenizer.eos_token_id]
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    found += extra if isinstance(extra, list) else [extra]
    return sorted({int(t) for t in found if t is not None})
