"""NeMo RL keys that execrl does not act on: refused where they would change the math, listed in one start-up note
where they change only speed or infrastructure (or, for data processors, what execrl decides from the dataset)."""

from __future__ import annotations

from execrl.config.load import ConfigError
from execrl.config.schema import MasterConfig

# keys read only with grpo.use_dynamic_sampling
DYNAMIC_ONLY = ("grpo.dynamic_sampling_max_gen_batches", "grpo.batch_multiplier")

# key -> why it has no effect here
NO_EFFECT = {
    "grpo.val_batch_size": "validation generates with the training slots (policy.generation_batch_size)",
    "logger.monitor_gpus": "GPU memory is logged on GPUs regardless (memory/peak_gib)",
    "policy.generation.vllm_cfg": "the execrl engine reserves its KV cache itself",
    **{key: "only with grpo.use_dynamic_sampling" for key in DYNAMIC_ONLY},
}


def check_supported(cfg: MasterConfig) -> None:
    """Refuse, with the fix, settings that would change the algorithm in ways execrl does not implement."""
    if cfg.grpo.use_dynamic_sampling and cfg.grpo.async_grpo.enabled:
        raise ConfigError("grpo.use_dynamic_sampling is not implemented with async GRPO (its later rounds would have "
                          "to wait for grading): set grpo.async_grpo.enabled=false, or grpo.use_dynamic_sampling=false")
    if cfg.loss_fn.use_on_policy_kl_approximation and cfg.policy.generation.backend != "execrl":
        raise ConfigError("loss_fn.use_on_policy_kl_approximation weights the KL by pi / pi_sampler, with the sampler's "
                          "logprobs, which only the execrl engine returns: set policy.generation.backend=execrl")
    multi = cfg.env.multi_turn.kind == "interpreter" and cfg.grpo.max_rollout_turns > 1
    if not cfg.env.code.terminate_on_evaluation and not multi:
        raise ConfigError("env.code.terminate_on_evaluation=false (episodes go on after the code runs) is execrl's "
                          "code interpreter: set env.multi_turn.kind=interpreter and grpo.max_rollout_turns > 1, or "
                          "terminate_on_evaluation=true")


def check_dataset_names(cfg: MasterConfig, kinds: set[str]) -> None:
    """data.default.env_name and processor, NeMo RL's names for how rows are read and graded, must fit the kinds of
    problem (code, math) the training and validation data hold: execrl grades each problem by its kind."""
    d = cfg.data.default
    for key, named in (("env_name", d.env_name), ("processor", d.processor)):
        kind = named.split("_")[0]  # code | math (env_name's values, and the processors' prefixes)
        if named != "auto" and kinds - {kind}:
            raise ConfigError(f"data.default.{key} is {named!r} but the dataset's problems are {sorted(kinds)}: set "
                              f"it to auto (execrl grades each problem by its kind) or use a {kind} dataset")


def no_effect_note(cfg: MasterConfig) -> str | None:
    """One line naming the keys this config sets (to other than their defaults) that change nothing here."""
    default = MasterConfig()
    seen = []
    for key in NO_EFFECT:
        if key in DYNAMIC_ONLY and cfg.grpo.use_dynamic_sampling:
            continue
        if _get(cfg, key) != _get(default, key):
            seen.append(key)
    if not seen:
        return None
    return "note: accepted, with no effect here: " + "; ".join(f"{k} ({NO_EFFECT[k]})" for k in seen)


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj
