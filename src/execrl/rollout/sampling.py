"""Token sampling on the device, with no host synchronization (so it can live inside a CUDA graph)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int | None = None
    ignore_eos: bool = False  # benchmarks only: always generate max_new_tokens

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or (self.top_k is not None and self.top_k < 1):
            raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1 and top_k >= 1 (or null), got {self}")


def sample(logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] -> (tokens [B], logprobs [B]).

    The logprob is that of the chosen token under softmax(logits / temperature) before top-k/top-p filtering
    (temperature 1 when greedy): the same distribution the trainer scores with, so the two can be compared."""
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(-1)  # [B]
        return tokens, _picked(logits, tokens)
    scaled = logits / params.temperature  # [B, V]
    kept = scaled
    if params.top_k is not None and params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[:, -1:]  # [B, 1]
        kept = kept.masked_fill(kept < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(kept, dim=-1, descending=True)  # [B, V]
        probs = torch.softmax(ordered, -1)
        before = torch.cumsum(probs, -1) - probs  # mass of the strictly likelier tokens
        ordered = ordered.masked_fill(before >= params.top_p, float("-inf"))  # the likeliest token always stays
        kept = torch.full_like(kept, float("-inf")).scatter(-1, order, ordered)
    # Gumbel-max: argmax(logits - log E), E ~ Exp(1), samples from softmax(kept) without a host round trip
    noise = torch.empty_like(kept).exponential_()
    tokens = (kept - noise.log()).argmax(-1)
    return tokens, _picked(scaled, tokens)


def _picked(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without writing the whole log-softmax: [B, V], [B] -> [B]."""
    return logits.gather(-1, tokens[:, None])[:, 0] - torch.logsumexp(logits, -1)
