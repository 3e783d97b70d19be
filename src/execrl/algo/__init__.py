"""GRPO's math as pure, device-agnostic functions: advantages (estimators register themselves) and
the loss. The trainer calls `ADVANTAGES[cfg.grpo.advantage]` and `policy_loss`; it never branches on
a variant's name."""

from execrl.algo import role_baselines  # noqa: F401  (registers rae)
from execrl.algo.advantages import ADVANTAGES, flat_groups
from execrl.algo.loss import LossTerms, policy_loss

__all__ = ["ADVANTAGES", "LossTerms", "flat_groups", "policy_loss"]
