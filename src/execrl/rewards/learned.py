"""A learned reward model's component (env.reward_model). An episode whose reward reads it ends with
its reward pending; once the batch's episodes have ended, the reward model reads all of their
conversations at once (batched: execrl.rewards.reward_model) and each episode is scored again, with
the score in its breakdown."""

from __future__ import annotations

import math
from typing import Literal

from execrl.rewards.base import Reward, RewardConfig, Sample, component, score
from execrl.rewards.outcome import is_correct


@component("reward_model", bounds=lambda p: (0.0, 1.0) if p["transform"] == "sigmoid" else (-math.inf, math.inf))
def reward_model(sample: Sample, transform: Literal["raw", "sigmoid"] = "raw", only_correct: bool = False) -> float:
    """The reward model's score of the episode's whole conversation: a Bradley-Terry logit (raw:
    unbounded), or its sigmoid (the probability that it beats an answer scored 0: in (0, 1)).
    only_correct: counted only for answers the verifier accepts (the tests pass, the math answer is
    right), 0 for the others: the reward model then ranks correct answers among themselves and
    cannot pay for wrong ones (tests gate correctness, it adds style)."""
    if only_correct and not is_correct(sample):
        return 0.0
    if transform == "sigmoid":
        return 1.0 / (1.0 + math.exp(-max(min(sample.rm_score, 60.0), -60.0)))
    return sample.rm_score  # (raw: the config allows no other transform)


def fill_scores(scorer, items: list[tuple[list[dict], Sample]]) -> None:
    """Each valid sample's rm_score: `scorer` (a RewardModel: conversations -> scores) reads the
    conversations of (conversation, sample) pairs in one batched pass. A sample the sandbox failed
    on is not read (its score stays None)."""
    valid = [(messages, s) for messages, s in items if s.valid]
    for (_, s), value in zip(valid, scorer([messages for messages, _ in valid])):
        s.rm_score = float(value)
    for (_, s), cut in zip(valid, getattr(scorer, "cut", [])):  # (read in part: longer than the model's length)
        s.rm_cut = cut


def judge(scorer, items: list[tuple[list[dict], Sample]], cfg: RewardConfig) -> list[Reward]:
    """The rewards of (conversation, sample) pairs, scored once `scorer` has read them
    (fill_scores): a sample the sandbox failed on stays invalid."""
    fill_scores(scorer, items)
    return [score(s, cfg) for _, s in items]
