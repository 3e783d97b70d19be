"""TicTacToe: X (player 0) and O take turns on a 3 x 3 board, cells numbered 1-9 row by row; three
in a row wins."""

from __future__ import annotations

import random
import zlib

from execrl.games.base import Game

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
MARKS = ("X", "O")


class TicTacToe(Game):
    max_moves = 9
    name = "tictactoe"
    roles = MARKS
    opponents = ("random", "minimax")

    def initial(self, rng: random.Random) -> tuple[str, ...]:
        return ("",) * 9  # the cells, "" empty

    def to_move(self, board: tuple[str, ...]) -> int:
        return sum(c != "" for c in board) % 2

    def winner(self, board: tuple[str, ...]) -> int | None:
        for a, b, c in LINES:
            if board[a] and board[a] == board[b] == board[c]:
                return MARKS.index(board[a])
        return None

    def legal_moves(self, board: tuple[str, ...]) -> list[str]:
        return [] if self.is_over(board) else [str(i + 1) for i, c in enumerate(board) if c == ""]

    def play(self, board: tuple[str, ...], move: str) -> tuple[str, ...]:
        i = int(move) - 1
        if board[i] or self.is_over(board):
            raise ValueError(f"illegal TicTacToe move {move!r}")
        return board[:i] + (MARKS[self.to_move(board)],) + board[i + 1:]

    def is_over(self, board: tuple[str, ...]) -> bool:
        return self.winner(board) is not None or all(board)

    def returns(self, board: tuple[str, ...]) -> tuple[float, float]:
        w = self.winner(board)
        return (0.0, 0.0) if w is None else (1.0, -1.0) if w == 0 else (-1.0, 1.0)

    def rules(self, board: tuple[str, ...], player: int) -> str:
        return f"TicTacToe: you play {MARKS[player]}; three in a row wins; empty cells show their number."

    def listed(self, board: tuple[str, ...], salt: int = 0) -> list[str]:
        """The legal moves in the order the rendering lists them: scrambled by the position and the
        match's salt (so that no place in the list is a better move than another, and matches
        differ)."""
        moves = self.legal_moves(board)
        random.Random(zlib.crc32("".join(c or "." for c in board).encode()) ^ salt).shuffle(moves)
        return moves

    def warmup_move(self, board: tuple[str, ...], salt: int, rng: random.Random) -> str:
        """The last move the rendering lists: a copy from a fixed place, which the tiny model learns
        in 150-300 steps (a random legal move all the same, the list being scrambled)."""
        return self.listed(board, salt)[-1]

    def render(self, board: tuple[str, ...], player: int, salt: int = 0) -> str:
        text = "\n".join(" ".join(board[r * 3 + c] or str(r * 3 + c + 1) for c in range(3)) for r in range(3))
        if not self.is_over(board) and self.to_move(board) == player:
            text += f"\nYour move. Legal moves: {', '.join(self.listed(board, salt))}"
        return text
