"""NeMo RL's own config keys, as execrl reads them. A NeMo RL GRPO config is execrl's schema plus
keys for NeMo's machinery; each of those is here, in one of three tables:

  MAPPED   a NeMo name for an execrl setting (moved there, or its value translated)
  IGNORED  changes only speed, memory or infrastructure here (dropped, named in one start-up note)
  REFUSED  a feature execrl does not have, when it is on (one line naming it)

A key in none of them is an unknown key (the schema's error names the closest valid one). Sections
are matched by prefix: an entry "policy.sequence_packing" covers every key under it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from execrl.config.errors import ConfigError
from execrl.config.nemo_data import adapt_data
from execrl.config.reward_model import from_nemo
from execrl.config.tree import dotted_leaves


def _file_text(key: str):
    """A translation that reads the file a NeMo RL key names (its prompt files) into the setting's
    text. NeMo RL runs from its checkout, so a relative path is looked for in the directory you run
    in, then in each folder above the config file, then above each file it inherits (`defaults:`): a NeMo RL
    checkout's examples/configs/... finds examples/prompts/..., from a config of yours that inherits it too."""
    def read(path, config_dirs: list[Path]):
        if path is None:
            return None
        given = Path(path).expanduser()
        tried = [given] if given.is_absolute() else [Path.cwd() / given, *(
            d / given for base in config_dirs for d in [base, *base.parents])]
        found = next((p for p in tried if p.is_file()), None)
        if found is None:
            raise ConfigError(f"{key}={path}: no such file in the directory you run in or above the config file "
                              "or the files it inherits: run where NeMo RL's relative paths hold (its checkout), or "
                              "give the file's full path")
        return found.read_text()
    return read


def _import_path(name: str) -> str:
    """NeMo RL's dotted class name (package.module.Class) as execrl's module:Class; a module:Class
    or file.py:Class stays."""
    name = str(name)
    return name if ":" in name else ":".join(name.rsplit(".", 1))


def _foreign_environment(name) -> bool:
    """Whether env_cls names anything but an execrl Environment subclass (NeMo RL's own environments
    are Ray actors of another interface)."""
    if name is None:
        return False
    from execrl.envs import environment_class  # (lazily: the environments import the config's users)
    from execrl.plugins import PluginError
    try:
        environment_class(_import_path(name))
    except PluginError:
        return True
    return False


def _value(fn: Callable[[Any], Any]):
    """A translation of the value alone."""
    return lambda value, config_dirs: fn(value)


# NeMo key -> (execrl key, value translation)
MAPPED: dict[str, tuple[str, Callable[[Any, Path | None], Any]]] = {
    # NeMo RL's prompt files, read into the prompt (config/nemo_data.py puts every layout's into
    # data.default)
    "data.default.prompt_file": ("prompt.template", _file_text("data.default.prompt_file")),
    "data.default.system_prompt_file": ("prompt.system_prompt", _file_text("data.default.system_prompt_file")),
    **{f"grpo.reward_scaling.{k}": (f"reward.scaling.{k}", _value(lambda v: v))  # (as NeMo RL: before reward_shaping)
       for k in ("enabled", "source_min", "source_max", "target_min", "target_max")},
    # NeMo RL's advantage estimator section (its name must be grpo: refused below otherwise)
    "grpo.adv_estimator.normalize_rewards": ("grpo.normalize_rewards", _value(lambda v: v)),
    "grpo.adv_estimator.use_leave_one_out_baseline": ("grpo.use_leave_one_out_baseline", _value(lambda v: v)),
    "policy.dtensor_cfg.activation_checkpointing": ("policy.activation_checkpointing", _value(bool)),
    "policy.automodel_cfg.activation_checkpointing": ("policy.activation_checkpointing", _value(bool)),
    # (NeMo RL's FSDP2 CPUOffloadPolicy also keeps the gradients on the host: trainer/offload.py)
    "policy.dtensor_cfg.cpu_offload": ("policy.cpu_offload", _value(bool)),
    "policy.automodel_cfg.cpu_offload": ("policy.cpu_offload", _value(bool)),
    # NeMo RL's LoRA (Automodel's PeftConfig) is policy.lora (only while it is enabled: adapt()
    # drops it otherwise)
    **{f"policy.{section}.lora_cfg.{k}": (f"policy.lora.{k}", _value(lambda v: v))
       for section in ("dtensor_cfg", "automodel_cfg")
       for k in ("enabled", "dim", "alpha", "dropout", "dropout_position", "lora_A_init", "target_modules",
                 "exclude_modules", "match_all_linear")},
    # an environment class by import path, as NeMo RL's env_cls names one (refused below unless it
    # is an execrl Environment)
    **{f"env.{name}.env_cls": ("env.multi_turn.kind", _value(lambda v: _import_path(v))) for name in ("math", "code")},
    # the execrl engine generates in place of vLLM (refused below for other backends)
    "policy.generation.backend": ("policy.generation.backend", _value(lambda v: "execrl" if v == "vllm" else v)),
}

