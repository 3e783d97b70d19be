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
    gpu: bool = False  # the policy trains on a GPU: the phase is timed there
    started: float = field(default_factory=time.perf_counter)  # the train phase's start, on the host's clock
    clock: tuple | None = None  # the train phase's start and end on the GPU (two timing events), or None
    done: tuple | None = None  # what read() returned (it reads once)

    def __post_init__(self) -> None:
        if self.gpu:
            self.clock = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.clock[0].record()

    def launched(self, numbers: Callable[[], dict]) -> None:
        """The train phase is queued (`numbers` reads its numbers): its end, on the GPU."""
        self.numbers = numbers
        if self.clock is not None:
            self.clock[1].record()

    def read(self, next_started: float | None = None, next_times: dict | None = None) -> tuple[int, object, dict, dict]:
        """(step, rollouts, numbers, times) for its log line, read once. On a GPU its train time is the GPU's, from
        the phase's start to its last kernel; the part of it that overlapped the next step (the host went on
        meanwhile) comes off that step's generation time, so that the phases add up to the wall's time
        (`next_started`: the next step's start on the host's clock, `next_times` its times)."""
        if self.done is not None:
            return self.done
        stats = self.numbers() | self.staleness
        if self.clock is not None:
            self.clock[1].synchronize()
            train_s = self.clock[0].elapsed_time(self.clock[1]) / 1e3
            self.times["train"] = train_s
            if next_times is not None and next_started is not None and "generate" in next_times:
                waited = max(0.0, self.started + train_s - next_started)
                next_times["generate"] = max(0.0, next_times["generate"] - waited)
        self.done = (self.step, self.rollouts, stats, self.times)
        return self.done
