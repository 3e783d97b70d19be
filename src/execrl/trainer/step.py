"""From scored rollouts to an optimizer update: advantages, token log-probabilities, micro-batched loss."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from execrl.algo import ADVANTAGES, LossTerms, informative_groups, policy_loss
from execrl.config import BatchPlan, MasterConfig
from execrl.trainer.rollouts import Rollouts


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [N, L] prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, L]
    loss_mask: torch.Tensor  # [N, L-1] 1 where the next token is one the model sampled (and counts)
    advantages: torch.Tensor  # [N]
    old_logprobs: torch.Tensor | None = None  # [N, L-1]
    ref_logprobs: torch.Tensor | None = None  # [N, L-1]


def advantages(rollouts: Rollouts, cfg: MasterConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(advantages [N], rewards [num_groups, G], valid [num_groups, G]); dynamic sampling zeroes flat groups."""
    g = rollouts.group_size
    rewards = torch.tensor([r.total if r.valid else 0.0 for r in rollouts.rewards]).view(-1, g)
    valid = torch.tensor([r.valid for r in rollouts.rewards]).view(-1, g)
    adv = ADVANTAGES[cfg.grpo.advantage](rewards, valid, normalize_rewards=cfg.grpo.normalize_rewards,
                                         use_leave_one_out_baseline=cfg.grpo.use_leave_one_out_baseline)
    if cfg.grpo.dynamic_sampling.enabled:
        adv = adv * informative_groups(rewards, valid).unsqueeze(1)
    return adv.reshape(-1), rewards, valid


def build_batch(rollouts: Rollouts, adv: torch.Tensor, pad_id: int, overlong_filtering: bool) -> TrainBatch:
    seqs = [p + c.ids for p, c in zip(rollouts.prompt_ids, rollouts.completions)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros(len(seqs), width - 1)
    for i, (p, c) in enumerate(zip(rollouts.prompt_ids, rollouts.completions)):
        ids[i, :len(p) + len(c.ids)] = torch.tensor(p + c.ids)
        attn[i, :len(p) + len(c.ids)] = 1
        if not (overlong_filtering and c.truncated):
            mask[i, len(p) - 1:len(p) - 1 + len(c.ids)] = 1.0  # position t predicts token t + 1
    return TrainBatch(ids, attn, mask, adv)


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(token_{t+1} | tokens_<=t) and the entropy at each position: ([B, L-1], [B, L-1])."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # [B, L-1, V]
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [B, L-1]
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)  # [B, L-1]
    return picked, entropy


@torch.no_grad()
def score_tokens(model, batch: TrainBatch, micro: int) -> torch.Tensor:
    device = next(model.parameters()).device
    parts = [token_logprobs(model, batch.input_ids[i:i + micro].to(device), batch.attention_mask[i:i + micro].to(device))[0]
             for i in range(0, len(batch.input_ids), micro)]
    return torch.cat(parts).cpu()


def optimize(model, optimizer, scheduler, batch: TrainBatch, cfg: MasterConfig, plan: BatchPlan) -> dict:
    """One or more optimizer steps over the batch (whole groups each), micro-batched with gradient accumulation."""
    device, loss_cfg = next(model.parameters()).device, cfg.loss_fn
    stats = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0, "skipped_steps": 0}
    model.train()
    for start in range(0, len(batch.input_ids), plan.global_batch):
        rows = slice(start, start + plan.global_batch)
        num_tokens, num_seqs = batch.loss_mask[rows].sum().item(), float(plan.global_batch)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for m in range(start, min(start + plan.global_batch, len(batch.input_ids)), plan.micro_batch):
            sl = slice(m, min(m + plan.micro_batch, start + plan.global_batch))
            ids, attn = batch.input_ids[sl].to(device), batch.attention_mask[sl].to(device)
            logp, entropy = token_logprobs(model, ids, attn)
            mask = batch.loss_mask[sl].to(device)
            terms = LossTerms(logp, batch.old_logprobs[sl].to(device), batch.advantages[sl].to(device), mask,
                              None if batch.ref_logprobs is None else batch.ref_logprobs[sl].to(device))
            loss, metrics = policy_loss(terms, num_tokens=num_tokens, num_seqs=num_seqs, clip_low=loss_cfg.ratio_clip_min,
                                        clip_high=loss_cfg.ratio_clip_max, dual_clip=loss_cfg.ratio_clip_c,
                                        kl_coef=loss_cfg.reference_policy_kl_penalty, kl_type=loss_cfg.reference_policy_kl_type,
                                        token_level=loss_cfg.token_level_loss, constant_normalizer=loss_cfg.constant_normalizer)
            loss.backward()
            step_loss += loss.item()
            share = mask.sum().item() / max(num_tokens, 1.0)
            for k in ("clip_frac", "kl"):
                stats[k] += metrics[k].item() * share / plan.optimizer_steps_per_rollout
            stats["entropy"] += (entropy * mask).sum().item() / max(num_tokens, 1.0) / plan.optimizer_steps_per_rollout
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.policy.max_grad_norm).item()
        if not (math.isfinite(grad_norm) and math.isfinite(step_loss)):
            optimizer.zero_grad(set_to_none=True)  # a NaN/inf step is skipped, never applied
            stats["skipped_steps"] += 1
            continue
        optimizer.step()
        scheduler.step()
        stats["loss"] += step_loss / plan.optimizer_steps_per_rollout
        stats["grad_norm"] += grad_norm / plan.optimizer_steps_per_rollout
    model.eval()
    return stats