# NeMo key or section -> why it changes nothing here
IGNORED: dict[str, str] = {
    "policy.dtensor_cfg": "FSDP2 settings: execrl shards with FSDP2 over cluster.gpus_per_node itself",
    "policy.automodel_cfg": "FSDP2 settings: execrl shards with FSDP2 over cluster.gpus_per_node itself",
    "policy.megatron_cfg": "Megatron settings (off)",
    "policy.dtensor_cfg.lora_cfg.use_triton": "a Triton kernel for the LoRA matmuls (speed)",
    "policy.automodel_cfg.lora_cfg.use_triton": "a Triton kernel for the LoRA matmuls (speed)",
    "policy.sequence_packing": "several sequences packed into one row without padding (speed): execrl pads each "
                               "micro-batch to its longest sequence; policy.dynamic_batching bounds micro-batches "
                               "by tokens",
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
    "policy.generation.delta_compression": "weight transfer to vLLM",
    "policy.optimizer.kwargs.foreach": "AdamW implementation choice",
    "policy.optimizer.kwargs.fused": "AdamW implementation choice",
    "data.num_workers": "data-loader processes",
    "grpo.reward_shaping": "off",
    "loss_fn.seq_logprob_error_in_loss": "not read by NeMo RL's current code (an earlier version's Megatron path)",
    "env.math.num_workers": "math answers are checked in the trainer's process (no workers)",
    "checkpointing.metric_name": "execrl keeps the last keep_top_k checkpoints, not the best by a metric",
    "checkpointing.higher_is_better": "execrl keeps the last keep_top_k checkpoints, not the best by a metric",
    "checkpointing.model_save_format": "execrl saves safetensors",
    "checkpointing.save_consolidated": "execrl saves full (consolidated) HF weights",
    "logger.num_val_samples_to_print": "execrl writes rollouts to rollouts/step_N.jsonl (logger.rollouts_period)",
    "logger.num_train_samples_to_print": "execrl writes rollouts to rollouts/step_N.jsonl (logger.rollouts_period)",
    "data.filter_overlong_prompts": "a key of some recipes that NeMo RL's current code does not read; execrl leaves "
                                    "out prompts of data.max_input_seq_length tokens or more, with a count",
    "logger.gpu_monitoring": "GPU memory is logged on GPUs (memory/peak_gib)",
    "logger.tensorboard": "TensorBoard writes under log_dir/tensorboard",
    "logger.mlflow": "MLflow settings (mlflow_enabled must be false)",
    "logger.swanlab": "SwanLab settings (swanlab_enabled must be false)",
    "cluster.master_port_range_low": "torchrun picks the port",
    "cluster.master_port_range_high": "torchrun picks the port",
    "cluster.segment_size": "Ray placement",
    "grpo.async_grpo.max_generation_failures": "vLLM server retries",
    "grpo.calculate_advantages_on_gpu": "where the advantages are computed",
    "grpo.debug_payload_metrics": "NeMo RL's debug metrics of the payloads its workers exchange",
    "grpo.skip_reference_policy_logprobs_calculation": "execrl computes reference logprobs only with a KL penalty (true "
                                                        "with a KL penalty is refused, as NeMo RL refuses it)",
    "loss_fn.metrics_level": "which metrics are logged",
    "loss_fn.enable_torch_compile": "execrl compiles the decoder layers itself (policy.torch_compile)",
    "grpo.adv_estimator": "settings of NeMo RL's other advantage estimators (this one is grpo)",
    "policy.tokenizer.use_fastokens": "a faster tokenizer implementation",
    "policy.worker_extension_cls_fqn": "NeMo RL's worker classes",
    "policy.generation.worker_extension_cls_fqn": "vLLM worker classes",
    "policy.generation.real_quant_export_cpu_offload": "quantized weight export to vLLM",
    "policy.draft": "draft-model settings (off)",
    "policy.megatron_recipe": "Megatron settings (off)",
    # keys some NeMo RL recipes carry that NeMo RL itself does not read (named, so that nobody
    # thinks they act)
    "policy.lr": "NeMo RL does not read it either: the learning rate is policy.optimizer.kwargs.lr",
    "policy.min_lr": "NeMo RL does not read it either: the schedule is policy.scheduler",
    "policy.weight_decay": "NeMo RL does not read it either: it is policy.optimizer.kwargs.weight_decay",
    "policy.activation_checkpointing_enabled": "NeMo RL does not read it either: it is "
                                               "policy.dtensor_cfg.activation_checkpointing",
    "policy.fsdp_offload_enabled": "NeMo RL does not read it either (memory offloading)",
    "policy.pipeline_model_parallel_size": "NeMo RL does not read it either (parallelism)",
    "policy.tensor_model_parallel_size": "NeMo RL does not read it either (parallelism)",
    "logger.wandb.log_nemo_gym_full_result_tables": "NeMo-Gym tables",
    "checkpointing.load_replay_buffer": "async GRPO's replay buffer: execrl regenerates the in-flight step on resume",
    "checkpointing.save_optimizer": "execrl always saves the optimizer, so that a resume is exact",
    "checkpointing.save_data_plane": "NeMo RL's data plane (off)",
    "data_plane": "NeMo RL's data plane (TransferQueue: how batches move between its workers; execrl's stay in "
                  "the training process)",
    "reward_penalties": "NeMo-Gym reward penalties (off)",
    "telemetry": "NeMo RL's telemetry",
    "env.reward_model.resources": "the reward model runs on the training GPUs, a copy in each training process",
    "env.reward_model.dtensor_cfg": "the reward model is not sharded: a copy in each training process",
    "env.reward_model.dynamic_batching": "the reward model batches conversations of similar lengths itself",
    "env.reward_model.sequence_packing": "the reward model batches conversations of similar lengths itself",
    "env.reward_model.logprob_batch_size": "the reward model reads env.reward_model.batch_size conversations at once",
    "env.reward_model.max_grad_norm": "the reward model is not trained",
    "env.reward_model.generation": "the reward model does not generate",
    "env.reward_model.processor": "the reward model reads each conversation as execrl renders it (its tokenizer's "
                                  "chat template)",
    **{f"env.reward_model.{k}": "the reward model is not trained (a policy's setting)"
       for k in ("offload_optimizer_for_logprob", "optimizer", "scheduler", "train_global_batch_size",
                 "train_micro_batch_size", "refit_buffer_size_gb")},
    **{f"env.reward_model.{k}": "execrl chunks and pads the reward model's batches itself"
       for k in ("make_sequence_length_divisible_by", "logprob_chunk_size")},
    "env.reward_model.megatron_cfg": "Megatron settings (the reward model runs in PyTorch)",
    **{f"data.{k}": "only with data.use_multiple_dataloader (one loader per dataset: not implemented, refused when "
                    "on)" for k in ("num_prompts_per_dataloader", "custom_dataloader")},
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
    "policy.generation.vllm_cfg.logprobs_mode": (lambda v: v not in (None, "processed_logprobs"),
                                                 "the execrl engine returns the logprobs of the distribution it "
                                                 "samples (after temperature, top_p and top_k: vLLM's "
                                                 "processed_logprobs), not the model's raw ones: set "
                                                 "policy.generation.vllm_cfg.logprobs_mode=processed_logprobs"),
    "policy.draft.enabled": (_on, "draft-model (eagle3) co-training is not implemented: set "
                                  "policy.draft.enabled=false"),
    "grpo.reward_shaping.stop_properly_penalty_coef": (lambda v: v is not None, "grpo.reward_shaping."
                                                       "stop_properly_penalty_coef (scaling the reward of truncated "
                                                       "samples) is not implemented: set it to null"),
    "loss_fn.use_kl_in_reward": (_on, "loss_fn.use_kl_in_reward (REINFORCE++: the KL moves into the advantage) is not "
                                      "implemented: set it to false"),
    "loss_fn.positive_example_nll_weight": (lambda v: v not in (None, 0, 0.0), "loss_fn.positive_example_nll_weight "
                                            "(VAPO's NLL on correct samples) is not implemented: set it to 0.0"),
    "policy.tokenizer.is_tokenizer_processor": (_on, "multimodal processors (policy.tokenizer.is_tokenizer_processor) "
                                                     "are not implemented: set it to false"),
    "grpo.deduplicate_multimodal_data": (_on, "multimodal data is not implemented: set "
                                              "grpo.deduplicate_multimodal_data=false"),
    "policy.tokenizer.tokenizer_kwargs": (bool, "policy.tokenizer.tokenizer_kwargs are not passed to the tokenizer here: "
                                                "set them to null"),
    "grpo.adv_estimator.name": (lambda v: v != "grpo", "advantage estimators other than grpo (e.g. REINFORCE++) are "
                                                       "not implemented: set grpo.adv_estimator.name=grpo"),
    "grpo.stop_at_validation_metric": (lambda v: v is not None, "stopping at a validation metric is not implemented: "
                                                                "set grpo.stop_at_validation_metric=null"),
    "grpo.stop_at_validation_threshold": (lambda v: v is not None, "stopping at a validation metric is not "
                                                                   "implemented: set grpo.stop_at_validation_threshold"
                                                                   "=null"),
    "grpo.seq_logprob_error_threshold": (lambda v: v is not None, "grpo.seq_logprob_error_threshold (masking "
                                         "samples whose sampler and trainer logprobs differ) is not implemented: set "
                                         "it to null"),
    "grpo.invalid_tool_call_advantage": (lambda v: v is not None, "grpo.invalid_tool_call_advantage (NeMo-Gym tool "
                                                                  "calls) is not implemented: set it to null"),
    "grpo.malformed_thinking_advantage": (lambda v: v is not None, "grpo.malformed_thinking_advantage is not "
                                                                   "implemented: set it to null"),
    "grpo.async_grpo.in_flight_weight_updates": (_on, "in-flight weight updates are not implemented: set "
                                                      "grpo.async_grpo.in_flight_weight_updates=false"),
    "grpo.async_grpo.recompute_kv_cache_after_weight_updates": (_on, "in-flight weight updates are not implemented: "
                                                                     "set grpo.async_grpo.recompute_kv_cache_after_"
                                                                     "weight_updates=false"),
    "data.use_multiple_dataloader": (_on, "one data loader per dataset is not implemented (execrl draws from all of "
                                          "them together): set data.use_multiple_dataloader=false"),
    "data.add_system_prompt": (_on, "data.add_system_prompt is not implemented: set prompt.system_prompt instead"),
    "reward_penalties": (_on, "NeMo-Gym reward penalties are not implemented: set the reward_penalties to false"),
    "on_policy_distillation": (lambda v: v is not None, "on-policy distillation is not implemented: set "
                                                        "on_policy_distillation: null"),
    "env.reward_model.checkpoint_path": (lambda v: v is not None, "env.reward_model.checkpoint_path (weights from a "
                                         "NeMo RL checkpoint) is not read here: set env.reward_model.model_name to a "
                                         "directory in HF format instead, and checkpoint_path=null"),
    "policy.router_replay.enabled": (_on, "router replay (a mixture-of-experts model trained with the experts its "
                                          "generation chose) is not implemented: set policy.router_replay.enabled="
                                          "false"),
    **{f"env.{name}.env_cls": (_foreign_environment, f"env.{name}.env_cls names a class that is not an execrl "
                                "Environment (NeMo RL's environments are Ray actors of another interface and do "
                                "not run here): remove the key to grade with execrl's own environment, or name a "
                                "subclass of execrl.envs.Environment, as package.module.Class or path/to/file.py:"
                                "Class (docs/environments.md)") for name in ("math", "code")},
    "logger.mlflow_enabled": (_on, "MLflow logging is not implemented: set logger.mlflow_enabled=false (TensorBoard "
                                   "and W&B are)"),
    "logger.swanlab_enabled": (_on, "SwanLab logging is not implemented: set logger.swanlab_enabled=false (TensorBoard "
                                    "and W&B are)"),
}


