"""Environments: what an episode is. `reset(problem) -> messages`, then `step(assistant_text) -> Step` until done
(base.py). Single-turn code and math tasks are environments of one step, so the trainer has one path; the code
interpreter and unit-test feedback environments take up to `grpo.max_rollout_turns` model turns."""

from __future__ import annotations

from execrl.envs.base import Environment, Step
from execrl.envs.chat import ChatTemplateError, TurnRenderer
from execrl.envs.interpreter import InterpreterEnv
from execrl.envs.single_turn import SingleTurnEnv
from execrl.envs.trajectory import Segment, Trajectory
from execrl.envs.unit_tests import UnitTestsEnv

ENVIRONMENTS = {"single_turn": SingleTurnEnv, "interpreter": InterpreterEnv, "unit_tests": UnitTestsEnv}


def make_env(cfg, grader) -> Environment:
    """A fresh environment for one episode, of the kind `env.multi_turn.kind` names."""
    return ENVIRONMENTS[cfg.env.multi_turn.kind](cfg, grader)


__all__ = ["ENVIRONMENTS", "ChatTemplateError", "Environment", "InterpreterEnv", "Segment", "SingleTurnEnv", "Step",
           "Trajectory", "TurnRenderer", "UnitTestsEnv", "make_env"]
