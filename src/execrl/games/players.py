"""Opponents for evaluating a self-play policy: a uniformly random legal player, and for TicTacToe a
perfect one (minimax over the whole game tree, cached: a few thousand positions)."""

from __future__ import annotations

import random
from functools import lru_cache

from execrl.games.tictactoe import TicTacToe


def random_player(game, state, rng: random.Random) -> str:
    return rng.choice(game.legal_moves(state))


@lru_cache(maxsize=None)
def _value(board: tuple[str, ...]) -> float:
    """The game's value for the player to move, with perfect play from here (+1 win, 0 draw, -1
    loss)."""
    game = TicTacToe()
    if game.is_over(board):
        r = game.returns(board)
        return r[game.to_move(board)]  # (the player to move, had the game gone on)
    return max(-_value(game.play(board, m)) for m in game.legal_moves(board))


def minimax_player(game, board, rng: random.Random) -> str:
    """A perfect TicTacToe move (ties broken at random)."""
    if not isinstance(game, TicTacToe):
        raise ValueError(f"the minimax player plays TicTacToe, not {game.name}")
    moves = game.legal_moves(board)
    scores = {m: -_value(game.play(board, m)) for m in moves}
    best = max(scores.values())
    return rng.choice([m for m in moves if scores[m] == best])


PLAYERS = {"random": random_player, "minimax": minimax_player}
