"""NeMo RL's own config keys, as execrl reads them. A NeMo RL GRPO config is execrl's schema plus keys for NeMo's
machinery; each of those is here, in one of three tables:

  MAPPED   a NeMo name for an execrl setting (moved there, or its value translated)
  IGNORED  changes only speed, memory or infrastructure here (dropped, named in one start-up note)
  REFUSED  a feature execrl does not have, when it is on (one line naming it)

A key in none of them is an unknown key (the schema's error names the closest valid one). Sections are matched by
prefix: an entry "policy.dynamic_batching" covers every key under it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from execrl.config.errors import ConfigError


def _file_text(key: str):
    """A translation that reads the file a NeMo RL key names (its prompt files) into the setting's text."""
    def read(path):
        if path is None:
            return None
        try:
            return Path(path).expanduser().read_text()
        except OSError as e:
            raise ConfigError(f"{key}={path}: cannot read it ({e.strerror}); NeMo RL's paths are relative to the "
                              "directory you run in: copy the file there, or give its full path") from None
    return read


# NeMo key -> (execrl key, value translation)
MAPPED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    # NeMo RL's data section: its names for the training and validation sets and their prompt files
    "data.dataset_name": ("data.train.dataset_name", str),  # (NeMo RL's older, flat data section)
    "data.train.data_path": ("data.train.path", str),
    "data.validation.data_path": ("data.validation.path", str),
    **{f"{section}prompt_file": ("prompt.template", _file_text(f"{section}prompt_file"))
       for section in ("data.", "data.default.", "data.train.")},
    **{f"{section}system_prompt_file": ("prompt.system_prompt", _file_text(f"{section}system_prompt_file"))
       for section in ("data.", "data.default.", "data.train.")},
    "policy.dtensor_cfg.activation_checkpointing": ("policy.activation_checkpointing", bool),
    "policy.automodel_cfg.activation_checkpointing": ("policy.activation_checkpointing", bool),
    # the execrl engine generates in place of vLLM (refused below for other backends)
    "policy.generation.backend": ("policy.generation.backend", lambda v: "execrl" if v == "vllm" else v),
}

# NeMo key or section -> why it changes nothing here
IGNORED: dict[str, str] = {
    "policy.dtensor_cfg": "FSDP2 settings: execrl shards with FSDP2 over cluster.gpus_per_node itself",
    "policy.automodel_cfg": "FSDP2 settings: execrl shards with FSDP2 over cluster.gpus_per_node itself",
    "policy.megatron_cfg": "Megatron settings (off)",
    "policy.dynamic_batching": "micro-batch packing by tokens (the loss is normalized over the whole batch)",
    "policy.sequence_packing": "micro-batch packing by tokens (the loss is normalized over the whole batch)",
    "policy.make_sequence_length_divisible_by": "padding for tensor parallelism",
    "policy.logprob_chunk_size": "execrl chunks the LM head itself",
    "policy.offload_optimizer_for_logprob": "memory offloading",
    "policy.refit_buffer_size_gb": "weight transfer to vLLM (the engine uses the trainer's weights)",
    "policy.generation.vllm_cfg": "vLLM settings (the execrl engine reserves its KV cache itself)",
    "policy.generation.vllm_kwargs": "vLLM settings (the execrl engine reserves its KV cache itself)",
    "policy.generation.colocated": "generation shares the training GPUs (colocated), as in execrl",
    "policy.generation.model_name": "NeMo RL overwrites it with policy.model_name",
    "policy.generation.pad_token_id": "taken from the tokenizer",
    "policy.generation.mcore_generation_config": "Megatron generation settings (off)",
    "policy.generation.port_range_low": "vLLM server ports",
    "policy.generation.port_range_high": "vLLM server ports",
    "policy.generation.refit_transport": "weight transfer to vLLM",
    "policy.generation.refit_cfg": "weight transfer to vLLM",
    "policy.optimizer.kwargs.foreach": "AdamW implementation choice",
    "policy.optimizer.kwargs.fused": "AdamW implementation choice",
    "data.num_workers": "data-loader processes",
    "grpo.reward_shaping": "off",
    "data.train.seed": "the train/validation split is seeded by grpo.seed, the same value",
    "data.validation.seed": "the train/validation split is seeded by grpo.seed, the same value",
    "env.math.num_workers": "math answers are checked in the trainer's process (no workers)",
    "env.math.math_verify_impl": "execrl checks math answers with math-verify (NeMo RL's hf_math_verify)",
    "checkpointing.metric_name": "execrl keeps the last keep_top_k checkpoints, not the best by a metric",
    "checkpointing.higher_is_better": "execrl keeps the last keep_top_k checkpoints, not the best by a metric",
    "checkpointing.model_save_format": "execrl saves safetensors",
    "checkpointing.save_consolidated": "execrl saves full (consolidated) HF weights",
    "logger.num_val_samples_to_print": "execrl writes rollouts to rollouts/step_N.jsonl (logger.rollouts_period)",
    "logger.gpu_monitoring": "GPU memory is logged on GPUs (memory/peak_gib)",
    "logger.tensorboard": "TensorBoard writes under log_dir/tensorboard",
    "logger.mlflow": "MLflow settings (mlflow_enabled must be false)",
    "logger.swanlab": "SwanLab settings (swanlab_enabled must be false)",
    "cluster.master_port_range_low": "torchrun picks the port",
    "cluster.master_port_range_high": "torchrun picks the port",
    "cluster.segment_size": "Ray placement",
    "grpo.async_grpo.max_generation_failures": "vLLM server retries",
    "grpo.calculate_advantages_on_gpu": "where the advantages are computed",
    "grpo.skip_reference_policy_logprobs_calculation": "execrl computes reference logprobs only with a KL penalty",
    "loss_fn.metrics_level": "which metrics are logged",
    "loss_fn.enable_torch_compile": "execrl compiles the decoder layers itself (policy.torch_compile)",
}


