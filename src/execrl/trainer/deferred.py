"""A step whose optimizer step ran on while the next step generated (step.optimize's `defer`): the host did not
wait for its train phase to end, and its numbers and its time are read after that generation, when the GPU is long
done with it. Its log line comes then, one generation late."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class Trained:
    step: int
    rollouts: object  # trainer.rollouts.Rollouts
    staleness: dict
    times: dict  # the step's times ("train" then the GPU's)
    numbers: Callable[[], dict] | None = None  # launch_step's: reads the step's numbers (and steps the scheduler)
    started: float = field(default_factory=time.perf_counter)  # the train phase's start, on the host's clock
    clock: tuple | None = None  # the train phase's start and end on the GPU (two timing events), or None

    def __post_init__(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.clock = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.clock[0].record()

    def launched(self, numbers: Callable[[], dict]) -> None:
        """The train phase is queued (`numbers` reads its numbers): its end, on the GPU."""
        self.numbers = numbers
        if self.clock is not None:
            self.clock[1].record()

    def read(self, next_started: float | None = None, next_times: dict | None = None) -> tuple[int, object, dict, dict]:
        """(step, rollouts, numbers, times) for its log line. Its train time is the GPU's, from the phase's start
        to its last kernel; what of it the next step's generation waited for (the host went on meanwhile) comes off
        that generation's time (`next_started`: the next step's start on the host's clock, `next_times` its
        times)."""
        stats = self.numbers() | self.staleness
        if self.clock is not None:
            self.clock[1].synchronize()
            train_s = self.clock[0].elapsed_time(self.clock[1]) / 1e3
            self.times["train"] = train_s
            if next_times is not None and next_started is not None and "generate" in next_times:
                waited = max(0.0, self.started + train_s - next_started)
                next_times["generate"] = max(0.0, next_times["generate"] - waited)
        return self.step, self.rollouts, stats, self.times
