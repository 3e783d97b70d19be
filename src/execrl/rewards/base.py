"""A sample (a completion, its extracted answer and verdict), the reward components' registry, and
the weighted sum that scores a sample."""

from __future__ import annotations

import difflib
import inspect
import math
import types
import typing
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from execrl.extract import Extracted
from execrl.plugins import OwnCodeFailed, PluginError, guarded, is_import_path, load_object
from execrl.sandbox import ProgramResult, Verdict
from execrl.tasks import Problem

COMPONENTS: dict = {}


SCORES: dict[str, tuple[str, ...]] = {}  # component -> the kinds of problem it scores (absent: any)
BOUNDS: dict = {}  # component -> fn(its parameters, defaults filled) -> (least, most) value it gives (absent: unknown)
SHAPING: set[str] = set()  # components that shape the reward the others give (DAPO's length penalty): dynamic sampling
# decides without them, as NeMo RL's does without its reward shaping (trainer/flat.py: deciding_parts)


def component(name: str, scores: tuple[str, ...] | None = None, bounds=None, shaping: bool = False):
    """Register a reward component: fn(sample, **params) -> float. `scores`: the kinds of problem
    (code, math) it gives a signal on; on others it is the same for every answer (None: any
    kind). `bounds`: the values it can give, (least, most), or a function of its parameters (a dict,
    defaults filled) giving them. `shaping`: it shapes what the others give (a length penalty: SHAPING)."""
    def wrap(fn):
        COMPONENTS[name] = fn
        if shaping:
            SHAPING.add(name)
        if scores is not None:
            SCORES[name] = scores
        if bounds is not None:
            BOUNDS[name] = bounds if callable(bounds) else lambda params: bounds
        return fn
    return wrap


def own_component(spec: str):
    """A researcher's reward function named by import path: fn(sample, **params) -> float, its
    parameters keywords (checked like a built-in component's)."""
    fn = load_object(spec, "reward.components name")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if not callable(fn) or not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                                                 params[0].POSITIONAL_OR_KEYWORD):
        raise PluginError(f"reward component {spec}: not a function fn(sample, **params) -> float (its first "
                          "parameter takes the sample: execrl.rewards.Sample)")
    return fn


@dataclass
class Sample:
    problem: Problem
    completion: str
    extracted: Extracted
    result: ProgramResult | None = None  # code problems whose code was found and graded
    num_tokens: int = 0  # completion length in tokens
    max_tokens: int = 0  # the generation limit it was sampled under
    cut: bool = False  # it hit that limit before it ended (EOS or a stop string): execrl eval's count
    turns: int = 1  # model turns the episode took (multi-turn environments)
    outcome: str | None = None  # set where the environment decides it: a game's win, draw, loss, illegal or unplayed
    rm_score: float | None = None  # the reward model's score of the episode's conversation (env.reward_model)
    rm_cut: bool = False  # ... read in part (longer than env.reward_model.max_model_len)
    math_verdict: float | None = None  # math_correct's, once checked (math-verify may take seconds: checked once)

    @property
    def valid(self) -> bool:
        return self.result is None or self.result.verdict != Verdict.INFRA_ERROR


def sandbox_failures(samples: list[Sample]) -> tuple[int, int, str]:
    """(programs the sandbox failed on, programs sent to it, the first failure's message, which
    names the cause)."""
    sent = [s for s in samples if s.result is not None]
    failed = [s for s in sent if not s.valid]
    first = failed[0].result if failed else None
    example = (first.stderr or (first.tests[0].detail if first.tests else "")) if first else ""
    return len(failed), len(sent), example


@dataclass
class Reward:
    total: float | None  # None: invalid sample, or not scored yet (pending)
    parts: dict[str, float] = field(default_factory=dict)
    pending: bool = False  # waits for the reward model's score (execrl.rewards.learned.judge)
    shaping: float = 0.0  # the part of total from components added after the scaling (NeMo RL's reward shaping)

    @property
    def unshaped(self) -> float | None:
        """The reward before shaping (NeMo RL's unshaped_total_reward: dynamic sampling decides on
        it)."""
        return None if self.total is None else self.total - self.shaping

    @property
    def valid(self) -> bool:
        return self.total is not None


