"""A simple negotiation: both players hold 5 wood and 5 gold, each valuing a unit of each at private
values of 1-5. Turns alternate, 6 at most: the player to move proposes a trade ("give 2 wood for 1
gold") or answers the one on the table ("accept", "reject"); an accepted trade moves the goods. At
the end the player whose holdings gained more value (by its own values) wins (+1), the other loses;
equal gains draw."""

from __future__ import annotations

import random
from dataclasses import dataclass

from execrl.games.base import Game

GOODS = ("wood", "gold")
START = 5
MAX_TURNS = 6
OFFERS = [f"give {a} {x} for {b} {y}" for x, y in (GOODS, GOODS[::-1]) for a in (1, 2, 3) for b in (1, 2, 3)]


@dataclass(frozen=True)
class Table:
    values: tuple[tuple[int, int], tuple[int, int]]  # per player: (wood, gold) unit values
    holdings: tuple[tuple[int, int], tuple[int, int]] = ((START, START), (START, START))
    offer: tuple[int, str] | None = None  # (the player who proposed, the offer)
    turn: int = 0


def _parse(offer: str) -> tuple[int, str, int, str]:
    _, a, x, _, b, y = offer.split()
    return int(a), x, int(b), y


class Negotiation(Game):
    max_moves = MAX_TURNS
    name = "negotiation"
    roles = ("first", "second")

    def initial(self, rng: random.Random) -> Table:
        return Table(tuple((rng.randint(1, 5), rng.randint(1, 5)) for _ in range(2)))

    def to_move(self, table: Table) -> int:
        return table.turn % 2

    def legal_moves(self, table: Table) -> list[str]:
        if self.is_over(table):
            return []
        if table.offer is not None:  # accept only what one can pay for
            _, _, b, y = _parse(table.offer[1])
            return ["accept", "reject"] if table.holdings[self.to_move(table)][GOODS.index(y)] >= b else ["reject"]
        mine = table.holdings[self.to_move(table)]
        return [o for o in OFFERS if _parse(o)[0] <= mine[GOODS.index(_parse(o)[1])]]

    def play(self, table: Table, move: str) -> Table:
        if move not in self.legal_moves(table):
            raise ValueError(f"illegal negotiation move {move!r}")
        me = self.to_move(table)
        if move in ("accept", "reject"):
            holdings = table.holdings
            proposer, offer = table.offer
            a, x, b, y = _parse(offer)
            if move == "accept":  # the proposer gives a x and gets b y
                h = [list(table.holdings[0]), list(table.holdings[1])]
                h[proposer][GOODS.index(x)] -= a
                h[me][GOODS.index(x)] += a
                h[me][GOODS.index(y)] -= b
                h[proposer][GOODS.index(y)] += b
                holdings = (tuple(h[0]), tuple(h[1]))
            return Table(table.values, holdings, None, table.turn + 1)
        return Table(table.values, table.holdings, (me, move), table.turn + 1)

    def is_over(self, table: Table) -> bool:
        return table.turn >= MAX_TURNS

    def gain(self, table: Table, player: int) -> int:
        v, h = table.values[player], table.holdings[player]
        return sum(v[i] * (h[i] - START) for i in range(2))

    def returns(self, table: Table) -> tuple[float, float]:
        a, b = self.gain(table, 0), self.gain(table, 1)
        return (0.0, 0.0) if a == b else (1.0, -1.0) if a > b else (-1.0, 1.0)

    def rules(self, table: Table, player: int) -> str:
        v = table.values[player]
        return (f"Negotiation, {MAX_TURNS} turns: to you a wood is worth {v[0]} and a gold {v[1]} (the opponent values "
                f"them privately); whoever gains more value by the end wins.")

    def render(self, table: Table, player: int, salt: int = 0) -> str:
        h = table.holdings[player]
        text = f"Turn {table.turn + 1} of {MAX_TURNS}. You hold {h[0]} wood and {h[1]} gold."
        if table.offer is not None:
            who = "You" if table.offer[0] == player else "The opponent"
            text += f" {who} proposed: {table.offer[1]}."
        if not self.is_over(table) and self.to_move(table) == player:
            moves = self.legal_moves(table)
            hint = " (A, B in 1-3; X, Y wood or gold; you must hold what you give)" if table.offer is None else ""
            text += f"\nYour move{hint}. Legal moves: {', '.join(moves) if len(moves) <= 4 else 'give A X for B Y'}"
        return text
