"""The clipped policy-gradient loss (PPO/GRPO), with asymmetric clipping (DAPO clip-higher),
optional dual clip, KL to a reference model (k1, k2 or k3), and truncated importance-sampling
correction for off-policy samples.

Three policies meet here (decoupled PPO, Hilton et al. 2021; the truncated weight of Yao et al. 2025):
  behaviour  pi_sampler: the rollout engine's logprobs, from the weights that sampled (one step old with async
             GRPO) in the engine's own numerics (e.g. bf16 kernels)
  proximal   pi_old: the trainer's logprobs under the weights at the start of this training step; the PPO ratio
             pi_theta / pi_old and its clip keep each step close to it
  current    pi_theta: the weights being optimized
Tokens were drawn from pi_sampler, not pi_old, so each token's surrogate is weighted by pi_old / pi_sampler,
truncated at a cap (bounded variance, at the price of a small bias), and detached: it reweights samples, it is not
optimized. With sampler == old (on-policy, exact numerics) the weight is 1 and this is plain GRPO.

Normalizers are global: the caller passes the token and sequence counts of the *whole* optimizer
batch, so that gradient accumulation over micro-batches (or ranks) gives the same gradient as one
big batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from execrl.config.schema import LossConfig

EXP_MAX = 88.0  # the largest argument of exp whose float32 value is finite (e^88.7 overflows)


@dataclass
class LossTerms:
    logprobs: torch.Tensor  # [B, T] log pi_theta(token), with grad
    old_logprobs: torch.Tensor  # [B, T] log pi_old(token): the proximal policy, the trainer at this step's start
    advantages: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, T] 1.0 on tokens that count (the model's own, not truncated-and-filtered)
    ref_logprobs: torch.Tensor | None = None  # [B, T] reference model, for the KL penalty
    sampler_logprobs: torch.Tensor | None = None  # [B, T] log pi_sampler(token): the behaviour policy
    unfiltered_logprobs: torch.Tensor | None = None  # [B, T] log pi_theta without the sampler's top-k/top-p filter
    # (with grad), for the KL to the unfiltered reference (None: logprobs are unfiltered)
    zero_is_filtered: bool = False  # a logprob of exactly 0 marks a sampled token the trainer's own top-k/top-p left
    # out (trainer/step.py; in a filtered distribution a kept token's is 0 only where it is the only one kept)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kl_type: str, input_clamp: float | None = None,
               output_clamp: float | None = None, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from r = log ref - log pi [B, T], as NeMo RL's
    calculate_kl: k1 = -r, k2 = r^2 / 2, k3 = e^r - 1 - r (Schulman 2020); r clamped to
    +-input_clamp, the estimate multiplied by `weights` [B, T] (detached where the input clamp acts,
    so the clamp stops both gradients), then clamped to +-output_clamp."""
    log_r = ref_logprobs - logprobs
    if input_clamp is not None:
        clamped = log_r.clamp(-input_clamp, input_clamp)
        if weights is not None:
            weights = torch.where(log_r == clamped, weights, weights.detach())
        log_r = clamped
    if kl_type == "k1":
        kl = -log_r
    elif kl_type == "k2":
        kl = log_r.square() / 2
    elif kl_type == "k3":  # (exp's argument bounded: past float32's range its backward is inf x 0 = NaN even where
        kl = torch.exp(log_r.clamp(max=EXP_MAX)) - 1.0 - log_r  # the output clamp cut the value, a hunt's find)
    else:
        raise ValueError(f"KL type {kl_type!r}: use k1, k2 or k3")
    if weights is not None:
        kl = weights * kl
    return kl.clamp(-output_clamp, output_clamp) if output_clamp is not None else kl


def kl_weights(current: torch.Tensor, t: LossTerms, mask: torch.Tensor, on_policy_approximation: bool
               ) -> torch.Tensor:
    """The weight of each token's KL estimate [B, T], whose gradient makes the KL term's expected
    gradient that of KL(pi_theta || ref) (the tokens come from the policy being optimized: the
    score-function term, as NeMo RL since 2026). Plain: exp(log pi - sg(log pi)), 1 in value.
    On-policy approximation: pi_theta / pi_sampler, not detached (the tokens were drawn by the
    sampler). An overflowed weight is 0, as NeMo RL's; 1 off the mask."""
    if on_policy_approximation:
        if t.sampler_logprobs is None:
            raise ValueError("the on-policy KL approximation needs the sampler's logprobs")
        log_w = (current - t.sampler_logprobs) * mask
        return torch.where(log_w > EXP_MAX, 0.0, torch.exp(log_w.clamp(max=EXP_MAX)))  # (no inf in the backward)
    return torch.nan_to_num(torch.exp(current - current.detach()), nan=0.0)  # (a -inf logprob's: 0)


