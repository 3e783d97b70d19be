"""Environments: what an episode is. `reset(problem) -> messages`, then `step(assistant_text) ->
Step` until done (base.py). Single-turn code and math tasks are environments of one step, so the
trainer has one path; the code interpreter and unit-test feedback environments take up to
`grpo.max_rollout_turns` model turns. Each is found by its name in `env.multi_turn.kind`
(ENVIRONMENTS; `register` adds one), or a researcher's own by import path."""

from __future__ import annotations

from execrl.envs.base import Environment, Step, called
from execrl.envs.chat import ChatTemplateError, TurnRenderer
from execrl.envs.game import GameSeat, seats
from execrl.envs.interpreter import InterpreterEnv
from execrl.envs.puzzle import SlidingPuzzleEnv
from execrl.envs.single_turn import SingleTurnEnv
from execrl.envs.trajectory import Segment, Trajectory
from execrl.envs.unit_tests import UnitTestsEnv
from execrl.plugins import PluginError, is_import_path, load_object

ENVIRONMENTS: dict[str, type[Environment]] = {
    "single_turn": SingleTurnEnv, "interpreter": InterpreterEnv, "unit_tests": UnitTestsEnv, "game": GameSeat,
    "sliding_puzzle": SlidingPuzzleEnv}


def register(name: str):
    """Class decorator: the environment of `env.multi_turn.kind: <name>`."""
    def add(cls: type[Environment]) -> type[Environment]:
        environment_class(cls, f"register({name!r})")
        ENVIRONMENTS[name] = cls
        return cls
    return add


def environment_class(kind, key: str = "env.multi_turn.kind") -> type[Environment]:
    """The class `kind` names: a registered name, an import path (module:Class,
    path/to/file.py:Class), or the class itself; it must subclass Environment (one clear error
    otherwise)."""
    cls = kind
    if isinstance(kind, str):
        if kind in ENVIRONMENTS:
            return ENVIRONMENTS[kind]
        if not is_import_path(kind):
            raise PluginError(f"{key}={kind!r}: use one of {', '.join(ENVIRONMENTS)}, or name your own class as "
                              "module:Class or path/to/file.py:Class")
        cls = load_object(kind, key)
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise PluginError(f"{key}={kind!r}: {cls!r} is not an environment class: subclass "
                          "execrl.envs.Environment (see examples/second_chance_env.py)")
    return cls


def make_env(cfg, grader, problem=None) -> Environment:
    """A fresh environment for one episode (of `problem`), of the kind `env.multi_turn.kind` names;
    beside self-play, a code or math problem's is single-turn (e.g. MBPP, evaluated while a game
    trains)."""
    kind = cfg.env.multi_turn.kind
    if problem is not None and problem.kind == "puzzle":
        kind = "sliding_puzzle"
    elif kind in ("game", "sliding_puzzle") and problem is not None and problem.kind not in ("game", "puzzle"):
        kind = "single_turn"
    return environment_class(kind)(cfg, grader)


def make_envs(cfg, grader, problem, n: int, frozen: bool = False) -> list[Environment]:
    """The environments of a problem's n episodes: n fresh ones, or for a game the seats of its
    match(es) (`frozen`: one seat of each self-play match is the frozen opponent's)."""
    if problem.kind == "game":
        return seats(cfg, grader, problem, n, frozen)
    return [make_env(cfg, grader, problem) for _ in range(n)]


__all__ = ["ENVIRONMENTS", "ChatTemplateError", "Environment", "GameSeat", "InterpreterEnv", "Segment",
           "SingleTurnEnv", "SlidingPuzzleEnv", "Step", "Trajectory", "TurnRenderer", "UnitTestsEnv",
           "called", "environment_class", "make_env", "make_envs", "register"]
