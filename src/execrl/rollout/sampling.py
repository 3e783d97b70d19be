"""Token sampling on the device, with no host synchronization (so it can live inside a CUDA graph).

A token is drawn by inverse CDF: the first vocabulary entry where the running sum of the (allowed, kept)
probabilities passes a uniform draw u. The randomness is keyed, not drawn from a generator's stream: u for token t
of a request is a hash of (the request's key, t). So a sample does not depend on which slot it ran in, what else was
in the batch, or which rank generated it: one process and N processes draw the same samples for the same prompts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import execrl.rollout.fused_sampling as fused_sampling
from execrl.algo.logprobs import top_k_top_p
from execrl.guided import restrict


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int | None = None
    ignore_eos: bool = False  # benchmarks only: always generate max_new_tokens

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or (self.top_k is not None and self.top_k < 1):
            raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1 and top_k >= 1 (or null), got {self}")


MASK32 = 0xFFFFFFFF
MIX = (0x85EBCA6B, 0xC2B2AE35)  # MurmurHash3's finalizer constants


def mix32(h: int) -> int:
    """MurmurHash3's 32-bit finalizer, a bijection of [0, 2**32) that scatters every input bit (host
    side)."""
    h &= MASK32
    h = ((h ^ (h >> 16)) * MIX[0]) & MASK32
    h = ((h ^ (h >> 13)) * MIX[1]) & MASK32
    return h ^ (h >> 16)


def _signed(c: int) -> int:
    return c - 2**32 if c >= 2**31 else c


def mix32_(h: torch.Tensor) -> torch.Tensor:
    """mix32 on int32 tensors (the same bits): 32-bit multiplies wrap, shifts are made logical by
    masking. Native 32-bit integer work on a GPU, where 64-bit multiplies cost several instructions
    each."""
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * _signed(MIX[0])
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * _signed(MIX[1])
    return h ^ ((h >> 16) & 0xFFFF)


def request_key(seed: int, sample_index: int) -> int:
    """The key of sample j of a prompt whose seed is `seed` (any int), as an int32 value."""
    return _signed(mix32(mix32(seed & MASK32) ^ mix32((seed >> 32) & MASK32) ^ mix32(sample_index + 0x9E3779B9)))


def token_keys(keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per-row keys of the token at `index` (its position within the completion): [B], [B] -> [B]
    int32."""
    return mix32_(keys.int() ^ mix32_(index.int() + 0x632BE5AB))


U_MAX = 1.0 - 2.0**-24  # the largest float32 below 1


def uniform(bits: torch.Tensor) -> torch.Tensor:
    """24 random bits -> a float32 in (0, 1). Unclamped, (bits + 0.5) / 2**24 rounds to exactly 1.0
    for the largest bits, a draw at the row's whole sum, past its last allowed token."""
    return ((bits.float() + 0.5) * 2.0**-24).clamp(max=U_MAX)


def row_uniform(keys: torch.Tensor) -> torch.Tensor:
    """Each row's draw: [B] int32 keys -> [B] float32 in (0, 1) (fused_sampling's, bit for bit)."""
    return uniform((mix32_(keys.int() ^ fused_sampling.SALT) >> 8) & 0xFFFFFF)


def inverse_cdf(scaled: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token of each row [B, V] (-inf: not allowed) at its draw u [B]: the first column whose running sum of
    exp(scaled - max) passes u times the row's sum (the last allowed column where rounding leaves it short)."""
    p = torch.exp(scaled - scaled.max(-1, keepdim=True).values)  # [B, V]
    cum = p.cumsum(-1)  # [B, V]
    last = (p > 0).cumsum(-1).argmax(-1)  # [B]
    return torch.minimum((cum <= (u * cum[:, -1])[:, None]).sum(-1), last)


def scoring_temperature(temperature: float) -> float:
    """The temperature of the distribution logprobs are reported under, by the sampler and the
    trainer alike: the sampling temperature, and 1 for greedy decoding (temperature 0)."""
    return temperature if temperature > 0 else 1.0


def sample(logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor | None = None,
           bitmask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V], keys [B] (see token_keys; None: fresh keys from torch's generator), bitmask
    [B, W] int32 (guided decoding: the tokens each row may take, packed as execrl.guided makes them;
    None: all) -> (tokens [B], logprobs [B]).

    The logprob is that of the chosen token under softmax(logits / scoring_temperature) restricted
    to the allowed tokens and, when sampling, filtered by top-k/top-p and renormalized (vLLM's
    processed logprobs, as NeMo RL reads them): the distribution the token was drawn from, which the
    trainer scores too (step.sampler_filter)."""
    if keys is None and params.temperature > 0:
        keys = torch.randint(-2**31, 2**31, (logits.shape[0],), device=logits.device, dtype=torch.int32)
    if params.top_k is None and params.top_p == 1.0 and fused_sampling.supported(logits):
        # on a GPU: one pass over the logits (the mask read in the same pass), then one over the draw's chunk
        return fused_sampling.sample_plain(logits, scoring_temperature(params.temperature),
                                           keys if params.temperature > 0 else None, bitmask)
    if bitmask is not None:
        logits = restrict(logits, bitmask)
    return sample_torch(logits, params, keys)


def sample_torch(logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """sample() in torch ops, on any device and with any filter (keys: None only when greedy)."""
    logits = logits.float()
    scaled = logits / scoring_temperature(params.temperature)  # [B, V]
    if params.temperature == 0:
        tokens = logits.argmax(-1)  # [B]
        return tokens, _picked(scaled, tokens)
    kept = top_k_top_p(scaled, params.top_k, params.top_p)  # [B, V]
    tokens = inverse_cdf(kept, row_uniform(keys))  # a sample of softmax(kept)
    return tokens, _picked(kept, tokens)


def _picked(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without writing the whole log-softmax: [B, V], [B] -> [B]."""
    return logits.gather(-1, tokens[:, None])[:, 0] - torch.logsumexp(logits, -1)
