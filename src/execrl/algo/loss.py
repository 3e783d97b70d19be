"""The clipped policy-gradient loss (PPO/GRPO), with asymmetric clipping (DAPO clip-higher), optional dual clip,
KL to a reference model (k1 or k3), and truncated importance-sampling correction for off-policy samples.

Normalizers are global: the caller passes the token and sequence counts of the *whole* optimizer batch, so
that gradient accumulation over micro-batches (or ranks) gives the same gradient as one big batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossTerms:
    logprobs: torch.Tensor  # [B, T] log pi_theta(token), with grad
    old_logprobs: torch.Tensor  # [B, T] log pi_old(token) under the trainer's weights at sampling time
    advantages: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, T] 1.0 on tokens that count (the model's own, not truncated-and-filtered)
    ref_logprobs: torch.Tensor | None = None  # [B, T] reference model, for the KL penalty
    sampler_logprobs: torch.Tensor | None = None  # [B, T] the rollout engine's own logprobs (IS correction)


def policy_loss(t: LossTerms, *, num_tokens: float, num_seqs: float, clip_low: float = 0.2, clip_high: float = 0.2,
                dual_clip: float | None = None, kl_coef: float = 0.0, kl_type: str = "k3", token_level: bool = True,
                constant_normalizer: int | None = None, is_correction: bool = False,
                is_cap: float | None = 2.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss of one micro-batch, scaled so that summing over the optimizer batch gives its mean. Returns (loss, metrics)."""
    mask = t.mask.float()
    log_ratio = t.logprobs - t.old_logprobs  # [B, T]
    ratio = torch.exp(log_ratio)
    adv = t.advantages.unsqueeze(1)  # [B, 1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    surrogate = torch.minimum(unclipped, clipped)  # [B, T]
    if dual_clip is not None:  # bound how far a negative-advantage token can push
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, dual_clip * adv), surrogate)
    per_token = -surrogate
    if is_correction and t.sampler_logprobs is not None:
        weight = torch.exp(t.old_logprobs - t.sampler_logprobs).detach()  # [B, T]
        per_token = per_token * (weight.clamp(max=is_cap) if is_cap else weight)
    kl = torch.zeros_like(per_token)
    if kl_coef and t.ref_logprobs is not None:
        delta = t.ref_logprobs - t.logprobs  # [B, T]
        kl = torch.exp(delta) - delta - 1.0 if kl_type == "k3" else -delta
        per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, num_tokens, num_seqs, token_level, constant_normalizer)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        metrics = {
            "clip_frac": ((unclipped != clipped).float() * mask).sum() / n,
            "kl": (kl * mask).sum() / n,
            "ratio_mean": (ratio * mask).sum() / n,
            "tokens": mask.sum(),
        }
    return loss, metrics


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, num_tokens: float, num_seqs: float, token_level: bool,
              constant_normalizer: int | None) -> torch.Tensor:
    """token level: sum over all tokens / tokens in the optimizer batch; sequence level: each sequence's token mean,
    summed / sequences in the optimizer batch; Dr.GRPO: sum / (constant x sequences)."""
    if constant_normalizer:
        return (per_token * mask).sum() / (constant_normalizer * num_seqs)
    if token_level:
        return (per_token * mask).sum() / max(num_tokens, 1.0)
    per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)  # [B]
    return per_seq.sum() / max(num_seqs, 1.0)
