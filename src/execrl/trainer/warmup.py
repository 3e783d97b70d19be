"""Supervised warm-up on reference completions (the built-in default's first few seconds): cross-entropy on the
completion tokens only."""

from __future__ import annotations

import random

import torch

from execrl.tasks import Problem
from execrl.trainer import distributed as dist
from execrl.trainer.rollouts import prompt_ids


def sft_warmup(model, tokenizer, problems: list[Problem], references: dict[str, str], cfg, on_step=None) -> float:
    w = cfg.warmup
    rng = random.Random(cfg.grpo.seed)
    usable = [p for p in problems if p.id in references]
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=w.lr)
    eos = tokenizer.eos_token_id
    loss_value = float("nan")
    model.train()
    for step in range(w.sft_steps):
        batch = dist.this_rank(rng.sample(usable, min(w.batch_size, len(usable))))  # every rank draws the same batch
        prompts = prompt_ids(batch, tokenizer, cfg)
        targets = [tokenizer(references[p.id], add_special_tokens=False)["input_ids"] + [eos] for p in batch]
        width = max(len(p) + len(t) for p, t in zip(prompts, targets))
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        for i, (p, t) in enumerate(zip(prompts, targets)):
            ids[i, :len(p) + len(t)] = torch.tensor(p + t)
            labels[i, len(p):len(p) + len(t)] = torch.tensor(t)  # loss on the completion only
        loss = model(input_ids=ids.to(device), attention_mask=(labels != -100).to(device) | (ids != tokenizer.pad_token_id).to(device),
                     labels=labels.to(device)).loss  # the mean over this rank's target tokens
        num_targets = float((labels[:, 1:] != -100).sum())
        (all_targets,) = dist.sum_floats(num_targets)
        loss = loss * (num_targets / all_targets)  # its share of the mean over all ranks (gradients are summed)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        (loss_value,) = dist.sum_floats(loss.item())
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return loss_value
