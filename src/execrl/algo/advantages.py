"""Advantages from rewards, per group of G samples of one prompt. Invalid samples (sandbox failures) are left out
of their group's baseline and statistics, and get advantage 0."""

from __future__ import annotations

import torch

ADVANTAGES: dict = {}


def register(name: str):
    def wrap(fn):
        ADVANTAGES[name] = fn
        return fn
    return wrap


def _group_stats(rewards: torch.Tensor, valid: torch.Tensor):
    v = valid.float()  # [num_groups, G]
    n = v.sum(1, keepdim=True)  # [num_groups, 1]
    total = (rewards * v).sum(1, keepdim=True)  # [num_groups, 1]
    mean = total / n.clamp(min=1)
    var = (((rewards - mean) * v) ** 2).sum(1, keepdim=True) / (n - 1).clamp(min=1)  # unbiased, like torch.std
    return v, n, total, mean, var.sqrt()


@register("grpo")
def grpo(rewards: torch.Tensor, valid: torch.Tensor, normalize_rewards: bool = True,
         use_leave_one_out_baseline: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - baseline_i) / (std + eps): baseline the group mean, or the mean of the *other* samples (LOO).
    rewards, valid: [num_groups, G] -> advantages [num_groups, G]."""
    v, n, total, mean, std = _group_stats(rewards, valid)
    baseline = (total - rewards * v) / (n - 1).clamp(min=1) if use_leave_one_out_baseline else mean
    adv = rewards - baseline  # [num_groups, G]
    if normalize_rewards:
        adv = adv / (std + eps)
    return torch.where(valid & (n > 1), adv, torch.zeros_like(adv))


@register("dr_grpo")
def dr_grpo(rewards: torch.Tensor, valid: torch.Tensor, **_) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i - mean(r), no division by the std (pair with loss_fn.constant_normalizer)."""
    v, n, _, mean, _ = _group_stats(rewards, valid)
    return torch.where(valid & (n > 1), rewards - mean, torch.zeros_like(rewards))


def informative_groups(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """DAPO dynamic sampling: groups whose valid rewards are not all equal (the others carry no gradient).
    [num_groups, G] -> [num_groups] bool."""
    _, n, _, _, std = _group_stats(rewards, valid)
    return ((std > 0) & (n > 1)).squeeze(1)
