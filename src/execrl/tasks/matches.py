"""Self-play's problems: matches of a two-player game (execrl.games), generated from a seed. `selfplay:<game>` train
split: matches the policy plays against itself (two seats each: grpo.num_generations_per_prompt = 2); validation
split: matches against fixed players (random, and for TicTacToe the perfect minimax player), `count` against each,
the policy taking each seat in turn. Problems of kind "game"; the environment is env.multi_turn.kind=game (execrl.envs.game)."""

from __future__ import annotations

import random

from execrl.games import GAMES
from execrl.tasks.problem import DatasetError, Problem
from execrl.tasks.registry import register

COUNTS = {"train": 10_000, "validation": 64}  # matches per split unless `count` says otherwise (train: 10,000 fresh
# matches, more than a CPU run plays; the sampler starts over after them)


def warmup_position(game: str, seed: int) -> tuple[list[str], str]:
    """A position for the supervised warm-up (a few random legal moves into the match) and a random legal move there
    in the answer format: it teaches the format and which moves are legal, not which are good. (The first legal move
    instead taught the tiny model one cell whatever the board.)"""
    g, rng = GAMES[game], random.Random(seed ^ 0x5EED)
    state, opening = g.initial(random.Random(seed)), []
    for _ in range(rng.randrange(0, 5)):
        if g.is_over(state) or len(g.legal_moves(state)) < 2:
            break
        opening.append(rng.choice(g.legal_moves(state)))
        state = g.play(state, opening[-1])
    if g.is_over(state):  # (a game that ended in the opening: the warm-up poses its first move instead)
        opening, state = [], g.initial(random.Random(seed))
    return opening, f"Move: {rng.choice(g.legal_moves(state))}"


def _register(game: str) -> None:
    @register(f"selfplay:{game}", data_dir=None, splits=tuple(COUNTS))
    def load(path, split, report, count: int | None = None, seed: int = 42, opponents: list[str] | None = None, **_):
        """`count` matches (validation: per opponent); seeds from a stream of `seed` per split."""
        if path is not None:
            raise DatasetError(f"selfplay:{game} is generated: it reads no files (drop data.path)")
        rng, n = random.Random(f"{game}-{split}-{seed}"), COUNTS[split] if count is None else count
        if split == "train":  # (with a warm-up position and a legal move there: see warmup_position)
            problems = []
            for i in range(n):
                seed = rng.getrandbits(32)
                opening, move = warmup_position(game, seed)
                problems.append(Problem(f"{game}/train/{i}", [], "game", metadata={
                    "game": game, "seed": seed, "warmup_opening": opening, "reference_completion": move}))
            return problems
        against = opponents or (["random", "minimax"] if game == "tictactoe" else ["random"])
        # interleaved (by opponent, then seat), so that grpo.max_val_samples keeps them balanced
        return [Problem(f"{game}/vs_{o}/{i}", [], "game", metadata={"game": game, "seed": rng.getrandbits(32),
                                                                    "opponent": o, "seat": i % 2})
                for i in range(n) for o in against]


for _name in GAMES:
    _register(_name)
