"""The two-player zero-sum text games of self-play (SPIRAL): each a small pure module with its rules, its legal moves
and a rendering of the state from one player's side. A game state is immutable; players 0 and 1 take turns as the
game says. A model answers with a move in one fixed format, `Move: <move>` (the last such line counts); an answer
with no legal move in it loses the game for that player."""

from __future__ import annotations

import random
import re
from typing import Any, Protocol

MOVE = re.compile(r"(?im)^\s*move\s*:\s*(.+?)\s*$")  # a line "Move: <move>"
FORMAT = "Answer with your move on its own line, as `Move: <move>`."


class Game(Protocol):
    name: str
    roles: tuple[str, str]  # the names of players 0 and 1 (e.g. X and O)

    def initial(self, rng: random.Random) -> Any:
        """A new game (cards dealt, values drawn: with `rng`)."""

    def to_move(self, state) -> int:
        """The player (0 or 1) whose turn it is."""

    def legal_moves(self, state) -> list[str]:
        """The moves the player to move may make, as they are to be written."""

    def play(self, state, move: str):
        """The state after the player to move makes `move` (one of legal_moves)."""

    def is_over(self, state) -> bool: ...

    def returns(self, state) -> tuple[float, float]:
        """Each player's return once the game is over: +1 a win, -1 a loss, 0 a draw (zero-sum)."""

    def rules(self, state, player: int) -> str:
        """What `player` is told once, at its first view: the game, its side, what it alone knows from the start."""

    def render(self, state, player: int, salt: int = 0) -> str:
        """The game now as `player` sees it (its private information only), ending with its legal moves when it is to
        move (`salt`, the match's: the order of a list a game scrambles)."""


def parse_move(text: str, legal: list[str]) -> str | None:
    """The legal move in the answer's last `Move:` line (case and spacing as written do not matter), else None."""
    found = MOVE.findall(text)
    if not found:
        return None
    said = " ".join(found[-1].strip("`*. ").lower().split())
    return next((m for m in legal if " ".join(m.lower().split()) == said), None)


def forfeit(player: int, penalty: float = 1.0) -> tuple[float, float]:
    """The returns when `player` answers without a legal move: it loses `penalty`, the other wins as much."""
    return (-penalty, penalty) if player == 0 else (penalty, -penalty)


def prompt(game: Game, state, player: int, first: bool = True, salt: int = 0) -> str:
    """The message posing `player`'s turn: at its first view the rules and the answer format, then the game from its
    side (later views: that alone, the earlier ones being in its context), its legal moves last."""
    now, rules = game.render(state, player, salt), game.rules(state, player)
    if not hasattr(game, "read"):  # (a game of free-text moves states its own format in its rules)
        rules += f" {FORMAT}"
    return f"{rules}\n{now}" if first else now
