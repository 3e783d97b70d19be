"""Self-play's problems: matches of a two-player game (execrl.games), generated from a seed.
`selfplay:<game>` train split: matches the policy plays against itself (two seats each:
grpo.num_generations_per_prompt = 2), each with a warm-up match from one seat's side (warmup_game);
validation split: matches against fixed players (random, and for TicTacToe the perfect minimax
player: each game's `opponents`), `count` against each, the policy taking each seat in turn (the
code game has none: evaluate it on code, e.g. data.validation: mbpp). Problems of kind "game"; the
environment is env.multi_turn.kind=game (execrl.envs.game)."""

from __future__ import annotations

import random

from execrl.games import GAMES, prompt
from execrl.tasks.problem import DatasetError, Problem
from execrl.tasks.registry import register

COUNTS = {"train": 10_000, "validation": 64}  # matches per split unless `count` says otherwise (train: 10,000 fresh
# matches, more than a CPU run plays; the sampler starts over after them)


def warmup_game(game: str, seed: int) -> tuple[list[str], list[dict]]:
    """A whole match for the supervised warm-up, both players moving at random among the legal
    moves: (the opening: the moves before the warm-up's seat first moves, its first view; the
    conversation after that view: the seat's moves in the answer format, each but the last followed
    by the game as it sees it after the opponent's reply). It teaches the format and which moves are
    legal at every stage of a match, with the earlier boards in the context as in self-play, not
    which moves are good. Each move is the game's `warmup_move` (a random legal one; TicTacToe: the
    last it lists). The code game gives its own: the brief's example program, written (the writer)
    or predicted (the predictor)."""
    g, rng = GAMES[game], random.Random(seed ^ 0x5EED)
    state = g.initial(random.Random(seed))
    seat = rng.randrange(2)
    own = g.warmup(state, seat)  # a game of free-text moves gives its own (the code game: the brief's example)
    if own is not None:
        return own
    opening: list[str] = []
    while not g.is_over(state) and g.to_move(state) != seat:
        opening.append(rng.choice(g.legal_moves(state)))
        state = g.play(state, opening[-1])
    turns: list[dict] = []
    news = False  # whether the opponent moved since the seat last saw the game
    while not g.is_over(state):
        if g.to_move(state) != seat:
            state, news = g.play(state, rng.choice(g.legal_moves(state))), True
            continue
        if news and turns:
            turns.append({"role": "user", "content": prompt(g, state, seat, first=False, salt=seed)})
        move, news = g.warmup_move(state, seed, rng), False
        turns.append({"role": "assistant", "content": f"Move: {move}"})
        state = g.play(state, move)
    return opening, turns


def _register(game: str) -> None:
    splits = tuple(COUNTS) if GAMES[game].opponents else ("train",)

    @register(f"selfplay:{game}", data_dir=None, splits=splits, eval_only=("validation",), kind="game")
    def load(path, split, report, count: int | None = None, seed: int = 42, opponents: list[str] | None = None, **_):
        """`count` matches (validation: per opponent); seeds from a stream of `seed` per split."""
        if path is not None:
            raise DatasetError(f"selfplay:{game} is generated: it reads no files (drop its path, or name your file's "
                               "dataset jsonl)")
        rng, n = random.Random(f"{game}-{split}-{seed}"), COUNTS[split] if count is None else count
        if split == "train":  # (with a warm-up match: see warmup_game)
            problems = []
            for i in range(n):
                seed = rng.getrandbits(32)
                opening, turns = warmup_game(game, seed)
                problems.append(Problem(f"{game}/train/{i}", [], "game", metadata={
                    "game": game, "seed": seed, "warmup_opening": opening, "reference_turns": turns}))
            return problems
        against = opponents or list(GAMES[game].opponents)
        # interleaved (by opponent, then seat), so that grpo.max_val_samples keeps them balanced
        return [Problem(f"{game}/vs_{o}/{i}", [], "game", metadata={"game": game, "seed": rng.getrandbits(32),
                                                                    "opponent": o, "seat": i % 2})
                for i in range(n) for o in against]


for _name in GAMES:
    _register(_name)
