"""Bradley-Terry reward models: the pairwise loss and a short training loop on (chosen, rejected)
conversations."""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from execrl.rewards.reward_model import RewardModel

Pair = tuple[list[dict], list[dict]]  # (chosen conversation, rejected conversation)


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """-log sigmoid(r_chosen - r_rejected), the mean over pairs. chosen, rejected: [P] scores."""
    return -F.logsigmoid(chosen - rejected).mean()


def train_pairs(rm: RewardModel, pairs: list[Pair], steps: int, lr: float = 1e-3, batch_size: int = 32,
                seed: int = 0) -> float:
    """AdamW steps on batches of pairs drawn from `pairs`, the learning rate decaying linearly to a
    tenth; returns the last batch's loss."""
    encoded = [(rm.encode(c), rm.encode(r)) for c, r in pairs]
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(rm.model.parameters(), lr=lr, weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - 0.9 * i / max(steps, 1))
    rm.model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = rng.sample(encoded, min(batch_size, len(encoded)))
        scores = rm.forward([c for c, _ in batch] + [r for _, r in batch])  # [2P]: the chosen, then the rejected
        loss = bt_loss(scores[:len(batch)], scores[len(batch):])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        decay.step()
    rm.model.eval()
    return float(loss.detach())


def accuracy(rm: RewardModel, pairs: list[Pair]) -> float:
    """The share of pairs whose chosen conversation scores above its rejected one."""
    chosen, rejected = rm([c for c, _ in pairs]), rm([r for _, r in pairs])
    return sum(c > r for c, r in zip(chosen, rejected)) / max(len(pairs), 1)
