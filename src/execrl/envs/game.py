"""Self-play games as environments: a match of a two-player game (execrl.games) is two episodes, one
per seat, sharing the match. Each seat's trajectory holds its own turns (trained on) and, as
observation tokens, the game as its side sees it after the opponent's move. The episode runner
generates for a seat only when it is `ready` (its turn) and first hands it the news since it last
looked (`observe`). An answer with no legal move loses the match for that seat
(`env.game.illegal_move_penalty`) and ends it for both, as does a seat's running out of context (the seat
the game charges for it loses); running out of turns is a draw. A
game of free-text moves reads them itself (the code game: the writer's program, run in the sandbox
by `_output`).

A problem names the match: metadata {game, seed} and, to evaluate against a fixed player, {opponent:
random | minimax, seat}: the opponent then moves inside `step`, and the policy's seat is ready at
each of its turns. A seat of its own (no match given) also plays the problem's `warmup_opening`
first: the supervised warm-up's positions. With a frozen opponent (env.game.opponent: snapshot |
model) one seat of each self-play match is `frozen`: the runner has the opponent's generator play
it, and it is not trained on."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from execrl.envs.base import Environment, Step
from execrl.extract import Extracted
from execrl.games import GAMES, PLAYERS, Game, prompt
from execrl.rewards import Reward, Sample, outcome
from execrl.sandbox import Limits, ProgramResult, Verdict
from execrl.sandbox.repeat import repeatable_output
from execrl.tasks import Problem


@dataclass
class Match:
    """One game between two seats; `returns` once it is over (by the rules, a forfeit, or out of
    turns)."""
    game: Game
    state: object
    rng: random.Random  # the scripted opponent's choices
    salt: int = 0  # the order of a list of moves the game scrambles (the match's seed)
    returns: tuple[float, float] | None = None
    illegal: int | None = None  # the seat that forfeited
    moves: int = 0
    seen: list[int] = field(default_factory=lambda: [0, 0])  # per seat: the move count when it last saw the game
    played: list[int] = field(default_factory=lambda: [0, 0])  # per seat: the moves it made
    sandbox_failed: bool = False  # the sandbox could not run a move's program (twice): no seat's fault, none scored

    @classmethod
    def of(cls, problem: Problem) -> Match:
        game, rng = GAMES[problem.metadata["game"]], random.Random(problem.metadata["seed"])
        return cls(game, game.initial(rng), rng, salt=problem.metadata["seed"])

    def over(self) -> bool:
        return self.returns is not None

    def move(self, seat: int, move, penalty: float) -> None:
        if move is None:
            self.returns, self.illegal = self.game.forfeit(seat, penalty), seat
            return
        self.state, self.moves = self.game.play(self.state, move), self.moves + 1
        self.played[seat] += 1
        if self.game.is_over(self.state):
            self.returns = self.game.returns(self.state)

    def view(self, seat: int) -> list[dict]:
        """The game as `seat` sees it now (with the rules, until its first move: its prompt)."""
        self.seen[seat] = self.moves
        return [{"role": "user", "content": prompt(self.game, self.state, seat, not self.played[seat], self.salt)}]


class GameSeat(Environment):
    """One seat of a match: the environment of one player's episode."""

    whole_answers = True  # a seat whose context cannot hold a whole answer ends there (out_of_room), not cut

    def __init__(self, cfg, grader=None, match: Match | None = None, seat: int | None = None, frozen: bool = False):
        self.cfg, self.grader, self.match, self.seat = cfg, grader, match, seat
        self.frozen = frozen  # played by the frozen opponent (env.game.opponent): not trained, in no baseline
        self.rejected: str | None = None  # (a free-text game) why its move was not valid: see CodeGame.REJECTIONS
        self.program: str | None = None  # (the code game) the writer's program
        self.stop_strings: list[str] = []
        self.problem: Problem | None = None
        self.opponent: str | None = None

    @property
    def role(self) -> tuple[str, str]:
        """(game, role): e.g. ("tictactoe", "X"), what the role baselines and metrics are kept
        by."""
        return self.match.game.name, self.match.game.roles[self.seat]

    @property
    def ready(self) -> bool:
        """Whether this seat is to move now."""
        m = self.match
        return not m.over() and m.game.to_move(m.state) == self.seat

    @property
    def constraint(self) -> tuple[str, str] | None:
        """With env.game.guided_moves, this seat's next answer held to `Move: <one of its legal
        moves>` (a regex for guided decoding: execrl.trainer.rollouts.guide_for), else None."""
        m = self.match
        if not self.cfg.env.game.guided_moves or m is None or m.over() or m.game.free_text:
            return None
        return "regex", "Move: (" + "|".join(re.escape(move) for move in m.game.legal_moves(m.state)) + ")"

    def reset(self, problem: Problem) -> list[dict]:
        self.problem, self.opponent = problem, problem.metadata.get("opponent")
        if self.match is None:  # a seat of its own: against a fixed opponent, or a warm-up position
            self.match = Match.of(problem)
            for move in problem.metadata.get("warmup_opening", []):
                self.match.move(self.match.game.to_move(self.match.state), move, 0.0)
            self.seat = problem.metadata.get("seat", self.match.game.to_move(self.match.state))
        self._opponent_moves()
        return self.match.view(self.seat)

    def observe(self) -> list[dict]:
        """The game as this seat sees it now, if it changed since it last looked (the opponent
        moved)."""
        return self.match.view(self.seat) if self.match.seen[self.seat] != self.match.moves else []

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        m = self.match
        m.move(self.seat, self.read(assistant_text), self.cfg.env.game.illegal_move_penalty)
        m.seen[self.seat] = m.moves
        self._opponent_moves()
        if m.over():
            return self._end(assistant_text, num_tokens)
        return Step(observation=self.observe())  # (self-play: nothing yet, the opponent's move comes by observe)

    def read(self, text: str):
        """The move in an answer (None: no legal one): a `Move:` line, or a free-text game's own
        reading (the code game's program, run in the sandbox: execrl.sandbox.repeat)."""
        m = self.match
        move = m.game.read(m.state, text, self._output)
        if not m.game.free_text:
            return move
        self.rejected = self.rejected or ("no_program" if move is None else None)
        return move

    def _output(self, program: str) -> str | None:
        g, code = self.cfg.env.game, self.cfg.env.code
        ran = repeatable_output(self.grader, program, Limits(timeout_s=code.timeout_s, memory_mb=code.memory_mb),
                                g.max_program_chars, g.max_output_chars)
        self.program, self.rejected = program, None if ran.output is not None else ran.why
        if ran.why == "failed" and ran.verdict == Verdict.INFRA_ERROR.value:
            self.match.sandbox_failed = True
        return ran.output

    def metrics(self, sample: Sample, reward: Reward, turns: int) -> list[tuple[str, float]]:
        """By game and role: the seat's return, win and forfeit rates, the moves it made, and the
        game's own (the code game's valid-program rate and prediction accuracy), over the episodes
        in which the seat played; against a fixed opponent, by game and opponent: win, draw, loss,
        forfeit (each a rate), and the win rate by role."""
        game, verdict = self.problem.metadata["game"], outcome(sample)
        if self.opponent is not None:
            role = self.match.game.roles[self.seat]
            return [*((f"{game}/{kind}_rate_vs_{self.opponent}", float(verdict == kind))
                      for kind in ("win", "draw", "loss", "illegal")),
                    (f"{game}/{role}/win_rate_vs_{self.opponent}", float(verdict == "win"))]
        if verdict == "unplayed" or self.frozen:  # (the other seat ended the match before this one moved; the frozen
            return []                             # opponent's seat)
        role = "/".join(self.role)
        own = self.match.game.seat_metrics(verdict, self.seat, self.rejected)
        return [(f"{role}/reward_mean", reward.total), (f"{role}/win_rate", float(verdict == "win")),
                (f"{role}/illegal_rate", float(verdict == "illegal")), (f"{role}/moves_mean", float(turns)),
                *((f"{role}/{name}", value) for name, value in own)]

    def finish(self) -> Step:
        """The episode ends without another move of this seat's: the match is over (the other seat
        ended it), or the turns ran out (a draw)."""
        if not self.match.over():
            self.match.returns = (0.0, 0.0)
        return self._end("", 0)

    def out_of_room(self) -> Step:
        """This seat's context cannot hold the game's news and a whole answer: the seat the game charges for it
        forfeits, as a chess player out of time (a draw let a losing seat pad its answers into one)."""
        m = self.match
        if not m.over():
            m.move(m.game.out_of_room(self.seat), None, self.cfg.env.game.illegal_move_penalty)
        return self._end("", 0)

    def _opponent_moves(self) -> None:
        m = self.match
        while self.opponent is not None and not m.over() and m.game.to_move(m.state) != self.seat:
            m.move(1 - self.seat, PLAYERS[self.opponent](m.game, m.state, m.rng), 0.0)

    def _end(self, text: str, num_tokens: int) -> Step:
        m, mine = self.match, self.match.returns[self.seat]
        verdict = ("infra_error" if m.sandbox_failed else "illegal" if m.illegal == self.seat else
                   "unplayed" if not m.played[self.seat] else "win" if mine > 0 else "loss" if mine < 0 else "draw")
        # (a round the sandbox failed on is no seat's forfeit: it read "illegal" in the records and the metrics)
        sample = Sample(self.problem, text, Extracted(text, True, self.program), num_tokens=num_tokens,
                        max_tokens=self.turn_limit, outcome=verdict)
        if m.sandbox_failed:  # (as a single-turn sample the sandbox failed on: left out of the reward and baseline)
            sample.result = ProgramResult(Verdict.INFRA_ERROR, [], "the sandbox failed to run the writer's program")
            return Step(done=True, reward=Reward(None), sample=sample)
        return Step(done=True, reward=Reward(mine, {"return": mine}), sample=sample)


def seats(cfg, grader, problem: Problem, n: int, frozen: bool = False) -> list[GameSeat]:
    """The environments of a problem's n episodes: against a fixed opponent, n matches of one seat
    each; in self-play (n = 2), the two seats of one match, one of them the frozen opponent's with
    `frozen`: the policy takes the seats of env.game.policy_roles in turn, by the match's seed."""
    if problem.metadata.get("opponent") is not None:
        return [GameSeat(cfg, grader) for _ in range(n)]
    if n != 2:
        raise ValueError(f"self-play plays each match with its two seats: set grpo.num_generations_per_prompt=2 "
                         f"(got {n})")
    match = Match.of(problem)
    mine = [i for i, role in enumerate(match.game.roles) if role in (cfg.env.game.policy_roles or match.game.roles)]
    policy = mine[problem.metadata["seed"] % len(mine)] if frozen else None
    return [GameSeat(cfg, grader, match, i, frozen=frozen and i != policy) for i in (0, 1)]