def _on(v) -> bool:
    return bool(v) and v not in ("false", "False")


# NeMo key -> (is the feature on?, the line saying what is missing)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "policy.megatron_cfg.enabled": (_on, "Megatron-backed training is not implemented in execrl: use NeMo RL's DTensor "
                                         "path (policy.megatron_cfg.enabled=false, policy.dtensor_cfg.enabled=true)"),
    "policy.generation.colocated.enabled": (lambda v: v is False, "non-colocated generation (separate generation "
                                            "GPUs) is not implemented: execrl generates on the training GPUs; set "
                                            "policy.generation.colocated.enabled=true"),
    "policy.generation.backend": (lambda v: v not in ("vllm", "execrl", "transformers"),
                                  "generation backends other than vLLM are not implemented: set "
                                  "policy.generation.backend=vllm (execrl's engine stands in for it)"),
    "policy.generation.vllm_cfg.precision": (lambda v: "fp8" in str(v), "fp8 rollouts are not implemented: set "
                                             "policy.generation.vllm_cfg.precision=${policy.precision}"),
    "policy.generation.vllm_cfg.kv_cache_dtype": (lambda v: "fp8" in str(v), "an fp8 KV cache is not implemented: "
                                                  "set policy.generation.vllm_cfg.kv_cache_dtype=auto"),
    "policy.dtensor_cfg.lora_cfg.enabled": (_on, "LoRA is not implemented yet: set "
                                                 "policy.dtensor_cfg.lora_cfg.enabled=false"),
    "policy.automodel_cfg.lora_cfg.enabled": (_on, "LoRA is not implemented yet: set policy.automodel_cfg."
                                                   "lora_cfg.enabled=false"),
    "policy.draft.enabled": (_on, "draft-model (eagle3) co-training is not implemented: set "
                                  "policy.draft.enabled=false"),
    "env.math.math_verify_impl": (lambda v: v not in (None, "hf_math_verify"),
                                  "env.math.math_verify_impl other than hf_math_verify (e.g. DAPO's verifier) is not "
                                  "implemented: execrl checks math answers with math-verify; set it to hf_math_verify"),
    "grpo.reward_shaping.stop_properly_penalty_coef": (lambda v: v is not None, "grpo.reward_shaping."
                                                       "stop_properly_penalty_coef (scaling the reward of truncated "
                                                       "samples) is not implemented: set it to null"),
    "logger.mlflow_enabled": (_on, "MLflow logging is not implemented: set logger.mlflow_enabled=false (TensorBoard "
                                   "and W&B are)"),
    "logger.swanlab_enabled": (_on, "SwanLab logging is not implemented: set logger.swanlab_enabled=false (TensorBoard "
                                    "and W&B are)"),
}