def policy_loss(t: LossTerms, cfg: LossConfig, *, num_tokens: float, num_seqs: float,
                is_correction: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss of one micro-batch, scaled so that summing over the optimizer batch gives its mean.
    Returns (loss, metrics). `cfg` is the run's loss_fn section, read under its own names by each
    piece below; `is_correction`: whether tokens are weighted by pi_old / pi_sampler
    (loss_fn.use_importance_sampling_correction as resolved for the run: see
    execrl.config.checks.importance_correction)."""
    mask = t.mask.float()
    adv = t.advantages.unsqueeze(1)  # [B, 1]
    ratio, clamped = ratios(t, cfg, mask)  # [B, T] each
    per_token = -surrogate(t, cfg, ratio, clamped, adv)  # [B, T]
    sampler = sampler_weights(t, cfg, mask)
    if sampler is not None and is_correction:
        per_token = per_token * sampler.weight
    kl = kl_term(t, cfg, mask)  # [B, T]
    if kl is not None:
        per_token = per_token + cfg.reference_policy_kl_penalty * kl
    loss = aggregate(per_token, mask, num_tokens, num_seqs, cfg.token_level_loss, cfg.constant_normalizer)
    return loss, loss_metrics(cfg, mask, adv, ratio, kl, sampler)


def surrogate(t: LossTerms, cfg: LossConfig, ratio: torch.Tensor, clamped: torch.Tensor, adv: torch.Tensor
              ) -> torch.Tensor:
    """The objective per token [B, T]: PPO's clipped surrogate, or CISPO's REINFORCE on log pi
    weighted by the clipped ratio (detached); with ratio_clip_c, dual clip (how far a
    negative-advantage token can push is bounded)."""
    if cfg.use_cispo:
        out = clamped.detach() * t.logprobs * adv
    else:
        out = torch.minimum(ratio * adv, clamped * adv)
    if cfg.ratio_clip_c is not None:
        out = torch.where(adv < 0, torch.maximum(out, cfg.ratio_clip_c * adv), out)
    return out


@dataclass
class SamplerWeights:
    """pi_old / pi_sampler, where the sampler's logprobs are known: the importance weights after
    truncation."""

    log_w: torch.Tensor  # [B, T] log(pi_old / pi_sampler), detached; 0 off the mask
    weight: torch.Tensor  # [B, T] truncated (GSPO: one per sequence, expanded)
    truncated: torch.Tensor  # [B, T] bool: where truncation acted
    per_sequence: bool  # GSPO


def sampler_weights(t: LossTerms, cfg: LossConfig, mask: torch.Tensor) -> SamplerWeights | None:
    """The weights of the importance-sampling correction (applied or only logged), None without
    sampler logprobs."""
    if t.sampler_logprobs is None:
        return None
    log_w = ((t.old_logprobs - t.sampler_logprobs) * mask).detach()
    weighed = log_w  # (the metrics read log_w: the mismatch of a filtered token is still a mismatch)
    if t.zero_is_filtered:  # a sampled token the trainer's own filter left out: weight 1, not e^-(its sampler
        # logprob), which GSPO's sum spread over the whole sequence (x1097: a hunt's find)
        weighed = torch.where(t.old_logprobs == 0, torch.zeros_like(log_w), log_w)
    if cfg.sequence_level_importance_ratios:  # GSPO: one weight per sequence, of its whole probability
        raw = torch.exp(weighed.sum(1, keepdim=True)).expand_as(log_w)  # [B, 1] -> [B, T]
    else:
        raw = torch.exp(weighed)
    weight, truncated = importance_weight(overflow_to_zero(raw), cfg.truncated_importance_sampling_type or "tis",
                                          cfg.truncated_importance_sampling_ratio,
                                          cfg.truncated_importance_sampling_ratio_min)
    truncated = truncated | ~torch.isfinite(raw)  # (an overflowed weight, 0 as NeMo RL's, is counted: a hunt's find)
    return SamplerWeights(log_w, weight, truncated, cfg.sequence_level_importance_ratios)


def kl_term(t: LossTerms, cfg: LossConfig, mask: torch.Tensor) -> torch.Tensor | None:
    """Each token's estimate of KL(pi || ref) [B, T] (on the unfiltered logprobs, as NeMo RL's),
    weighted as kl_weights says; None without a KL penalty."""
    if not cfg.reference_policy_kl_penalty or t.ref_logprobs is None:
        return None
    current = t.logprobs if t.unfiltered_logprobs is None else t.unfiltered_logprobs
    return kl_penalty(current, t.ref_logprobs, cfg.reference_policy_kl_type, cfg.kl_input_clamp_value,
                      cfg.kl_output_clamp_value, kl_weights(current, t, mask, cfg.use_on_policy_kl_approximation))


@torch.no_grad()
def loss_metrics(cfg: LossConfig, mask: torch.Tensor, adv: torch.Tensor, ratio: torch.Tensor,
                 kl: torch.Tensor | None, sampler: SamplerWeights | None) -> dict[str, torch.Tensor]:
    """Token means over the mask: where the clip is active, the KL, the ratio; and how far the
    behaviour policy is from the proximal one (logged whether corrected or not)."""
    n = mask.sum().clamp(min=1)
    # the clip is active where the clipped term is the minimum (the token has no gradient): above
    # the band with a positive advantage, below it with a negative one
    clipping = not (cfg.force_on_policy_ratio or cfg.disable_ppo_ratio)
    high = (ratio > 1.0 + cfg.ratio_clip_max) & (adv > 0) & clipping
    low = (ratio < 1.0 - cfg.ratio_clip_min) & (adv < 0) & clipping
    metrics = {
        "clip_frac": ((high | low).float() * mask).sum() / n,
        "clip_frac_high": (high.float() * mask).sum() / n,
        "clip_frac_low": (low.float() * mask).sum() / n,
        # (on the mask's device: a CPU constant's copy to the GPU, where the metrics are summed, would block)
        "kl": (kl * mask).sum() / n if kl is not None else mask.new_zeros(()),
        "ratio_mean": (ratio * mask).sum() / n if clipping else mask.new_ones(()),
        "tokens": mask.sum(),
    }
    if sampler is not None:
        log_w, weight = sampler.log_w, sampler.weight
        metrics["logprob_mismatch"] = (log_w.abs() * mask).sum() / n  # mean |log pi_old - log pi_sampler|
        # k3 of KL(sampler || old)
        metrics["sampler_kl"] = ((torch.exp(log_w.clamp(max=EXP_MAX)) - 1.0 - log_w) * mask).sum() / n
        if not sampler.per_sequence:
            metrics["is_weight"] = (weight * mask).sum() / n  # after truncation, a token mean
        else:  # GSPO: a mean over the sequences with loss tokens, as NeMo RL's sampling_importance_ratio
            has = mask.sum(1) > 0  # ("sequences": the caller weighs this mean by them, not by tokens)
            metrics["is_weight"] = weight[:, 0][has].sum() / has.sum().clamp(min=1)
            metrics["sequences"] = has.sum()
        metrics["is_truncated_frac"] = (sampler.truncated.float() * mask).sum() / n
    return metrics


def ratios(t: LossTerms, cfg: LossConfig, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO ratio pi_theta / pi_old and its clipped value [B, T], as NeMo RL's variants make them:
    force_on_policy_ratio  1 with the gradient of log pi_theta, unclipped
    disable_ppo_ratio      log pi_theta itself (the surrogate is REINFORCE's A log pi)
    sequence-level (GSPO)  exp(mean over the sequence's tokens of log pi_theta - log pi_old), for every token"""
    if cfg.force_on_policy_ratio:
        one = torch.exp(t.logprobs - t.logprobs.detach())
        return one, one
    if cfg.disable_ppo_ratio:
        return t.logprobs, t.logprobs
    log_ratio = t.logprobs - t.old_logprobs  # [B, T]
    if cfg.sequence_level_importance_ratios:
        mean = (log_ratio * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)  # [B, 1]
        log_ratio = mean.expand_as(log_ratio)
    ratio = torch.exp(log_ratio.clamp(max=EXP_MAX))  # (an overflowed ratio: NaN at a 0 advantage, skipping the step)
    return ratio, torch.clamp(ratio, 1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)


