"""Rewards: pure functions of one sample (completion + verdict), combined as a weighted sum set in
YAML:

    reward:
      components:
        - {name: test_pass_fraction, weight: 1.0}
        - {name: all_tests_pass, weight: 0.5}          # the "perfect solution" bonus
        - {name: repetition_penalty, weight: 0.2, ngram: 4}
        - {name: reward_model, weight: 0.1}              # a learned reward model's score (env.reward_model)

A sample whose grading hit infra_error is invalid: it has no reward, and is left out of its group's
baseline and of pass@k, never scored 0. Each component's value is logged separately
(`Reward.parts`).
"""

from __future__ import annotations

# the components register themselves (each imports .base, not this package)
from execrl.rewards import code, learned, math_answers, text  # noqa: F401
from execrl.rewards.base import COMPONENTS, Reward, RewardConfig, Sample, component, sandbox_failures, score
from execrl.rewards.learned import judge
from execrl.rewards.outcome import CORRECT, NO_CODE, OUTCOMES, grade_samples, is_correct, outcome

__all__ = ["COMPONENTS", "CORRECT", "NO_CODE", "OUTCOMES", "Reward", "RewardConfig", "Sample", "component",
           "grade_samples", "is_correct", "judge", "outcome", "sandbox_failures", "score"]
