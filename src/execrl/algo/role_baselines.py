"""SPIRAL's role-conditioned advantage estimation (Liu et al. 2025): in self-play one policy plays both roles of a
zero-sum game, whose returns differ by role (the first player of TicTacToe wins more often), so each (game, role)
keeps its own baseline, an exponential moving average of that role's returns; a trajectory's advantage is its return
less its role's baseline (execrl.trainer.step.role_advantages, with the means over all processes). The
baselines are state: they go into checkpoints."""

from __future__ import annotations


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
