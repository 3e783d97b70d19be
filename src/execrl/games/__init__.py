"""Two-player zero-sum text games for self-play (SPIRAL), by name, and the opponents that evaluate a
policy; the adversarial code game (writer against predictor) among them, its moves free text."""

from execrl.games.base import FORMAT, Game, forfeit, parse_move, prompt
from execrl.games.code_game import CodeGame
from execrl.games.kuhn_poker import KuhnPoker
from execrl.games.negotiation import Negotiation
from execrl.games.players import PLAYERS, minimax_player, random_player
from execrl.games.tictactoe import TicTacToe

GAMES: dict[str, Game] = {g.name: g for g in (TicTacToe(), KuhnPoker(), Negotiation(), CodeGame())}

__all__ = ["FORMAT", "GAMES", "PLAYERS", "CodeGame", "Game", "KuhnPoker", "Negotiation", "TicTacToe", "forfeit",
           "minimax_player", "parse_move", "prompt", "random_player"]