def adapt(tree: dict, known: Callable[[str], bool]) -> tuple[dict, dict[str, str], dict[str, str]]:
    """A resolved config tree with NeMo RL's own keys translated: (the tree for execrl's schema, {ignored key or
    section: why}, {mapped key: what it became}). `known(key)`: whether execrl's schema has the key. Raises
    ConfigError naming a refused feature."""
    leaves = dict(_leaves(tree))
    for key, (on, why) in REFUSED.items():
        if key in leaves and on(leaves[key]):
            raise ConfigError(why)
    if isinstance(leaves.get("policy.scheduler"), list) or "policy.scheduler.name" in leaves:
        raise ConfigError("policy.scheduler as NeMo RL's torch schedulers (a list for SequentialLR, or one {name, "
                          "kwargs}) is not implemented yet: use policy.scheduler.warmup_steps (a linear warm-up from "
                          "0 over that many optimizer steps, then constant)")
    for key in ("data.train.seed", "data.validation.seed"):  # NeMo RL's train/validation split seed
        if key in leaves and leaves[key] != leaves.get("grpo.seed", leaves[key]):
            raise ConfigError(f"{key}={leaves[key]} differs from grpo.seed={leaves['grpo.seed']}: execrl seeds the "
                              f"split with grpo.seed; set {key}=${{grpo.seed}} (NeMo RL's default)")
    out: dict = {}
    ignored: dict[str, str] = {}
    mapped: dict[str, str] = {}
    later: list[tuple[str, Any]] = []  # mapped values, put last: they win over the schema's defaults of their keys
    for key, value in leaves.items():
        section = next((k for k in IGNORED if key == k or key.startswith(k + ".")), None)
        if key in MAPPED:
            target, translate = MAPPED[key]
            if value is None:
                continue  # e.g. a null prompt file: the setting stays as configured
            later.append((target, translate(value)))
            if later[-1] != (key, value):
                text = str(later[-1][1])
                shown = text if len(text) < 60 and "\n" not in text else f"(the file's {len(text)} characters)"
                mapped[key] = f"{target}={shown}"
        elif key in IGNORED:  # a key of its own (a section only covers what the schema does not have)
            ignored[key] = IGNORED[key]
        elif known(key):
            _put(out, key, value)
        elif section is not None:
            ignored[section] = IGNORED[section]
        elif key in REFUSED:
            ignored[key] = "off"
        else:
            _put(out, key, value)  # unknown: the schema's error names the closest valid key
    for target, value in later:
        _put(out, target, value)
    if _on(leaves.get("grpo.reward_shaping.enabled")):  # DAPO's overlong penalty, added to the reward
        missing = [f"grpo.reward_shaping.{k}" for k in ("overlong_buffer_length", "max_response_length")
                   if f"grpo.reward_shaping.{k}" not in leaves]
        if missing:
            raise ConfigError(f"grpo.reward_shaping.enabled needs {' and '.join(missing)} (NeMo RL's base config: "
                              "128 and ${policy.max_total_sequence_length})")
        shaping = {"name": "overlong_penalty",
                   "weight": float(leaves.get("grpo.reward_shaping.overlong_buffer_penalty", 1)),
                   "buffer_tokens": int(leaves["grpo.reward_shaping.overlong_buffer_length"]),
                   "max_tokens": int(leaves["grpo.reward_shaping.max_response_length"])}
        out.setdefault("reward", {}).setdefault("components", []).append(shaping)
        mapped["grpo.reward_shaping"] = f"reward.components += {shaping}"
        ignored.pop("grpo.reward_shaping", None)
    return out, ignored, mapped


def _leaves(tree: dict, prefix: str = ""):
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _leaves(v, key + ".")
        else:
            yield key, v


def _put(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value
