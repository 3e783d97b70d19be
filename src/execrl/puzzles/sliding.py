"""The sliding puzzle, as NeMo RL's `sliding_puzzle` game plays it: an n x n grid of tiles 1..n^2-1
and one empty cell (0); a move slides a tile next to the empty cell into it; solved when the tiles
read 1..n^2-1 row by row with the empty cell last. The texts the model reads are NeMo RL's, so that
a policy trained there reads the same game."""

from __future__ import annotations

import random
from dataclasses import dataclass

DIRECTIONS = {"up": (1, 0), "down": (-1, 0), "left": (0, 1), "right": (0, -1)}  # where the tile that moves comes
# from, relative to the empty cell: `up` slides the tile below the empty cell up


@dataclass(frozen=True)
class Board:
    grid: tuple[tuple[int, ...], ...]  # rows of tiles, 0 the empty cell

    @property
    def size(self) -> int:
        return len(self.grid)

    @property
    def empty(self) -> tuple[int, int]:
        return next((r, c) for r, row in enumerate(self.grid) for c, v in enumerate(row) if v == 0)

    def swap(self, r: int, c: int) -> Board:
        """The board after the tile at (r, c) slides into the empty cell."""
        er, ec = self.empty
        rows = [list(row) for row in self.grid]
        rows[er][ec], rows[r][c] = rows[r][c], 0
        return Board(tuple(tuple(row) for row in rows))


def goal(size: int) -> Board:
    return Board(tuple(tuple((r * size + c + 1) % (size * size) for c in range(size)) for r in range(size)))


def solved(board: Board) -> bool:
    return board == goal(board.size)


def generate(rng: random.Random, size: int, shuffle_moves: int) -> Board:
    """The solved board shuffled by `shuffle_moves` random slides of the empty cell (an odd number
    leaves it unsolved: the empty cell ends on the other colour of the chessboard)."""
    board = goal(size)
    for _ in range(shuffle_moves):
        r, c = board.empty
        cells = [(r + dr, c + dc) for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))
                 if 0 <= r + dr < size and 0 <= c + dc < size]
        board = board.swap(*rng.choice(cells))
    return board


def act(board: Board, action: str) -> tuple[Board, str]:
    """One action: `up`/`down`/`left`/`right` (the tile beside the empty cell slides that way) or
    `slide row col` (1-based; the tile must be next to the empty cell). -> (the board after it, the
    reply). A malformed or impossible action leaves the board as it was."""
    er, ec = board.empty
    if action.startswith("slide "):
        try:
            _, row, col = action.split()
            r, c = int(row) - 1, int(col) - 1
        except ValueError:
            return board, "Invalid input format. Use: slide row col"
        if not (0 <= r < board.size and 0 <= c < board.size):
            return board, f"Invalid position. Row/column must be between 1 and {board.size}."
        if abs(r - er) + abs(c - ec) != 1:
            return board, "Tile must be adjacent to the empty space."
        return board.swap(r, c), f"Slid tile {board.grid[r][c]} into the empty space."
    if action in DIRECTIONS:
        dr, dc = DIRECTIONS[action]
        r, c = er + dr, ec + dc
        if not (0 <= r < board.size and 0 <= c < board.size):
            return board, f"Cannot slide {action}."
        return board.swap(r, c), f"Slid tile {board.grid[r][c]} {action}."
    return board, "Unknown command. Type 'help' to see available commands."


def render(board: Board) -> str:
    """The board with row and column numbers, the empty cell blank (NeMo RL's drawing)."""
    width = len(str(board.size * board.size - 1))
    edge = "  +" + "-" * (width + 2) * board.size + "+"
    rows = [f"{i + 1} |" + "".join(" " * (width + 2) if v == 0 else f" {v:>{width}} " for v in row) + "|"
            for i, row in enumerate(board.grid)]
    labels = "    " + "".join(f"{i + 1:^{width + 2}}" for i in range(board.size))
    return "\n".join(["\n", edge, *rows, edge, labels])


def intro(board: Board) -> str:
    """The first message: the rules, the board, the answer format (NeMo RL's
    run_grpo_sliding_puzzle.py prompt)."""
    n = board.size
    return (f"\n===== SLIDING PUZZLE =====\nArrange the {n}x{n} grid by sliding tiles into the empty space.\n"
            f"- The goal is to arrange numbers from 1 to {n * n - 1} in order\n"
            "- Use 'up', 'down', 'left', 'right' to slide in that direction\n"
            "- Use 'view' to see the current state of the board\n\n"
            f"Current Board State:\n{render(board)}\n\n"
            f"Reach the goal state where numbers are ordered 1 through {n * n - 1} with the empty space (0) at the "
            "bottom right.\nValid actions: 'up', 'down', 'left', 'right', or 'slide row col' (e.g., 'slide 1 2').\n"
            "After thinking, output your chosen action on a new line starting with '<action></action>' like this:\n"
            "<action>your_action</action>\nIf you just want to see the board, output <action>view</action>\n"
            "Think carefully step-by-step before acting.\n")
