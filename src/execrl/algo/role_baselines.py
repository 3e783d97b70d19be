"""SPIRAL's role-conditioned advantage estimation (Liu et al. 2025): in self-play one policy plays
both roles of a zero-sum game, whose returns differ by role (the first player of TicTacToe wins more
often), so each (game, role) keeps its own baseline, an exponential moving average of that role's
returns; a trajectory's advantage is its return less its role's baseline (`rae`, with the means over
all processes). The baselines are state: they go into checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from execrl.algo.advantages import register

Role = tuple[str, str]  # (game, role)


class RoleBaselines:
    def __init__(self, decay: float = 0.95):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"the baselines' decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.values: dict[str, float] = {}  # "game/role" -> baseline (0 before any return)

    def update(self, game: str, role: str, mean_return: float) -> float:
        """The role's baseline after a batch whose returns averaged `mean_return`:
        b <- decay * b + (1 - decay) * mean_return."""
        key = f"{game}/{role}"
        self.values[key] = self.decay * self.values.get(key, 0.0) + (1.0 - self.decay) * mean_return
        return self.values[key]

    def state_dict(self) -> dict:
        return {"decay": self.decay, "values": dict(self.values)}

    def load_state_dict(self, state: dict) -> None:
        self.decay, self.values = state["decay"], dict(state["values"])


@register("rae")
def rae(rewards: torch.Tensor, valid: torch.Tensor, roles: Sequence[Role | None], all_roles: Sequence[Role],
        baselines: RoleBaselines, sum_over_processes: Callable[..., list[float]] = lambda *x: list(x),
        **_) -> torch.Tensor:
    """Each episode's return less its (game, role)'s baseline, moved first towards the batch's mean
    return of that role (its sums over all processes: `sum_over_processes`, called alike on every
    process with the sums of each of `all_roles`). `roles`: per sample, the role the policy played,
    None where it has no tokens to train (a seat that never moved, the frozen opponent's): advantage
    0. An invalid sample (a round the sandbox failed on) is in no role's mean, and its advantage is 0, as GRPO leaves
    it out of its group's baseline (it counted as a return of 0 in its role's baseline). rewards, valid: [num_groups,
    G] -> [num_groups, G]"""
    returns = torch.where(valid, rewards, torch.zeros_like(rewards)).reshape(-1).tolist()
    roles = [k if ok else None for k, ok in zip(roles, valid.reshape(-1).tolist())]
    sums = sum_over_processes(*[sum(r for k, r in zip(roles, returns) if k == key) for key in all_roles],
                              *[float(sum(k == key for k in roles)) for key in all_roles])
    n = len(all_roles)
    base = {key: baselines.update(*key, total / count) for key, total, count in zip(all_roles, sums[:n], sums[n:])
            if count}
    adv = [r - base[k] if k else 0.0 for k, r in zip(roles, returns)]
    return torch.tensor(adv, dtype=torch.float32).view_as(rewards)
