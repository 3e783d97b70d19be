"""The two-player zero-sum text games of self-play (SPIRAL): each a small pure module with its
rules, its legal moves and a rendering of the state from one player's side. A game state is
immutable; players 0 and 1 take turns as the game says. A model answers with a move in one fixed
format, `Move: <move>` (the last such line counts); an answer with no legal move in it loses the
game for that player."""

from __future__ import annotations

import random
import re
from typing import Any

MOVE = re.compile(r"(?im)^[ \t]*move[ \t]*:[ \t]*(\S(?:[^\n]*\S)?)[ \t\r]*$")  # a line "Move: <move>" (linear: no
# \s that runs across lines, no lazy group before trailing spaces)
FORMAT = "Answer with your move on its own line, as `Move: <move>`."


class Game:
    """A game's rules (subclass it and add it to GAMES in execrl/games/__init__.py). The methods
    without a body here must be written; the rest are hooks with the behaviour of a game of listed
    moves, which a game overrides where it differs (the code game: free-text moves, its own forfeit
    and metrics, no fixed opponents)."""

    name: str
    roles: tuple[str, str]  # the names of players 0 and 1 (e.g. X and O)
    max_moves: int  # the most moves a match can take, both players' together (grpo.max_rollout_turns must allow them)
    free_text = False  # True: moves are free text that `read` makes sense of (no `Move:` line, no legal-move list)
    opponents: tuple[str, ...] = ("random",)  # the fixed players (games/players.py) its validation matches are
    # against; () for none (the policy is then evaluated on other data)

    def out_of_room(self, player: int) -> int:
        """The player who forfeits when `player`'s context cannot hold the game and another answer: by default
        `player` (its own answers filled it)."""
        return player

    def initial(self, rng: random.Random) -> Any:
        """A new game (cards dealt, values drawn: with `rng`)."""
        raise NotImplementedError

    def to_move(self, state) -> int:
        """The player (0 or 1) whose turn it is."""
        raise NotImplementedError

    def legal_moves(self, state) -> list[str]:
        """The moves the player to move may make, as they are to be written."""
        raise NotImplementedError

    def play(self, state, move):
        """The state after the player to move makes `move` (one of legal_moves, or what `read`
        returned)."""
        raise NotImplementedError

    def is_over(self, state) -> bool:
        raise NotImplementedError

    def returns(self, state) -> tuple[float, float]:
        """Each player's return once the game is over: +1 a win, -1 a loss, 0 a draw (zero-sum)."""
        raise NotImplementedError

    def rules(self, state, player: int) -> str:
        """What `player` is told once, at its first view: the game, its side, what it alone knows
        from the start."""
        raise NotImplementedError

    def render(self, state, player: int, salt: int = 0) -> str:
        """The game now as `player` sees it (its private information only), ending with its legal
        moves when it is to move (`salt`, the match's: the order of a list a game scrambles)."""
        raise NotImplementedError

    # -- hooks

    def read(self, state, text: str, run) -> Any:
        """The move in an answer, None if it has no legal one: its last `Move:` line. A free-text
        game reads its own (`run(program)`: the program's output, run in the sandbox, or None)."""
        return parse_move(text, self.legal_moves(state))

    def forfeit(self, player: int, penalty: float) -> tuple[float, float]:
        """The returns when `player` answers without a legal move."""
        return forfeit(player, penalty)

    def warmup_move(self, state, salt: int, rng: random.Random) -> str:
        """The move of the supervised warm-up's player (tasks/matches.warmup_game): a random legal
        one."""
        return rng.choice(self.legal_moves(state))

    def warmup(self, state, seat: int) -> tuple[list, list[dict]] | None:
        """A whole warm-up reference of the game's own (opening, conversation), or None: a random
        match is played."""
        return None

    def seat_metrics(self, verdict: str, player: int, rejected: str | None) -> list[tuple[str, float]]:
        """The game's own metrics of one seat's episode, (name, value) each (logged by game and
        role)."""
        return []


def parse_move(text: str, legal: list[str]) -> str | None:
    """The legal move in the answer's last `Move:` line (case and spacing as written do not matter),
    else None."""
    found = MOVE.findall(text)
    if not found:
        return None
    said = " ".join(found[-1].strip("`*. ").lower().split())
    return next((m for m in legal if " ".join(m.lower().split()) == said), None)


def forfeit(player: int, penalty: float = 1.0) -> tuple[float, float]:
    """The returns when `player` answers without a legal move: it loses `penalty`, the other wins as
    much."""
    return (-penalty, penalty) if player == 0 else (penalty, -penalty)


def prompt(game: Game, state, player: int, first: bool = True, salt: int = 0) -> str:
    """The message posing `player`'s turn: at its first view the rules and the answer format, then
    the game from its side (later views: that alone, the earlier ones being in its context), its
    legal moves last."""
    now, rules = game.render(state, player, salt), game.rules(state, player)
    if not game.free_text:  # (a game of free-text moves states its own format in its rules)
        rules += f" {FORMAT}"
    return f"{rules}\n{now}" if first else now
