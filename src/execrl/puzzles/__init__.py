"""Single-player puzzles played over several turns (NeMo RL's sliding puzzle): pure rules, no model.
The episode's environment is execrl.envs.puzzle; the problems come from the generated dataset
`sliding_puzzle`."""

from execrl.puzzles.sliding import Board, act, generate, intro, render, solved

__all__ = ["Board", "act", "generate", "intro", "render", "solved"]
