"""Kuhn poker: a deck of J < Q < K, one card each, one more unseen; both ante 1. Player 0 checks or
bets 1; facing a bet a player calls or folds; after check-check or a call the higher card wins the
pot. Returns are the chips won (+-1 or +-2), zero-sum."""

from __future__ import annotations

import random
from dataclasses import dataclass

from execrl.games.base import Game

CARDS = ("J", "Q", "K")
# history of actions -> the moves open to the player to move ("" : player 0's first action)
OPEN = {"": ("check", "bet"), "check": ("check", "bet"), "bet": ("call", "fold"), "check bet": ("call", "fold")}


@dataclass(frozen=True)
class Hand:
    cards: tuple[str, str]  # player 0's, player 1's
    history: tuple[str, ...] = ()


class KuhnPoker(Game):
    max_moves = 3  # check, bet, call or fold
    name = "kuhn_poker"
    roles = ("first", "second")

    def initial(self, rng: random.Random) -> Hand:
        a, b = rng.sample(CARDS, 2)
        return Hand((a, b))

    def to_move(self, hand: Hand) -> int:
        return len(hand.history) % 2

    def legal_moves(self, hand: Hand) -> list[str]:
        return [] if self.is_over(hand) else list(OPEN[" ".join(hand.history)])

    def play(self, hand: Hand, move: str) -> Hand:
        if move not in self.legal_moves(hand):
            raise ValueError(f"illegal Kuhn poker move {move!r}")
        return Hand(hand.cards, hand.history + (move,))

    def is_over(self, hand: Hand) -> bool:
        return " ".join(hand.history) not in OPEN

    def returns(self, hand: Hand) -> tuple[float, float]:
        h = hand.history
        if h[-1] == "fold":  # the folder loses its ante (1)
            folder = len(h) - 1 & 1
            return (-1.0, 1.0) if folder == 0 else (1.0, -1.0)
        stake = 2.0 if "call" in h else 1.0
        high = 0 if CARDS.index(hand.cards[0]) > CARDS.index(hand.cards[1]) else 1
        return (stake, -stake) if high == 0 else (-stake, stake)

    def rules(self, hand: Hand, player: int) -> str:
        return (f"Kuhn poker (cards J < Q < K, one each; both anted 1 chip; a bet or call is 1 more; the higher card "
                f"wins unless someone folds). Your card: {hand.cards[player]}.")

    def render(self, hand: Hand, player: int, salt: int = 0) -> str:
        said = "; ".join(f"{'you' if i % 2 == player else 'opponent'}: {m}" for i, m in enumerate(hand.history))
        text = f"So far: {said or 'nothing'}."
        if not self.is_over(hand) and self.to_move(hand) == player:
            text += f"\nYour move. Legal moves: {', '.join(self.legal_moves(hand))}"
        return text