def sliding_puzzle(tree: dict) -> str | None:
    """NeMo RL's sliding-puzzle config (env.sliding_puzzle_game, run by its
    run_grpo_sliding_puzzle.py): in place, the environment becomes execrl's (env.multi_turn.kind
    sliding_puzzle, its max_moves, the board after a move told as a user message), and the problems
    the generated dataset `sliding_puzzle` with its game_config and grpo.seed, for training and
    max_val_samples for validation, as that script makes them (it reads no data.train or
    validation). Returns why the config's own datasets are not read (None: not a sliding-puzzle
    config)."""
    env = tree.get("env") or {}
    game = env.pop("sliding_puzzle_game", None)
    if game is None:
        return None
    cfg = (game or {}).get("cfg") or {}
    options = {k: v for k, v in (cfg.get("game_config") or {}).items() if k in ("size", "shuffle_moves")}
    options["seed"] = (tree.get("grpo") or {}).get("seed", 42)
    multi = env.setdefault("multi_turn", {})
    multi.update(kind="sliding_puzzle", observation_role="user")
    if cfg.get("max_moves") is not None:
        env.setdefault("sliding_puzzle", {})["max_moves"] = cfg["max_moves"]
    data = tree.setdefault("data", {})
    for key in [k for k in data if k not in ("shuffle", "max_input_seq_length", "add_system_prompt", "default")]:
        data.pop(key)
    data["default"] = {"env_name": "auto", "processor": "auto"}  # (no prompt file: the puzzle poses itself)
    count = (tree.get("grpo") or {}).get("max_val_samples")
    data["train"] = {"dataset_name": "sliding_puzzle", "options": options}
    data["validation"] = {"dataset_name": "sliding_puzzle", "split": "validation",
                          "options": options | ({"count": count} if count else {})}
    return "the problems are the generated sliding_puzzle dataset, as NeMo RL's script makes them"


