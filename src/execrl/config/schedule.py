"""The learning-rate schedule, in either of two forms:

  execrl's   {warmup_steps: N}: linear warm-up from 0 over N optimizer steps, then constant
  NeMo RL's  torch schedulers stepped once per GRPO step: one {name, kwargs}, or a list of them with a
             {milestones: [...]} entry (torch's SequentialLR), or null (constant)

Only classes of torch.optim.lr_scheduler are built (NeMo RL imports any class path; its configs name
only these)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

from pydantic import Discriminator, Field, RootModel, Tag, field_validator, model_validator

from execrl.config.errors import ConfigError
from execrl.config.section import Section

# torch schedulers a config cannot describe: they take functions, other schedulers, or a validation
# metric
UNBUILDABLE = {"LambdaLR", "MultiplicativeLR", "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau"}
PREFIX = "torch.optim.lr_scheduler."
ENTRY, MARKS = "(scheduler entry)", "(milestones entry)"
TAGS = {"warmup", "torch", "sequential", "constant", ENTRY, MARKS}  # the union's tags, which error paths name


class WarmupSchedule(Section):
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear learning-rate warm-up from 0")
    per_grpo_step: ClassVar[bool] = False  # stepped after each optimizer step

    def build(self, optimizer):
        import torch

        warm = self.warmup_steps
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)


class TorchSchedule(Section):
    name: str = Field(description="a class of torch.optim.lr_scheduler, e.g. torch.optim.lr_scheduler.LinearLR")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="its arguments (the optimizer aside)")
    per_grpo_step: ClassVar[bool] = True  # as NeMo RL: once per GRPO step, after its optimizer steps

    @field_validator("name")
    @classmethod
    def _torch_class(cls, name: str) -> str:
        import torch

        short = name.removeprefix(PREFIX)
        if name != PREFIX + short or short in UNBUILDABLE or not hasattr(torch.optim.lr_scheduler, short):
            raise ValueError(f"{name!r} is not a scheduler execrl builds: name a class of torch.optim.lr_scheduler "
                             f"(e.g. {PREFIX}LinearLR, CosineAnnealingLR, ConstantLR), not {sorted(UNBUILDABLE)}")
        return name

    def build(self, optimizer):
        import torch

        try:
            return getattr(torch.optim.lr_scheduler, self.name.removeprefix(PREFIX))(optimizer, **self.kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"policy.scheduler {self.name} with kwargs {self.kwargs}: {e}") from None


class Milestones(Section):
    milestones: list[int] = Field(description="GRPO steps at which SequentialLR moves to the next scheduler")


def _entry_kind(v: Any) -> str:
    return MARKS if isinstance(v, Milestones) or isinstance(v, dict) and "milestones" in v else ENTRY


class SequentialSchedule(RootModel):
    """NeMo RL's list: schedulers in order, with one {milestones: [...]} entry saying when each one
    hands over."""
    root: list[Annotated[Union[Annotated[TorchSchedule, Tag(ENTRY)], Annotated[Milestones, Tag(MARKS)]],
                         Discriminator(_entry_kind)]]
    per_grpo_step: ClassVar[bool] = True

    @model_validator(mode="after")
    def _milestones_fit(self) -> SequentialSchedule:
        schedulers = [e for e in self.root if isinstance(e, TorchSchedule)]
        marks = [e.milestones for e in self.root if isinstance(e, Milestones)]
        if not schedulers:
            raise ValueError("the list names no scheduler: give {name, kwargs} entries (or set policy.scheduler: null "
                             "for a constant learning rate)")
        if len(schedulers) > 1 and (len(marks) != 1 or len(marks[0]) != len(schedulers) - 1):
            raise ValueError(f"{len(schedulers)} schedulers need one {{milestones: [...]}} entry with "
                             f"{len(schedulers) - 1} step(s), when each hands over to the next")
        return self

    def build(self, optimizer):
        import torch

        schedulers = [e.build(optimizer) for e in self.root if isinstance(e, TorchSchedule)]
        marks = [e.milestones for e in self.root if isinstance(e, Milestones)]
        if len(schedulers) == 1:
            return schedulers[0]
        return torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers, milestones=marks[0])


class ConstantSchedule(RootModel):
    """policy.scheduler: null, as NeMo RL: the learning rate stays as the optimizer's."""
    root: None = None
    per_grpo_step: ClassVar[bool] = True

    def build(self, optimizer):
        import torch

        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)


def _kind(v: Any) -> str:
    if v is None:
        return "constant"
    if isinstance(v, list):
        return "sequential"
    if isinstance(v, dict) and "name" in v or isinstance(v, TorchSchedule):
        return "torch"
    return "constant" if isinstance(v, ConstantSchedule) else "sequential" if isinstance(
        v, SequentialSchedule) else "warmup"


Schedule = Annotated[Union[Annotated[WarmupSchedule, Tag("warmup")], Annotated[TorchSchedule, Tag("torch")],
                           Annotated[SequentialSchedule, Tag("sequential")], Annotated[ConstantSchedule, Tag("constant")]],
                     Discriminator(_kind)]
