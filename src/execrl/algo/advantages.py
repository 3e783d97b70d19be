"""Advantages from rewards, per group of G samples of one prompt. Invalid samples (sandbox failures)
are left out of their group's baseline and statistics, and get advantage 0.

Every estimator is registered by name and called alike, `ADVANTAGES[name](rewards, valid,
**options)` with rewards and valid [num_groups, G] -> advantages [num_groups, G]; each reads the
options it needs (normalize_rewards, use_leave_one_out_baseline; self-play's rae:
roles, all_roles, baselines, sum_over_processes) and ignores the rest."""

from __future__ import annotations

import torch

ADVANTAGES: dict = {}


def register(name: str):
    def wrap(fn):
        ADVANTAGES[name] = fn
        return fn
    return wrap


def all_equal(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """Whether the counted values along the last dimension are all exactly equal, by comparison (a
    standard deviation that rounding leaves at 1e-8 would say no); False where none is counted.
    [..., n] (broadcast) -> [...]"""
    big = torch.finfo(values.dtype).max
    return torch.where(counted, values, -big).amax(-1) == torch.where(counted, values, big).amin(-1)


def flat_groups(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Groups whose valid rewards are all exactly equal (or that have fewer than 2 valid samples):
    no learning signal. [num_groups, G] -> [num_groups]"""
    return all_equal(rewards, valid) | (valid.sum(1) < 2)


def baseline_and_std(rewards: torch.Tensor, valid: torch.Tensor, leave_one_out: bool):
    """Per sample, NeMo RL's baseline and standard deviation: over the group's valid samples, or
    with leave-one-out over the *other* valid samples (both the mean and the unbiased std).
    [num_groups, G] -> two [num_groups, G], in float64.

    The std is exact where NeMo RL's is not: two passes in float64 (NeMo's E[r^2] - E[r]^2 in
    float32 loses the difference of close rewards), and exactly 0 where the samples it is taken over
    are all equal, decided by comparison (their mean, rounded, leaves a std of ~1e-8 that would
    divide an advantage into ~1e5)."""
    size = rewards.shape[1]  # G
    r = rewards.double()
    counts = valid.unsqueeze(1).expand(-1, size, -1)  # [num_groups, i, j]: whether j counts for sample i
    if leave_one_out:
        counts = counts & ~torch.eye(size, dtype=torch.bool, device=rewards.device)
    n = counts.sum(-1)  # [num_groups, G]
    w = counts.double()
    baseline = (w * r.unsqueeze(1)).sum(-1) / n.clamp(min=1)
    spread = (r.unsqueeze(1) - baseline.unsqueeze(-1)) * w  # [num_groups, i, j]
    std = ((spread ** 2).sum(-1) / (n - 1).clamp(min=1)).sqrt()
    std = torch.where((n > 1) & ~all_equal(r.unsqueeze(1), counts), std, torch.zeros_like(std))
    return baseline, std  # (float64: r - baseline in the rewards' float32 lost a difference of one rounding step, a
    # group of [1, 1, 1, 1.0000001] pushing one sample up by 0.11 and none down, a hunt's find)


@register("grpo")
def grpo(rewards: torch.Tensor, valid: torch.Tensor, normalize_rewards: bool = True,
         use_leave_one_out_baseline: bool = True, eps: float = 1e-6, **_) -> torch.Tensor:
    """A_i = r_i - baseline_i, divided by (std_i + eps) where std_i > 0 (NeMo RL: a zero std leaves
    A_i undivided). Flat groups and invalid samples get exactly 0. rewards, valid: [num_groups, G]
    -> advantages [num_groups, G]."""
    baseline, std = baseline_and_std(rewards, valid, use_leave_one_out_baseline)
    adv = rewards.double() - baseline  # [num_groups, G]
    if normalize_rewards:
        adv = torch.where(std > 0, adv / (std + eps), adv)
    keep = valid & ~flat_groups(rewards, valid).unsqueeze(1)
    return torch.where(keep, adv, torch.zeros_like(adv)).to(rewards.dtype)


@register("dr_grpo")
def dr_grpo(rewards: torch.Tensor, valid: torch.Tensor, **_) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i - mean(r), no division by the std (pair with
    loss_fn.constant_normalizer)."""
    baseline, _ = baseline_and_std(rewards, valid, leave_one_out=False)
    keep = valid & ~flat_groups(rewards, valid).unsqueeze(1)
    return torch.where(keep, rewards.double() - baseline, 0.0).to(rewards.dtype)

