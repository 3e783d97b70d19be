"""The environment protocol: `reset(problem) -> messages`, then `step(assistant_text) -> Step` until `done`.

An episode is a conversation. The environment poses the problem (`reset`), reads each of the model's turns
(`step`) and answers with messages of its own (an interpreter's output, failing tests) until it is done, when it
says what the episode earned. Environments deal in text only: the token ids the model is trained on are built
by the episode runner (execrl.trainer.rollouts) from the sampler's tokens and the chat template, never by
re-tokenizing this conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from execrl.rewards import Reward, Sample, grade_samples, score
from execrl.tasks import Problem


@dataclass
class Step:
    """What the environment says after one model turn: (observation, reward, done, info) of the usual protocol."""

    observation: list[dict] = field(default_factory=list)  # messages it adds (role, content); empty when done
    done: bool = False
    reward: Reward | None = None  # when done: the episode's reward (invalid when the sandbox failed)
    sample: Sample | None = None  # when done: the graded final submission (code, verdict)
    tool_call: bool = False  # this turn ran the model's code (an interpreter cell, the public tests)
    tool_error: bool = False  # ... and it failed: an exception, a timeout, a failed test


class Environment(Protocol):
    stop_strings: list[str]  # generation stops after any of these (e.g. a closing </code>): the turn is over

    def reset(self, problem: Problem) -> list[dict]:
        """Start an episode: the messages that pose the problem."""

    def step(self, assistant_text: str, num_tokens: int = 0) -> Step:
        """The model's turn (its text, and how many tokens it took) -> the environment's answer."""

    def finish(self) -> Step:
        """The episode was cut short (the context is full): score what the model submitted so far."""


def final_step(sample: Sample, grader, reward_cfg) -> Step:
    """The episode's end: the sample's code graded against all of the problem's tests, then scored."""
    grade_samples([sample], grader)
    return Step(done=True, reward=score(sample, reward_cfg), sample=sample)


CELL_ENDS = {"tags": ["</code>"], "fence": ["\n```\n"], "auto": ["</code>", "\n```\n"]}  # stop strings by code style


def truncate(text: str, max_chars: int) -> str:
    """At most max_chars characters of text, with a visible marker where it was cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n... [truncated {len(text) - max_chars} chars]"
