"""A sample (a completion, its extracted answer and verdict), the reward components' registry, and the weighted sum
that scores a sample."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from execrl.extract import Extracted
from execrl.sandbox import ProgramResult, Verdict
from execrl.tasks import Problem

COMPONENTS: dict = {}


def component(name: str):
    """Register a reward component: fn(sample, **params) -> float."""
    def wrap(fn):
        COMPONENTS[name] = fn
        return fn
    return wrap


@dataclass
class Sample:
    problem: Problem
    completion: str
    extracted: Extracted
    result: ProgramResult | None = None  # code problems whose code was found and graded
    num_tokens: int = 0  # completion length in tokens
    max_tokens: int = 0  # the generation limit it was sampled under
    turns: int = 1  # model turns the episode took (multi-turn environments)

    @property
    def valid(self) -> bool:
        return self.result is None or self.result.verdict != Verdict.INFRA_ERROR


def sandbox_failures(samples: list[Sample]) -> tuple[int, int, str]:
    """(programs the sandbox failed on, programs sent to it, the first failure's message, which names the cause)."""
    sent = [s for s in samples if s.result is not None]
    failed = [s for s in sent if not s.valid]
    first = failed[0].result if failed else None
    example = (first.stderr or (first.tests[0].detail if first.tests else "")) if first else ""
    return len(failed), len(sent), example


@dataclass
class Reward:
    total: float | None  # None: invalid sample
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.total is not None


class ComponentConfig(BaseModel):
    """One reward component: its name, weight, and its own parameters (e.g. ngram: 4)."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(description="a registered component, e.g. test_pass_fraction")
    weight: float = Field(1.0, description="multiplies the component's value in the sum")

    @model_validator(mode="after")
    def _known(self):
        if self.name not in COMPONENTS:
            close = difflib.get_close_matches(self.name, COMPONENTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown reward component {self.name!r}{hint}; known: {sorted(COMPONENTS)}")
        allowed = set(inspect.signature(COMPONENTS[self.name]).parameters) - {"sample"}
        unknown = set(self.params) - allowed
        if unknown:
            raise ValueError(f"reward component {self.name} has no parameter(s) {sorted(unknown)}; it takes {sorted(allowed)}")
        return self

    @property
    def params(self) -> dict:
        return dict(self.model_extra or {})


class RewardConfig(BaseModel):
    """The reward: a weighted sum of components."""

    components: list[ComponentConfig] = Field(
        default_factory=lambda: [ComponentConfig(name="test_pass_fraction")],
        description="reward components and their weights; their weighted sum is the reward")


def score(sample: Sample, cfg: RewardConfig) -> Reward:
    if not sample.valid:
        return Reward(None)
    parts = {c.name: float(COMPONENTS[c.name](sample, **c.params)) for c in cfg.components}
    return Reward(sum(c.weight * parts[c.name] for c in cfg.components), parts)