def overflow_to_zero(w: torch.Tensor) -> torch.Tensor:
    """An importance weight that overflowed (inf, or nan) is 0, as NeMo RL's: the token or sequence
    leaves the loss."""
    return torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)


def importance_weight(w: torch.Tensor, kind: str, high: float | None, low: float | None):
    """pi_old / pi_sampler per token [B, T], truncated as NeMo RL does: tis clamps the weights to
    [low (0 if null), high]; icepop drops the tokens whose weight is outside [low, high] (weight 0).
    Returns (weight, outside)."""
    if high is None:  # no truncation (a low bound without a high one does nothing, as in NeMo RL)
        return w, torch.zeros_like(w, dtype=torch.bool)
    floor = low or 0.0
    outside = (w > high) | (w < floor)
    if kind == "tis":
        return w.clamp(min=floor, max=high), outside
    if kind == "icepop":
        return torch.where(outside, torch.zeros_like(w), w), outside
    raise ValueError(f"truncated importance sampling type {kind!r}: use tis or icepop")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, num_tokens: float, num_seqs: float, token_level: bool,
              constant_normalizer: int | None) -> torch.Tensor:
    """token level: sum over all tokens / tokens in the optimizer batch; sequence level: each
    sequence's token mean, summed / sequences in the optimizer batch; Dr.GRPO: sum / (constant x
    sequences)."""
    if constant_normalizer:  # (no sequence kept, every sample cut and filtered say: 0, not 0 / 0, a hunt's find)
        return (per_token * mask).sum() / (constant_normalizer * max(num_seqs, 1.0))
    if token_level:
        return (per_token * mask).sum() / max(num_tokens, 1.0)
    per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)  # [B]
    return per_seq.sum() / max(num_seqs, 1.0)
