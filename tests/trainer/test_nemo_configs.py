"""NeMo RL's own config keys: a GRPO config written for NeMo RL's DTensor path with colocated vLLM loads, its keys
for NeMo's machinery mapped or named in one note; the features execrl lacks are refused in one line each."""

import subprocess
import sys

import pytest

from execrl.config import ConfigError, load_config
from execrl.config.checks import no_effect_note

# the shape of a NeMo RL GRPO config's policy, checkpointing, logger and cluster sections (values as NeMo's examples)
NEMO_STYLE = """
grpo:
  num_prompts_per_step: 4
  num_generations_per_prompt: 4
  skip_reference_policy_logprobs_calculation: false
loss_fn:
  reference_policy_kl_penalty: 0.01
  metrics_level: full
checkpointing:
  enabled: true
  checkpoint_dir: {tmp}/ckpt
  metric_name: "val:accuracy"
  higher_is_better: true
  keep_top_k: 3
  save_period: 10
  model_save_format: safetensors
  save_consolidated: false
policy:
  train_global_batch_size: 16
  train_micro_batch_size: 4
  logprob_batch_size: ${{policy.train_micro_batch_size}}
  max_total_sequence_length: 512
  precision: bfloat16
  logprob_chunk_size: null
  make_sequence_length_divisible_by: ${{policy.dtensor_cfg.tensor_parallel_size}}
  dtensor_cfg:
    enabled: true
    _v2: true
    cpu_offload: false
    sequence_parallel: false
    activation_checkpointing: true
    tensor_parallel_size: 1
    context_parallel_size: 1
    custom_parallel_plan: null
    lora_cfg: {{enabled: false, dim: 8, alpha: 32}}
  megatron_cfg:
    enabled: false
    tensor_model_parallel_size: 1
    optimizer: {{lr: 5.0e-6}}
  dynamic_batching:
    enabled: false
    train_mb_tokens: ${{mul:${{policy.max_total_sequence_length}}, ${{policy.train_micro_batch_size}}}}
    sequence_length_round: 64
  sequence_packing:
    enabled: true
    train_mb_tokens: ${{mul:${{policy.max_total_sequence_length}}, ${{policy.train_micro_batch_size}}}}
    algorithm: modified_first_fit_decreasing
  optimizer:
    name: torch.optim.AdamW
    kwargs: {{lr: 5.0e-6, weight_decay: 0.01, betas: [0.9, 0.999], eps: 1e-8, foreach: false, fused: false}}
  generation:
    backend: vllm
    max_new_tokens: ${{policy.max_total_sequence_length}}
    temperature: 1.0
    top_p: 1.0
    top_k: null
    vllm_cfg:
      async_engine: false
      precision: ${{policy.precision}}
      kv_cache_dtype: auto
      tensor_parallel_size: 1
      gpu_memory_utilization: 0.6
      max_model_len: ${{policy.max_total_sequence_length}}
      enforce_eager: false
    colocated:
      enabled: true
      resources: {{gpus_per_node: null, num_nodes: null}}
logger:
  log_dir: {tmp}/logs
  num_val_samples_to_print: 0
  wandb_enabled: false
  tensorboard_enabled: true
  mlflow_enabled: false
  monitor_gpus: true
  tensorboard: {{}}
  mlflow: {{experiment_name: grpo-dev, run_name: grpo-dev-logger}}
  gpu_monitoring: {{collection_interval: 10, flush_interval: 10}}
cluster:
  gpus_per_node: 1
  num_nodes: 1
"""


def write(tmp_path, text=NEMO_STYLE):
    path = tmp_path / "nemo.yaml"
    path.write_text(text.format(tmp=tmp_path))
    return path