def refuse_unresolved(tree: dict) -> None:
    """For a config that does not resolve (e.g. `${oc.env:HF_HOME}` unset): raises the refusal of a
    feature it turns on with a literal value (Megatron, ...), which says more than the missing
    variable; returns if there is none."""
    refuse({k: v for k, v in dotted_leaves(tree) if not (isinstance(v, str) and "${" in v)})


def refuse(leaves: dict) -> None:
    """Raises the refusal of the first feature (in REFUSED's order: the most basic first) these keys
    turn on."""
    refused_at = {key: _section_of(key, REFUSED) for key in leaves}  # the REFUSED entry each key falls under
    for refused, (on, why) in REFUSED.items():
        if any(on(leaves[key]) for key, entry in refused_at.items() if entry == refused):
            raise ConfigError(why)


WRITTEN = ("inherited", "file", "override")  # where a key was written: by a file the config inherits (defaults:),
# by the config file, on the command line; a later one wins


def adapt(tree: dict, known: Callable[[str], bool], config_dirs: list[Path] = (),
          given: dict[str, str] | None = None) -> tuple[dict, dict[str, str], dict[str, str]]:
    """A resolved config tree with NeMo RL's own keys translated: (the tree for execrl's schema,
    {ignored key or section: why}, {mapped key: what it became}). `known(key)`: whether execrl's
    schema has the key; `config_dirs`: the folders of the config file and of the files it inherits (where
    relative file paths are also looked for); `given`: {dotted key: WRITTEN's word} for the keys the user wrote, so
    that a NeMo key and its execrl name set to different values resolve as the later word says (the command line's
    over the file's, the file's over what it inherits) or are refused (both at one level). Raises ConfigError naming
    a refused feature or such a conflict."""
    given = given or {}
    puzzle = sliding_puzzle(tree)
    ignored, mapped = adapt_data(tree["data"], tree.get("grpo", {}).get("seed")) if isinstance(
        tree.get("data"), dict) else ({}, {})
    if puzzle:
        ignored["data.train"] = ignored["data.validation"] = puzzle
    leaves = dict(dotted_leaves(tree))
    if not _on(leaves.get("grpo.reward_scaling.enabled")):  # its settings say nothing while it is off
        leaves = {k: v for k, v in leaves.items() if not k.startswith("grpo.reward_scaling.")}
        if "reward_scaling" in (tree.get("grpo") or {}):
            ignored["grpo.reward_scaling"] = "off"
    # NeMo RL's reward-model environment scores where data.default.env_name names it (run_grpo.py),
    # or every task where the section is enabled (run_grpo_rm.py, which ignores env_name)
    judged = _on(leaves.get("env.reward_model.enabled")) or leaves.get("data.default.env_name") == "reward_model"
    for section in ("policy.dtensor_cfg.lora_cfg", "policy.automodel_cfg.lora_cfg", "env.reward_model"):
        on = judged if section == "env.reward_model" else _on(leaves.get(f"{section}.enabled"))
        # (as above) NeMo RL's keys of a section that is off; execrl's own keys stay (a setting of
        # one while it is off is refused by config.checks)
        off = [k for k in leaves if k.startswith(section + ".") and not (section == "env.reward_model" and known(k))]
        if section.endswith("lora_cfg") and f"{section}.enabled" in off and _on(leaves.get("policy.lora.enabled")) \
                and given.get(f"{section}.enabled") in ("file", "override"):  # (a hunt's find: dropped)
            off.remove(f"{section}.enabled")  # written false by the user over LoRA turned on: read as policy.lora's
        if not on and off:
            leaves = {k: v for k, v in leaves.items() if k not in off}
            ignored[section] = "off"
    refuse(leaves)
    if _on(leaves.get("grpo.use_dynamic_sampling")) and _on(leaves.get("grpo.use_leave_one_out_baseline")) and \
            not _on(leaves.get("grpo.adv_estimator.use_leave_one_out_baseline", True)):
        # (NeMo RL reads the two keys apart: grpo's for dynamic sampling's filter, adv_estimator's for the advantages)
        raise ConfigError("grpo.use_dynamic_sampling with grpo.use_leave_one_out_baseline=true: NeMo RL's dynamic "
                          "sampling then filters single samples by the std of the others (dropping a group's lone "
                          "success), whatever grpo.adv_estimator.use_leave_one_out_baseline (false here) says of the "
                          "advantages; execrl keeps groups whole, as DAPO does: set grpo.use_leave_one_out_baseline="
                          "false (as NeMo RL's DAPO recipes do)")
    if _on(leaves.get("grpo.skip_reference_policy_logprobs_calculation")) and \
            float(leaves.get("loss_fn.reference_policy_kl_penalty") or 0) != 0:  # (NeMo RL asserts the same)
        raise ConfigError("grpo.skip_reference_policy_logprobs_calculation=true needs "
                          "loss_fn.reference_policy_kl_penalty=0 (the KL term reads the reference's logprobs), as NeMo "
                          "RL asserts: set one of them")
    if "policy.optimizer" in leaves and leaves["policy.optimizer"] is None:  # (Megatron recipes: megatron_cfg's own)
        raise ConfigError("policy.optimizer is null, as in NeMo RL's Megatron recipes (whose optimizer is "
                          "policy.megatron_cfg.optimizer, not run here): give the DTensor path one, e.g. "
                          "policy.optimizer.name=torch.optim.AdamW policy.optimizer.kwargs.lr=3e-7, or delete the "
                          "null for execrl's default")
    refused_at = {key: _section_of(key, REFUSED) for key in leaves}  # (what is off of a refusable feature: ignored)
    out: dict = {}
    later: list[tuple[str, Any]] = []  # mapped values, put last: they win over the schema's defaults of their keys
    for key, value in leaves.items():
        section = _section_of(key, IGNORED)
        if key in MAPPED:
            target, translate = MAPPED[key]
            if value is None:  # the setting stays as configured; but NeMo RL poses the bare problem where a config
                if key == "data.default.prompt_file" and key in given and "prompt.add_instructions" not in given:
                    later.append(("prompt.add_instructions", False))  # sets its prompt file to null
                    mapped[key] = "prompt.add_instructions=False (null: the problem as it is, no instruction added)"
                continue
            translated = translate(value, config_dirs)
            if target != key and given.get(target) and translated != leaves.get(target):
                # the later word wins (a config file over the files it inherits, the command line over both); one
                # setting written two ways at one level is refused
                mine, theirs = (WRITTEN.index(given.get(k) or "file") for k in (key, target))
                if theirs > mine:
                    where = "on the command line" if given[target] == "override" else "in the config file"
                    mapped[key] = f"not applied: {target}={leaves.get(target)} {where} wins"
                    continue
                if mine == theirs and key.startswith("grpo.adv_estimator."):  # (two settings in NeMo RL)
                    raise ConfigError(f"{key}={value} and {target}={leaves.get(target)}: NeMo RL's current code reads "
                                      f"the first for the advantages and the second only to filter dynamic sampling's "
                                      "groups; execrl has one setting for both: give them the same value")
                if mine == theirs:
                    raise ConfigError(f"{key}={value} (NeMo RL's name) and {target}={leaves.get(target)} (execrl's) "
                                      "set one setting two ways: keep one of them")
            later.append((target, translated))
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
        elif refused_at[key] is not None:
            ignored[refused_at[key]] = "off"
        else:
            _put(out, key, value)  # unknown: the schema's error names the closest valid key
    if _on(leaves.get("policy.sequence_packing.enabled")) and not _on(leaves.get("policy.dynamic_batching.enabled")):
        # NeMo RL's packing bounds each micro-batch by tokens; execrl pads instead of packing, within
        # the same budget (where the command line sets dynamic_batching's own, that one)
        budgets = {f"policy.dynamic_batching.{k}": leaves[f"policy.sequence_packing.{k}"]
                   for k in ("train_mb_tokens", "logprob_mb_tokens") if leaves.get(f"policy.sequence_packing.{k}")
                   and given.get(f"policy.dynamic_batching.{k}") != "override"}
        later += [("policy.dynamic_batching.enabled", True), *budgets.items()]
        mapped["policy.sequence_packing"] = ("policy.dynamic_batching (micro-batches within the same token budgets, "
                                             "each padded to its longest sequence: execrl does not pack)")
        ignored.pop("policy.sequence_packing", None)
    if leaves.get("policy.generation.backend") == "vllm" and given.get("policy.generation_batch_size") != "override":
        # NeMo RL reads generation_batch_size only for static-batched (framework) generation: vLLM decodes a
        # step's samples together, as many as its KV cache holds; so does the engine with null
        later.append(("policy.generation_batch_size", None))
        mapped["policy.generation_batch_size"] = (
            f"null (was {leaves.get('policy.generation_batch_size', 'unset')}): with vLLM, NeMo RL decodes a step's "
            "samples together, as many as the KV cache holds, and so does the execrl engine "
            "(policy.generation_batch_size=N on the command line bounds it)")
    if leaves.get("policy.generation.backend") == "vllm":  # a config of NeMo RL's from before its val_* keys: it
        # validated as it sampled (its current base config sets them to ${.temperature} and so on); execrl's default
        # is greedy
        gen = "policy.generation."
        for k in ("temperature", "top_p", "top_k"):
            if gen + "val_" + k not in given and gen + k in leaves:  # (leaves hold the schema's defaults too)
                later.append((gen + "val_" + k, leaves[gen + k]))
                mapped[gen + "val_" + k] = (f"{leaves[gen + k]} (not in the config: NeMo RL then validated with "
                                            f"{gen + k}, as its current configs set it)")
    for target, value in later:
        _put(out, target, value)
    for key, value in from_nemo(leaves, _on(leaves.get("env.reward_model.enabled"))).items():
        _put(out, key, value)
        mapped[key] = f"{key}={value} (NeMo RL's reward-model environment scores every task)"
    if _on(leaves.get("grpo.reward_shaping.enabled")):  # DAPO's overlong penalty, added to the reward
        keys = ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")
        missing = [f"grpo.reward_shaping.{k}" for k in keys if leaves.get(f"grpo.reward_shaping.{k}") is None]
        if missing:  # (NeMo RL raises on the first step)
            raise ConfigError(f"grpo.reward_shaping.enabled needs {' and '.join(missing)} (NeMo RL's DAPO "
                              "recipes: 4096, 1.0 and ${policy.max_total_sequence_length})")
        if float(leaves["grpo.reward_shaping.overlong_buffer_penalty"]) < 0:
            raise ConfigError("grpo.reward_shaping.overlong_buffer_penalty must be >= 0 (as NeMo RL asserts)")
        shaping = {"name": "overlong_penalty", "scaled": False,  # NeMo RL adds it after grpo.reward_scaling
                   "weight": float(leaves["grpo.reward_shaping.overlong_buffer_penalty"]),
                   "buffer_tokens": int(leaves["grpo.reward_shaping.overlong_buffer_length"]),
                   "max_tokens": int(leaves["grpo.reward_shaping.max_response_length"]),
                   "floor": False}  # NeMo RL's penalty goes on down past max_response_length
        out.setdefault("reward", {}).setdefault("components", []).append(shaping)
        mapped["grpo.reward_shaping"] = f"reward.components += {shaping}"
        ignored.pop("grpo.reward_shaping", None)
    return out, ignored, mapped


def _section_of(key: str, table: dict) -> str | None:
    """The entry of `table` that is `key` or a section above it (the longest), if any."""
    return max((k for k in table if key == k or key.startswith(k + ".")), key=len, default=None)


def _put(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value
