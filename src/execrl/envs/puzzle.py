"""The sliding puzzle as an environment (NeMo RL's `sliding_puzzle_game`): the model answers each
turn with `<action>...</action>` (the last one counts); a move's reply is one line (the board is
shown again only on `view`); reward 1 when a move solves the puzzle, which ends the episode, else 0.
An answer with no action moves nothing and is not counted; any other action, possible or not, counts
against env.sliding_puzzle.max_moves, after which the next answer ends the episode. The problem
(metadata `grid`) comes from the generated dataset `sliding_puzzle`."""

from __future__ import annotations

from execrl.envs.base import Environment, Step
from execrl.extract import Extracted
from execrl.puzzles import Board, act, intro, render, solved
from execrl.rewards import Reward, Sample
from execrl.tasks import Problem

FORMAT_HINT = "Invalid response format no move made. Try <action></action> like this: <action>your_action</action>"


def last_action(text: str) -> str | None:
    """The text of the last `<action>...</action>` (tags in any case), stripped; None if there is
    none."""
    lower = text.lower()
    start = lower.rfind("<action>")
    end = lower.find("</action>", start + len("<action>")) if start != -1 else -1
    return None if end == -1 else text[start + len("<action>"):end].strip()


class SlidingPuzzleEnv(Environment):
    stop_strings = ["</action>"]

    def __init__(self, cfg, grader=None):
        self.cfg, self.max_moves = cfg, cfg.env.sliding_puzzle.max_moves
        self.problem: Problem | None = None
        self.board: Board | None = None
        self.moves = 0

    def reset(self, problem: Problem) -> list[dict]:
        self.problem, self.moves = problem, 0
        self.board = Board(tuple(tuple(row) for row in problem.metadata["grid"]))
        return [{"role": "user", "content": intro(self.board)}]

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        if self.moves >= self.max_moves:
            return self._end(assistant_text, num_tokens)
        action = last_action(assistant_text)
        if action is None:
            reply = f"\n{render(self.board)}\n\n{FORMAT_HINT}"
        elif action == "view":
            reply = f"\n{render(self.board)}\n\nViewing the board. No move made."
        else:
            self.board, reply = act(self.board, action)
            self.moves += 1  # (possible or not, as NeMo RL counts)
            if solved(self.board):
                return self._end(assistant_text, num_tokens)
            reply = f"\n{reply}\n"
        role = self.cfg.env.multi_turn.observation_role
        return Step(observation=[{"role": role, "content": f"<environment>{reply}</environment>\n"}])

    def finish(self) -> Step:
        """Out of turns or context: unsolved."""
        return self._end("", 0)

    def _end(self, text: str, num_tokens: int) -> Step:
        won = solved(self.board)
        sample = Sample(self.problem, text, Extracted(text, last_action(text) is not None),
                        num_tokens=num_tokens, max_tokens=self.turn_limit,
                        outcome="solved" if won else "unsolved")
        return Step(done=True, reward=Reward(float(won), {"solved": float(won)}), sample=sample)