def _typed(name: str, key: str, value, hint, default):
    """A component's parameter as its annotation reads it: a number written as text ("64", as YAML may quote it)
    converted, as the schema converts its own keys, and a whole number given for text ("pattern: 2024") made text; a
    value of another kind (a word for a number, true or 1.10 for text) refused naming the parameter (it raised a
    TypeError mid-run, or was read as it was). None where the default is None or the annotation allows it."""
    from pydantic import TypeAdapter, ValidationError
    from pydantic.errors import PydanticSchemaGenerationError

    union = typing.get_origin(hint) in UNIONS
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    if value is None and (default is None or (union and type(None) in typing.get_args(hint))):
        return None
    kind = kinds[0] if len(kinds) == 1 else hint
    if kind is str and type(value) is int:  # (not a float: YAML reads 1.10 as 1.1, 1e3 as 1000.0)
        return str(value)
    try:
        converted = TypeAdapter(kind).validate_python(value)
    except PydanticSchemaGenerationError:  # (an annotation pydantic has no schema for: a component's own class)
        return value
    except ValidationError as e:
        quote = " (quote it: YAML reads true, yes and 1.10 as no text)" if isinstance(value, (bool, float)) else ""
        raise ValueError(f"reward component {name}: {key}={value!r} is not {getattr(kind, '__name__', kind)} "
                         f"({e.errors()[0]['msg']}){quote}") from None
    return converted if isinstance(converted, (int, float, str)) else value  # (a list stays as the YAML wrote it)


UNIONS = (typing.Union, types.UnionType)


class ComponentConfig(BaseModel):
    """One reward component: its name, weight, and its own parameters (e.g. ngram: 4)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str = Field(description="a registered component, e.g. test_pass_fraction, or your own function as "
                                  "module:function or path/to/file.py:function: fn(sample, **params) -> float")
    weight: float = Field(1.0, description="multiplies the component's value in the sum")
    scaled: bool = Field(True, description="part of the sum reward.scaling maps (false: added after it, as NeMo RL "
                                           "adds its overlong penalty to the scaled reward)")

    @model_validator(mode="after")
    def _known(self):
        if self.name not in COMPONENTS and is_import_path(self.name):
            COMPONENTS[self.name] = own_component(self.name)
        if self.name not in COMPONENTS:
            close = difflib.get_close_matches(self.name, COMPONENTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown reward component {self.name!r}{hint}; known: {sorted(COMPONENTS)}")
        allowed = set(inspect.signature(COMPONENTS[self.name]).parameters) - {"sample"}
        unknown = set(self.params) - allowed
        if unknown:
            raise ValueError(f"reward component {self.name} has no parameter(s) {sorted(unknown)}; it takes {sorted(allowed)}")
        hints = typing.get_type_hints(COMPONENTS[self.name])
        for key, value in self.params.items():  # a parameter of named choices (Literal) takes one of them
            choices = typing.get_args(hints.get(key)) if typing.get_origin(hints.get(key)) is typing.Literal else ()
            if choices and value not in choices:
                raise ValueError(f"reward component {self.name}: {key}={value!r} is not one of {list(choices)}")
            if not choices and key in hints:
                default = inspect.signature(COMPONENTS[self.name]).parameters[key].default
                self.model_extra[key] = _typed(self.name, key, value, hints[key], default)
        return self

    @property
    def params(self) -> dict:
        return dict(self.model_extra or {})

    def bounds(self) -> tuple[float, float]:
        """The least and most this component adds to the sum (its weight applied); unbounded where not known."""
        if self.name not in BOUNDS:
            return -math.inf, math.inf
        defaults = {p.name: p.default for p in inspect.signature(COMPONENTS[self.name]).parameters.values()
                    if p.default is not p.empty}
        lo, hi = (self.weight * float(v) if self.weight else 0.0 for v in BOUNDS[self.name]({**defaults, **self.params}))
        return min(lo, hi), max(lo, hi)


class RewardScaling(BaseModel):
    """NeMo RL's grpo.reward_scaling: the reward clamped to [source_min, source_max], then mapped
    linearly onto [target_min, target_max]."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(False, description="scale the reward")
    source_min: float = Field(0.0, description="rewards below are clamped to this; it maps to target_min")
    source_max: float = Field(1.0, description="rewards above are clamped to this; it maps to target_max")
    target_min: float = Field(0.0, description="what source_min becomes")
    target_max: float = Field(1.0, description="what source_max becomes")

    @model_validator(mode="after")
    def _range(self):
        if self.source_max <= self.source_min:
            raise ValueError(f"source_max ({self.source_max}) must be above source_min ({self.source_min})")
        return self

    def __call__(self, r: float) -> float:
        if not self.enabled:
            return r
        clamped = min(max(r, self.source_min), self.source_max)
        return self.target_min + (clamped - self.source_min) / (self.source_max - self.source_min) * (
            self.target_max - self.target_min)