def test_a_nemo_style_config_loads_with_its_machinery_named_in_one_note(tmp_path):
    cfg = load_config(str(write(tmp_path)))
    assert cfg.policy.generation.backend == "execrl"  # vllm: the execrl engine stands in for it
    assert cfg.policy.activation_checkpointing is True  # from policy.dtensor_cfg
    assert cfg.policy.optimizer.kwargs == {"lr": 5e-6, "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}
    note = no_effect_note(cfg)
    for section in ("policy.dtensor_cfg", "policy.megatron_cfg", "policy.sequence_packing", "policy.dynamic_batching",
                    "checkpointing.metric_name", "logger.gpu_monitoring", "logger.mlflow_enabled (off)"):
        assert section in note, section
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", str(tmp_path / "nemo.yaml"), "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "note: accepted, with no effect here:" in proc.stderr and "policy.dtensor_cfg" in proc.stderr
    assert "note: NeMo RL keys read as: " in proc.stderr
    assert "policy.dtensor_cfg.activation_checkpointing -> policy.activation_checkpointing=True" in proc.stderr
    assert "policy.generation.backend -> policy.generation.backend=execrl" in proc.stderr


@pytest.mark.parametrize("override, message", [
    ("policy.megatron_cfg.enabled=true", "Megatron-backed training is not implemented"),
    ("policy.generation.colocated.enabled=false", "non-colocated generation"),
    ("policy.generation.backend=sglang", "generation backends other than vLLM"),
    ("policy.dtensor_cfg.lora_cfg.enabled=true", "LoRA is not implemented"),
    ("policy.generation.vllm_cfg.precision=fp8", "fp8 rollouts"),
    ("logger.mlflow_enabled=true", "MLflow logging is not implemented"),
    ("policy.scheduler=[{name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.1}}, {milestones: [50]}]",
     "NeMo RL's torch schedulers"),
    ("policy.dtensor_cfg.no_such_key=1", None),  # a section NeMo owns: ignored with it
])
def test_features_execrl_lacks_are_refused_in_one_line(tmp_path, override, message):
    path = write(tmp_path)
    if message is None:
        load_config(str(path), [override])
        return
    with pytest.raises(ConfigError, match=message):
        load_config(str(path), [override])


def test_a_key_nobody_knows_is_still_an_error_naming_the_closest(tmp_path):
    with pytest.raises(ConfigError, match="did you mean policy.max_total_sequence_length"):
        load_config(str(write(tmp_path)), ["policy.max_total_sequence_lenght=8"])


def test_nemo_data_and_env_sections(tmp_path):
    """NeMo RL's data section: prompt and system-prompt files (read into prompt.template / prompt.system_prompt),
    data_path, the split seed (must be grpo.seed), env.math; the older flat data.dataset_name."""
    (tmp_path / "cot.txt").write_text("Solve it. Put the answer in \\\\boxed{{}}.\n{}\n")
    (tmp_path / "system.txt").write_text("You are careful.")
    (tmp_path / "r.yaml").write_text(
        "grpo: {seed: 7}\n"
        f"data:\n  train:\n    dataset_name: gsm8k\n    data_path: {tmp_path}\n    seed: ${{grpo.seed}}\n"
        f"  default:\n    prompt_file: {tmp_path / 'cot.txt'}\n    system_prompt_file: {tmp_path / 'system.txt'}\n"
        "    processor: math_hf_data_processor\n    env_name: math\n"
        "env:\n  math: {num_workers: 8, math_verify_impl: hf_math_verify}\n")
    cfg = load_config(str(tmp_path / "r.yaml"))
    assert cfg.prompt.template == "Solve it. Put the answer in \\\\boxed{{}}.\n{}\n"
    assert cfg.prompt.system_prompt == "You are careful." and cfg.data.train.path == str(tmp_path)
    from execrl.prompts import build_messages
    from execrl.tasks import Problem

    messages = build_messages(Problem("p", [{"role": "user", "content": "2+2? {x}"}], "math", answer="4"), cfg.prompt)
    assert messages == [{"role": "system", "content": "You are careful."},
                        {"role": "user", "content": "Solve it. Put the answer in \\\\boxed{}.\n2+2? {x}\n"}]
    assert "env.math.num_workers" in no_effect_note(cfg) and "data.train.seed" in no_effect_note(cfg)
    with pytest.raises(ConfigError, match="differs from grpo.seed"):
        load_config(str(tmp_path / "r.yaml"), ["data.train.seed=3"])
    with pytest.raises(ConfigError, match="math_verify_impl other than hf_math_verify"):
        load_config(str(tmp_path / "r.yaml"), ["env.math.math_verify_impl=dapo_math_verify"])
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(str(tmp_path / "r.yaml"), ["data.default.prompt_file=examples/prompts/cot.txt"])
    flat = load_config(None, ["++data.dataset_name=mbpp"])  # NeMo RL's older flat data section
    assert flat.data.train.dataset_name == "mbpp"


def test_dapo_reward_shaping_becomes_the_overlong_penalty_component(tmp_path):
    cfg = load_config(None, ["++grpo.reward_shaping.enabled=true", "++grpo.reward_shaping.overlong_buffer_length=128",
                             "++grpo.reward_shaping.overlong_buffer_penalty=1.0",
                             "++grpo.reward_shaping.max_response_length=${policy.max_total_sequence_length}"])
    shaping = cfg.reward.components[-1]
    assert shaping.name == "overlong_penalty" and shaping.weight == 1.0
    assert shaping.params == {"buffer_tokens": 128, "max_tokens": cfg.policy.max_total_sequence_length}
    from execrl.rewards import Sample
    from execrl.rewards.text import overlong_penalty

    # NeMo RL: min(-(len - (max_len - buffer)) / buffer * penalty, 0); max_len 192, buffer 128: len 128 -> -0.5
    assert overlong_penalty(Sample(None, "", None, num_tokens=128, max_tokens=64), 128, 192) == -0.5
    off = load_config(None, ["++grpo.reward_shaping.enabled=false", "++grpo.reward_shaping.overlong_buffer_length=128"])
    assert [c.name for c in off.reward.components] == ["test_pass_fraction"]
    with pytest.raises(ConfigError, match="stop_properly_penalty_coef"):
        load_config(None, ["++grpo.reward_shaping.stop_properly_penalty_coef=0.5"])


def test_val_at_end_validates_after_the_last_step(tmp_path):
    from execrl.trainer.loop import train

    from .test_train import SMALL, metrics

    train(load_config(None, [*SMALL, "grpo.max_num_steps=3", "grpo.val_period=2", "grpo.val_at_end=true",
                             "warmup.sft_steps=0", "checkpointing.enabled=false", f"logger.log_dir={tmp_path}"]))
    assert [r["step"] for r in metrics(tmp_path) if "eval/pass@1" in r] == [2, 3]
