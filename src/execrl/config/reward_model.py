"""The reward-model rule, in one place: when a learned reward model scores, and what it replaces.

A reward model is loaded (env.reward_model.enabled) exactly when a reward component reads it (the
component `reward_model`). NeMo RL says the same thing two other ways, and both are read here:

- `data.default.env_name: reward_model` (NeMo RL's run_grpo.py): the reward model's score *replaces*
  the verifier's, so each test_pass_fraction component (the default's) becomes a reward_model
  component of its weight; others (such as the overlong penalty) stay.
- `env.reward_model.enabled: true` alone (NeMo RL's run_grpo_rm.py, which sends every task to the
  reward model): the same, where no component of execrl's reads the model.

Three entry points, one for each stage of loading a config: `from_nemo` (on NeMo RL's dotted keys,
before the schema), `replace_verifier` (the schema's validator: the components as they will run, so
config.yaml records what ran) and `check` (with the other checks, before any work).
"""

from __future__ import annotations

from typing import Any

from execrl.config.errors import ConfigError
from execrl.rewards.base import ComponentConfig

ENV_NAME = "data.default.env_name"
ARITH_JUDGE = "builtin:arith-judge"  # the built-in task's judge (rewards/judges.py): it reads with its own tokenizer
OWN_TOKENIZER = (f"{ARITH_JUDGE} reads with its own tokenizer (the built-in policy's, which it was trained with): "
                 "another one would give it ids it never saw")


def from_nemo(leaves: dict[str, Any], enabled: bool) -> dict[str, Any]:
    """NeMo RL's keys -> the execrl settings that say the same (empty where nothing is to add):
    the reward model scores every task where it is enabled or env_name names it, unless one of
    reward.components already reads it."""
    judged = enabled or leaves.get(ENV_NAME) == "reward_model"
    components = leaves.get("reward.components") or []
    reads = any(isinstance(c, dict) and c.get("name") == "reward_model" for c in components)
    if not judged or reads:
        return {}
    wanted = {ENV_NAME: "reward_model", "env.reward_model.enabled": True}
    return {key: value for key, value in wanted.items() if leaves.get(key) != value}


def replace_verifier(env_name: str, components: list) -> list:
    """`data.default.env_name=reward_model`: each test_pass_fraction component becomes a
    reward_model one of its weight (and scaling); the others stay."""
    if env_name != "reward_model":
        return components
    return [ComponentConfig(name="reward_model", weight=c.weight, scaled=c.scaled) if c.name == "test_pass_fraction"
            else c for c in components]


def check(cfg) -> None:
    """The model is loaded exactly where a component reads it; errors name the fix."""
    enabled, judged = cfg.env.reward_model.enabled, cfg.reward.judged
    if cfg.data.default.env_name == "reward_model" and not judged:
        raise ConfigError("data.default.env_name=reward_model makes the reward model's score the reward, but "
                          "reward.components has no reward_model component: add {name: reward_model} to them (or "
                          "drop reward.components: the default's test_pass_fraction becomes reward_model)")
    if judged and not enabled:
        raise ConfigError("the reward component reward_model reads a reward model, but env.reward_model is off: set "
                          "env.reward_model.enabled=true and env.reward_model.model_name (or drop the component)")
    for c in cfg.reward.components:
        if c.name == "reward_model" and c.params.get("only_correct") and c.params.get("transform", "raw") == "raw":
            raise ConfigError("reward_model with only_correct: true pays a wrong answer 0 and a right one the model's "
                              "raw score, which is often negative: a wrong answer would beat a right one the model "
                              "dislikes. Set transform: sigmoid (a score in (0, 1)) with only_correct")
    if enabled and not judged:
        raise ConfigError("env.reward_model is enabled but no reward component reads it: add {name: reward_model, "
                          "weight: ...} to reward.components, or set data.default.env_name=reward_model (its score "
                          "alone), or env.reward_model.enabled=false")