class RewardConfig(BaseModel):
    """The reward: a weighted sum of components, optionally scaled."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    components: list[ComponentConfig] = Field(
        default_factory=lambda: [ComponentConfig(name="test_pass_fraction")],
        description="reward components and their weights; their weighted sum is the reward")
    scaling: RewardScaling = Field(default_factory=RewardScaling, description="maps the weighted sum of the scaled "
                                   "components onto another range (NeMo RL's grpo.reward_scaling)")

    @property
    def judged(self) -> bool:
        """Whether a component reads the reward model's score."""
        return any(c.name == "reward_model" for c in self.components)


def constant_reason(cfg: RewardConfig) -> str | None:
    """Why the reward is the same for every answer by its construction (every advantage 0, nothing learned, and
    the run exits 0), as an error that names the fix; None: it can vary."""
    seen = set()
    for c in cfg.components:
        if c.name in seen:
            return (f"reward.components names {c.name} twice: give each component once (its weight the sum of the "
                    "two; a second set of parameters is a component of your own)")
        seen.add(c.name)
    if all(c.weight == 0 for c in cfg.components):
        return ("every reward.components weight is 0, so every answer's reward is 0 and nothing is learned: give the "
                "component that scores correctness a weight (e.g. {name: test_pass_fraction, weight: 1.0})")
    s = cfg.scaling
    if not s.enabled or not any(c.weight != 0 and c.scaled for c in cfg.components):
        return None
    # (the scaled part on its own: components added after the scaling, a length penalty say, would be all that varies)
    added = sorted(c.name for c in cfg.components if c.weight != 0 and not c.scaled)
    rest = f" (only {', '.join(added)}, added after the scaling, would vary)" if added else ""
    if s.target_min == s.target_max:
        return (f"reward.scaling maps every reward onto {s.target_min:g} (target_min == target_max), so nothing is "
                f"learned from the components it scales{rest}: set target_max above target_min, or "
                "reward.scaling.enabled=false")
    lo = sum(c.bounds()[0] for c in cfg.components if c.scaled)
    hi = sum(c.bounds()[1] for c in cfg.components if c.scaled)
    if hi <= s.source_min or lo >= s.source_max:
        return (f"reward.scaling clamps every reward to {s.source_min if hi <= s.source_min else s.source_max:g}: the "
                f"components' weighted sum lies in [{lo:g}, {hi:g}], outside (source_min, source_max) = "
                f"({s.source_min:g}, {s.source_max:g}), so nothing is learned from the components it scales{rest}: "
                "set source_min and source_max around the rewards the components give, or reward.scaling.enabled=false")
    return None


REWARD_MAX = 1e15  # a component's value at most (the reward table is float32, squares and sums taken in it)


def _number(name: str, value, sample: Sample) -> float:
    """A component's value as a float; one that is none (None, a string, an array of several) is named with its
    component and problem (float()'s TypeError named neither: a hunt's find)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OwnCodeFailed(f"reward component {name} returned {type(value).__name__} {str(value)[:60]!r} for problem "
                         f"{sample.problem.id}: a reward is a number; fix the component") from None


def score(sample: Sample, cfg: RewardConfig) -> Reward:
    if not sample.valid:
        return Reward(None)
    if cfg.judged and sample.rm_score is None:
        return Reward(None, pending=True)  # scored again once the reward model has read the whole batch
    parts = {}
    for c in cfg.components:
        fn = COMPONENTS[c.name]
        with guarded(fn, f"reward component {c.name} on problem {sample.problem.id}", ": fix the component"):
            parts[c.name] = _number(c.name, fn(sample, **c.params), sample)
    for name, value in parts.items():  # (one NaN spreads to its group's advantages and the whole step's loss)
        if not (math.isfinite(value) and abs(value) <= REWARD_MAX):  # (1e39: float32's inf in the reward table)
            raise OwnCodeFailed(f"reward component {name} returned {value} for problem {sample.problem.id}: a reward "
                             f"is a finite number within +-{REWARD_MAX:g}; fix the component (or the reward model's "
                             "scores it reads), or scale it down")
    scaled = sum(c.weight * parts[c.name] for c in cfg.components if c.scaled)
    added = sum(c.weight * parts[c.name] for c in cfg.components if not c.scaled)
    return Reward(cfg.scaling(scaled) + added, parts, shaping=added)
