"""NeMo RL's own config keys: a GRPO config written for NeMo RL's DTensor path with colocated vLLM loads, its keys
for NeMo's machinery mapped or named in one note; the features execrl lacks are refused in one line each."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from execrl.config import ConfigError, load_config
from execrl.config.checks import no_effect_note, validate
from execrl.tasks import DatasetError

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


def test_execrl_s_name_on_the_command_line_wins_over_the_nemo_key_in_the_file_and_two_ways_in_one_place_are_refused(
        tmp_path):
    """policy.dtensor_cfg.activation_checkpointing: true in the file; the memory plan's advice
    `policy.activation_checkpointing=false` on the command line is what runs (it was overwritten by the
    file's NeMo key, silently)."""
    path = str(write(tmp_path))
    cfg = load_config(path, ["policy.activation_checkpointing=false"])
    assert cfg.policy.activation_checkpointing is False
    assert "on the command line wins" in cfg._nemo_mapped["policy.dtensor_cfg.activation_checkpointing"]
    assert load_config(path, ["policy.dtensor_cfg.activation_checkpointing=false"]).policy.activation_checkpointing \
        is False  # NeMo's own name on the command line: as before
    assert load_config(path, ["policy.activation_checkpointing=true"]).policy.activation_checkpointing is True
    with pytest.raises(ConfigError, match="set one setting two ways: keep one"):
        load_config(path, ["policy.activation_checkpointing=false", "policy.dtensor_cfg.activation_checkpointing=true"])
    both = tmp_path / "both.yaml"
    both.write_text(write(tmp_path).read_text().replace("  dtensor_cfg:\n", "  activation_checkpointing: false\n"
                                                        "  dtensor_cfg:\n", 1))
    with pytest.raises(ConfigError, match=r"policy.dtensor_cfg.activation_checkpointing=True \(NeMo RL's name\) and "
                                          r"policy.activation_checkpointing=False"):
        load_config(str(both))
    # (a review's find) a recipe's own NeMo key over both names in the file it inherits: the recipe's word wins (it
    # was refused as two ways in one file, where NeMo RL reads the recipe's); the other way round as well
    (tmp_path / "base.yaml").write_text("grpo:\n  use_leave_one_out_baseline: true\n  adv_estimator:\n"
                                        "    use_leave_one_out_baseline: true\n")
    (tmp_path / "recipe.yaml").write_text("defaults: base.yaml\ngrpo: {adv_estimator: {use_leave_one_out_baseline: "
                                          "false}}\n")
    assert load_config(str(tmp_path / "recipe.yaml")).grpo.use_leave_one_out_baseline is False
    (tmp_path / "mine.yaml").write_text("defaults: base.yaml\ngrpo: {use_leave_one_out_baseline: false}\n")
    mine = load_config(str(tmp_path / "mine.yaml"))
    assert mine.grpo.use_leave_one_out_baseline is False
    assert "in the config file wins" in mine._nemo_mapped["grpo.adv_estimator.use_leave_one_out_baseline"]


def test_generation_batch_size_under_vllm_is_every_sample_at_once_as_nemo_rl_decodes(tmp_path):
    """NeMo RL reads policy.generation_batch_size only for static-batched generation ("Only used when generating
    using HF backend"); with vLLM a step's samples decode together. Read as the engine's slots, a NeMo config's 32
    decoded 512 samples 32 at a time, several times slower, without a word."""
    path = str(write(tmp_path, NEMO_STYLE.replace("  logprob_chunk_size: null", "  logprob_chunk_size: null\n"
                                                                                "  generation_batch_size: 32")))
    cfg = load_config(path, [])
    assert cfg.policy.generation_batch_size is None
    assert cfg._nemo_mapped["policy.generation_batch_size"].startswith("null (was 32): with vLLM, NeMo RL decodes")
    cfg = load_config(path, ["policy.generation_batch_size=8"])  # the command line bounds it
    assert cfg.policy.generation_batch_size == 8 and "policy.generation_batch_size" not in cfg._nemo_mapped
    own = load_config(path, ["policy.generation.backend=execrl"])  # execrl's own engine named: its key as written
    assert own.policy.generation_batch_size == 32
    (tmp_path / "unset").mkdir()
    assert load_config(str(write(tmp_path / "unset")), []).policy.generation_batch_size is None  # (unset: the same)


@pytest.mark.parametrize("override, message", [
    ("policy.megatron_cfg.enabled=true", "Megatron-backed training is not implemented"),
    ("policy.generation.colocated.enabled=false", "non-colocated generation"),
    ("policy.generation.backend=sglang", "generation backends other than vLLM"),
    ("policy.dtensor_cfg.lora_cfg.enabled=true", None),  # read as policy.lora (tests/lora)
    ("policy.dtensor_cfg.lora_cfg={enabled: true, dropout: 0.1}", "dropout_position=post"),
    ("policy.generation.vllm_cfg.precision=fp8", "fp8 rollouts"),
    ("policy.generation.vllm_cfg.logprobs_mode=raw_logprobs", "logprobs_mode=processed_logprobs"),
    ("policy.generation.vllm_cfg.logprobs_mode=processed_logprobs", None),
    ("grpo.batch_multiplier=2", "batch_multiplier>1 can only be used if use_dynamic_sampling=True"),
    ("logger.mlflow_enabled=true", "MLflow logging is not implemented"),
    ("policy.scheduler=[{name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.1}}, {milestones: [50]}]",
     None),  # one scheduler, its milestones unused
    ("policy.scheduler=[{name: torch.optim.lr_scheduler.LinearLR}, {name: torch.optim.lr_scheduler.ConstantLR}]",
     "2 schedulers need one {milestones"),
    ("policy.scheduler={name: torch.optim.lr_scheduler.LambdaLR, kwargs: {}}", "not a scheduler execrl builds"),
    ("policy.scheduler={name: my_module.MyScheduler}", "not a scheduler execrl builds"),
    ("policy.dtensor_cfg.no_such_key=1", None),  # a section NeMo owns: ignored with it
    ("grpo.deduplicate_multimodal_data=true", "multimodal data is not implemented"),
    ("grpo.deduplicate_multimodal_data=false", None),  # (NeMo RL's current keys: "unknown key" before)
    ("grpo.debug_payload_metrics=true", None),
])
def test_features_execrl_lacks_are_refused_in_one_line(tmp_path, override, message):
    path = write(tmp_path)
    if message is None:
        load_config(str(path), [override])
        return
    with pytest.raises(ConfigError, match=message):
        validate(load_config(str(path), [override]))


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
        "    processor: math_data_processor\n    env_name: math\n"
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
    dapo = load_config(str(tmp_path / "r.yaml"), ["env.math.math_verify_impl=dapo_math_verify"])
    assert dapo.env.math.math_verify_impl == "dapo_math_verify"
    with pytest.raises(ConfigError, match="env.math.math_verify_impl: Input should be"):
        load_config(str(tmp_path / "r.yaml"), ["env.math.math_verify_impl=my_verifier"])
    with pytest.raises(ConfigError, match="no such file in the directory you run in or above the config file"):
        load_config(str(tmp_path / "r.yaml"), ["data.default.prompt_file=examples/prompts/cot.txt"])
    # as NeMo RL's current code, its default processor adds the system prompt too (it was dropped and named unused)
    hf = load_config(str(tmp_path / "r.yaml"), ["data.default.processor=math_hf_data_processor"])
    assert hf.prompt.system_prompt == "You are careful." and "accepted, with no effect here: data.default.system_prompt_file" not in no_effect_note(hf)
    flat = load_config(None, ["++data.dataset_name=mbpp"])  # NeMo RL's older flat data section
    assert flat.data.train.dataset_name == "mbpp"


def test_nemo_dataset_lists_defaults_and_prompt_files_of_a_checkout(tmp_path):
    """A NeMo RL checkout's layout: examples/configs/x.yaml overrides its base's data section (`_override_`) with
    lists of datasets; examples/prompts/cot.txt is found from anywhere; per-dataset prompts must agree."""
    configs, prompts = tmp_path / "nemo" / "examples" / "configs", tmp_path / "nemo" / "examples" / "prompts"
    configs.mkdir(parents=True), prompts.mkdir(parents=True)
    (prompts / "cot.txt").write_text("Think. {}")
    (configs / "base.yaml").write_text(
        "grpo: {seed: 42}\ndata:\n  train:\n    dataset_name: OpenMathInstruct-2\n    split_validation_size: 0.05\n"
        "    seed: ${grpo.seed}\n  validation: null\n  default: {prompt_file: examples/prompts/cot.txt, "
        "system_prompt_file: null, processor: math_hf_data_processor, env_name: math}\n")
    (configs / "multi.yaml").write_text(
        "defaults: base.yaml\ndata:\n  _override_: true\n  train:\n    - dataset_name: OpenMathInstruct-2\n"
        "      split_validation_size: 0.05\n      seed: ${grpo.seed}\n    - dataset_name: DeepScaler\n  validation:\n"
        "    - {dataset_name: AIME2024, repeat: 16}\n    - dataset_name: DAPOMathAIME2024\n"
        "  default: {prompt_file: examples/prompts/cot.txt, processor: math_hf_data_processor, env_name: math}\n")
    cfg = load_config(str(configs / "multi.yaml"))  # (run from the test's directory, not the checkout)
    assert [d.dataset_name for d in cfg.data.train_sets] == ["OpenMathInstruct-2", "DeepScaler"]
    assert [(d.dataset_name, d.repeat) for d in cfg.data.validation_sets] == [("AIME2024", 16), ("DAPOMathAIME2024", 1)]
    assert cfg.prompt.template == "Think. {}" and cfg.data.train_sets[0].split_name == "train_1M"
    validate(cfg)
    with pytest.raises(ConfigError, match="different prompt_files"):
        load_config(str(configs / "multi.yaml"), ["data.validation.1.prompt_file=null"])
    with pytest.raises(ConfigError, match=r"data.train\[1\]: AIME2024/train is an evaluation split"):
        validate(load_config(str(configs / "multi.yaml"), ["data.train.1.dataset_name=AIME2024"]))
    with pytest.raises(ConfigError, match="did you mean 'DeepScaler'"):
        validate(load_config(str(configs / "multi.yaml"), ["data.train.1.dataset_name=Deepscaler"]))
    (configs / "merged.yaml").write_text("defaults: base.yaml\ndata:\n  train:\n    - dataset_name: DeepScaler\n")
    # a list where the defaults have a mapping replaces it (NeMo RL's merge refuses the file)
    assert [d.dataset_name for d in load_config(str(configs / "merged.yaml")).data.train_sets] == ["DeepScaler"]
    # a config of one's own elsewhere inheriting the checkout's: the prompt file is found above the inherited file
    (tmp_path / "mine.yaml").write_text(f"defaults: {configs / 'base.yaml'}\ngrpo: {{seed: 7}}\n")
    assert load_config(str(tmp_path / "mine.yaml")).prompt.template == "Think. {}"


def test_nemo_datasets_load_local_copies_in_their_own_fields(tmp_path, capsys):
    """The NeMo RL names read NeMo RL's fields (DAPO: prompt[0].content and reward_model.ground_truth, verbatim),
    from a local copy; a validation set's repeat poses each problem that many times."""
    import json

    from execrl.trainer.data import load_data

    (tmp_path / "dapo").mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"Solve {i}. Answer: $Answer"}],
             "reward_model": {"ground_truth": str(i)}} for i in range(4)] + [{"prompt": []}]
    (tmp_path / "dapo" / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "aime.jsonl").write_text("\n".join(json.dumps({"problem": f"P{i}", "answer": 100 + i})
                                                   for i in range(2)))
    cfg = load_config(None, [f"data.train={{dataset_name: DAPOMath17K, path: {tmp_path / 'dapo'}}}",
                             f"data.validation={{dataset_name: AIME2024, path: {tmp_path / 'aime.jsonl'}, repeat: 3}}"])
    train, val, _ = load_data(cfg)
    assert [(p.messages[0]["content"], p.answer, p.kind) for p in train[:2]] == [
        ("Solve 0. Answer: $Answer", "0", "math"), ("Solve 1. Answer: $Answer", "1", "math")]
    assert len(train) == 4 and [p.answer for p in val] == ["100", "101"] * 3  # (the set 3 times, as NeMo RL's copies)
    # the config's check for every math problem, as NeMo RL; DAPO's prompts ask for dapo_math_verify's: a warning
    from execrl.rewards.math_answers import VERIFIER
    assert {p.metadata[VERIFIER] for p in train + val} == {"hf_math_verify"}
    assert "set env.math.math_verify_impl=dapo_math_verify" in capsys.readouterr().err
    load_data(load_config(None, [f"data.train={{dataset_name: DAPOMath17K, path: {tmp_path / 'dapo'}}}",
                                 "env.math.math_verify_impl=dapo_math_verify"]))
    assert "math_verify_impl" not in capsys.readouterr().err


def test_dapo_reward_shaping_becomes_the_overlong_penalty_component(tmp_path):
    cfg = load_config(None, ["++grpo.reward_shaping.enabled=true", "++grpo.reward_shaping.overlong_buffer_length=128",
                             "++grpo.reward_shaping.overlong_buffer_penalty=1.0",
                             "++grpo.reward_shaping.max_response_length=${policy.max_total_sequence_length}"])
    shaping = cfg.reward.components[-1]
    assert shaping.name == "overlong_penalty" and shaping.weight == 1.0
    assert shaping.params == {"buffer_tokens": 128, "max_tokens": cfg.policy.max_total_sequence_length,
                              "floor": False}
    from execrl.rewards import Sample
    from execrl.rewards.base import RewardConfig, score
    from execrl.rewards.text import overlong_penalty

    # NeMo RL: min(-(len - (max_len - buffer)) / buffer * penalty, 0); max_len 192, buffer 128: len 128 -> -0.5
    assert overlong_penalty(Sample(None, "", None, num_tokens=128, max_tokens=64), 128, 192) == -0.5
    # past max_response_length NeMo RL has no floor: buffer 4, penalty 0.5, max 10, reward 1, 12 tokens:
    # 1 + min(-(12 - 6) / 4 * 0.5, 0) = 0.25 (DAPO's paper, execrl's own component by default: floored at -0.5)
    nemo = load_config(None, ["++grpo.reward_shaping.enabled=true", "++grpo.reward_shaping.overlong_buffer_length=4",
                              "++grpo.reward_shaping.overlong_buffer_penalty=0.5",
                              "++grpo.reward_shaping.max_response_length=10"])
    from execrl.sandbox import Verdict
    from execrl.sandbox.grader import ProgramResult, TestResult
    from execrl.tasks import Problem

    passed = ProgramResult(Verdict.PASS, [TestResult(Verdict.PASS)] * 4)  # every test passed: reward 1
    long = Sample(Problem("p", [], "code"), "", None, result=passed, num_tokens=12, max_tokens=10)
    assert score(long, nemo.reward).total == pytest.approx(0.25)
    floored = RewardConfig(components=[{"name": "test_pass_fraction"}, {"name": "overlong_penalty", "weight": 0.5,
                                        "scaled": False, "buffer_tokens": 4, "max_tokens": 10}])
    assert score(long, floored).total == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="overlong_buffer_penalty"):  # NeMo RL raises without it
        load_config(None, ["++grpo.reward_shaping.enabled=true", "++grpo.reward_shaping.overlong_buffer_length=4",
                           "++grpo.reward_shaping.max_response_length=10"])
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


def test_nemo_schedulers_step_once_per_grpo_step(tmp_path):
    """NeMo RL's list (SequentialLR) counts GRPO steps, not optimizer steps: here 2 optimizer steps per GRPO step, and
    the warm-up of 2 iterations ends after the second GRPO step. train/lr is the rate each step trained at, as NeMo
    RL's policy worker records it (before its scheduler steps)."""
    from execrl.trainer.loop import train

    from .test_train import SMALL, metrics

    linear = "{name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.5, end_factor: 1.0, total_iters: 2}}"
    constant = "{name: torch.optim.lr_scheduler.ConstantLR, kwargs: {factor: 1.0, total_iters: 10000000000}}"
    cfg = load_config(None, [*SMALL, "grpo.max_num_steps=3", "grpo.val_period=0", "warmup.sft_steps=0",
                             "policy.optimizer.kwargs.lr=1e-4", f"policy.scheduler=[{linear}, {constant}, "
                             "{milestones: [2]}]", "checkpointing.enabled=false", f"logger.log_dir={tmp_path}"])
    assert cfg.policy.train_global_batch_size * 2 == cfg.grpo.num_prompts_per_step * cfg.grpo.num_generations_per_prompt
    run = train(cfg)
    assert [r["train/lr"] for r in metrics(tmp_path) if "train/lr" in r] == pytest.approx([0.5e-4, 0.75e-4, 1e-4])
    assert run.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
    with pytest.raises(ConfigError, match="unexpected keyword argument 'bogus'"):
        validate(load_config(None, ["policy.scheduler={name: torch.optim.lr_scheduler.StepLR, kwargs: {bogus: 1}}"]))


def test_reward_scaling_maps_the_reward_before_the_overlong_penalty_is_added():
    """NeMo RL (DAPO's recipe): clamp to [0, 1], map onto [-1, 1], then add the overlong penalty."""
    from execrl.rewards import score

    from ..test_rewards import V, result, sample

    cfg = load_config(None, ["++grpo.reward_scaling.enabled=true", "++grpo.reward_scaling.source_min=0.0",
                             "++grpo.reward_scaling.source_max=1.0", "++grpo.reward_scaling.target_min=-1.0",
                             "++grpo.reward_scaling.target_max=1.0", "++grpo.reward_shaping.enabled=true",
                             "++grpo.reward_shaping.overlong_buffer_length=128",
                             "++grpo.reward_shaping.overlong_buffer_penalty=1.0",
                             "++grpo.reward_shaping.max_response_length=192"])
    half = result(V.PASS, V.PASS, V.FAIL, V.FAIL)  # test_pass_fraction 0.5
    assert score(sample(res=half, num_tokens=10), cfg.reward).total == 0.0  # 0.5 -> 0 on [-1, 1]
    assert score(sample(res=result(*[V.FAIL] * 4), num_tokens=10), cfg.reward).total == -1.0
    # all pass (1 -> 1), then the penalty of 128 tokens (buffer from 64): -0.5, added after the scaling
    assert score(sample(res=result(*[V.PASS] * 4), num_tokens=128), cfg.reward).total == 0.5
    with pytest.raises(ConfigError, match="source_max"):
        load_config(None, ["++grpo.reward_scaling.enabled=true", "++grpo.reward_scaling.source_max=0.0"])
    off = load_config(None, ["++grpo.reward_scaling.enabled=false", "++grpo.reward_scaling.target_min=-1.0"])
    assert not off.reward.scaling.enabled and "grpo.reward_scaling (off)" in no_effect_note(off)


def test_checkpoint_must_save_by_stops_with_a_checkpoint_that_resumes(tmp_path):
    """NeMo RL's deadline (DD:HH:MM:SS of training): the run stops, with a checkpoint, before a step would end after
    it; the same command without it resumes there."""
    from execrl.trainer.loop import train

    from .test_train import SMALL, metrics

    base = [*SMALL, "grpo.max_num_steps=3", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}",
            f"checkpointing.checkpoint_dir={tmp_path}/ckpt"]
    stopped = train(load_config(None, [*base, "checkpointing.checkpoint_must_save_by=0:0:0:0"]))
    assert stopped.step == 1 and (tmp_path / "ckpt" / "step_000001").is_dir()
    assert metrics(tmp_path)[-1] == {"step": 1, "run/interrupted": 1.0}  # (a hunt's find: it read as a whole run)
    resumed = train(load_config(None, base))
    assert resumed.resumed_from.endswith("step_000001") and resumed.step == 3
    assert not any("run/interrupted" in row for row in metrics(tmp_path))
    once = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0", f"logger.log_dir={tmp_path}/1",
            "checkpointing.enabled=false", "checkpointing.checkpoint_must_save_by=0:0:0:0"]
    assert train(load_config(None, once)).step == 1  # (its last step: not stopped by the deadline, a review's find)
    assert not any("run/interrupted" in row for row in metrics(tmp_path / "1"))
    with pytest.raises(ConfigError, match="checkpoint_must_save_by"):
        load_config(None, ["checkpointing.checkpoint_must_save_by=3 hours"])


def test_the_deadline_counts_the_validation_and_the_save_that_would_follow_the_next_step():
    """A step that would end in time is not enough where the validation and checkpoint after it would not: each
    counts as long as it last took, the validation only before a step that validates; no deadline, never late."""
    from execrl.trainer.loop import Deadline

    cfg = load_config(None, ["checkpointing.checkpoint_must_save_by=0:0:1:0", "grpo.val_period=5"])
    deadline = Deadline(cfg)
    deadline.begun -= 30.0
    deadline.took.update(validation=20.0, save=5.0)
    assert not deadline.passed(3, 10.0)  # step 4: 30 + 10 + its save 5 < 60
    assert deadline.passed(4, 10.0)  # step 5 validates: 30 + 10 + 20 + 5 >= 60
    assert deadline.passed(3, 25.0)  # 30 + 25 + 5 >= 60
    unsaved = Deadline(load_config(None, ["checkpointing.checkpoint_must_save_by=0:0:1:0", "grpo.val_period=5",
                                          "checkpointing.enabled=false"]))
    unsaved.begun -= 30.0
    unsaved.took.update(validation=20.0, save=5.0)
    assert not unsaved.passed(3, 25.0)  # 30 + 25 < 60: nothing to save
    assert not Deadline(load_config(None, [])).passed(3, 1e9)


NEMO = Path(__file__).parents[1] / "assets" / "nemo_rl"
NEMO_CONFIGS = sorted(NEMO.glob("*/examples/configs/**/*.yaml"))
MISSING = {  # what a config needs that execrl does not have, read from the config itself -> the refusal names it
    "megatron": "Megatron-backed training", "non-colocated": "non-colocated generation", "backend": "generation "
    "backends other than vLLM",
    "env_cls": "env.math.env_cls names a class that is not an execrl Environment", "router_replay": "router replay",
    "model_directory": "no such directory"}  # (a model on its authors' cluster: /lustre/...)


def needs(tree: dict) -> str | None:
    policy, env = tree.get("policy") or {}, tree.get("env") or {}
    gen = policy.get("generation") or {}
    if (policy.get("megatron_cfg") or {}).get("enabled"):
        return "megatron"
    if (gen.get("colocated") or {}).get("enabled") is False:
        return "non-colocated"
    if gen.get("backend") not in (None, "vllm"):
        return "backend"
    if (policy.get("router_replay") or {}).get("enabled"):
        return "router_replay"
    if (env.get("math") or {}).get("env_cls"):
        return "env_cls"
    if str(policy.get("model_name", "")).startswith("/"):
        return "model_directory"
    return None


def with_its_environment(path: Path, monkeypatch) -> None:
    """Environment variables the config reads (${oc.env:NAME}), set as a user running it would have them."""
    for name in re.findall(r"\$\{oc\.env:(\w+)", path.read_text()):
        monkeypatch.setenv(name, "org/model")


@pytest.mark.parametrize("path", NEMO_CONFIGS, ids=lambda p: str(p.relative_to(NEMO)))
def test_every_nemo_rl_grpo_config_dry_runs_or_names_what_it_needs(path, tmp_path, monkeypatch):
    """NeMo RL's own configs, unchanged, from another directory than its checkout: those on its DTensor path with
    colocated generation validate (batch arithmetic included); the others are refused in one line naming the
    feature."""
    from omegaconf import OmegaConf

    from execrl.config.load import _read

    monkeypatch.chdir(tmp_path)
    with_its_environment(path, monkeypatch)
    missing = needs(OmegaConf.to_container(_read(path, []), resolve=False))
    if missing is None:
        validate(load_config(str(path)))
        return
    with pytest.raises(ConfigError) as refused:
        validate(load_config(str(path)))
    assert MISSING[missing] in str(refused.value) and "\n" not in str(refused.value)


def test_the_nemo_rl_corpus_covers_each_era_and_each_refusal():
    assert len(NEMO_CONFIGS) >= 77 and {p.relative_to(NEMO).parts[0][:4] for p in NEMO_CONFIGS} == {
        "eraA", "eraB", "eraC", "eraD", "eraE", "eraF", "eraG"}
    from omegaconf import OmegaConf

    from execrl.config.load import _read

    kinds = [needs(OmegaConf.to_container(_read(p, []), resolve=False)) for p in NEMO_CONFIGS]
    assert set(kinds) == {None, *MISSING} and kinds.count(None) >= 40


def test_a_nemo_rl_recipe_dry_runs_from_the_command_line(tmp_path):
    recipe = NEMO / "eraC_b26cfeb/examples/configs/recipes/llm/dapo-qwen2.5-7b.yaml"
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", str(recipe), "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "note: NeMo RL keys read as:" in proc.stderr and "reward.components += {'name': 'overlong_penalty'" in \
        proc.stderr and "grpo.reward_scaling.target_min -> reward.scaling.target_min=-1.0" in proc.stderr
    assert "dataset_name: DAPOMath17K" in proc.stdout and "math_verify_impl: dapo_math_verify" in proc.stdout


ERA_G = NEMO / "eraG_7ea279a" / "examples" / "configs"


def test_nemo_rl_newest_configs_never_validate_and_move_data_as_they_like(tmp_path, monkeypatch):
    """NeMo RL's main of 2026-08-22: val_period -1 is its 'never'; data_plane (TransferQueue) moves batches between its
    workers and changes no number; a reward model's policy-like keys are the settings of a model that is not trained;
    a dataloader key read only with use_multiple_dataloader is named, not refused."""
    monkeypatch.chdir(tmp_path)
    smoke = load_config(str(ERA_G / "grpo_smoke.yaml"))
    assert smoke.grpo.val_period == -1
    from execrl.trainer.loop import periodic_validation

    assert not any(periodic_validation(smoke, step) for step in range(0, 50))
    tq = load_config(str(ERA_G / "recipes/llm/grpo-deepscaler-1.5b-8K-tq_simple.yaml"))
    validate(tq)
    assert "data_plane" in no_effect_note(tq)
    rm = load_config(str(ERA_G / "grpo_rm_1B.yaml"))
    validate(rm)
    note = no_effect_note(rm)
    assert "env.reward_model.processor" in note and "env.reward_model.offload_optimizer_for_logprob" in note
    many = load_config(str(ERA_G / "grpo_multiple_datasets.yaml"))
    assert "data.num_prompts_per_dataloader" in no_effect_note(many)


def test_a_megatron_recipe_is_refused_as_megatron_even_where_an_environment_variable_is_unset(tmp_path, monkeypatch):
    """A recipe interpolating ${oc.env:HF_HOME}, run where HF_HOME is unset: the refusal names Megatron (what the user
    must change), not the variable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HOME", raising=False)
    with pytest.raises(ConfigError, match="Megatron-backed training"):
        load_config(str(ERA_G / "recipes/llm/grpo-qwen3-1.7b-1n8g-megatron-super-swe1.yaml"))
    bad = tmp_path / "needs_env.yaml"
    bad.write_text("defaults: " + str(ERA_G / "grpo_math_1B.yaml") + "\npolicy:\n  model_name: ${oc.env:HF_HOME}/m\n")
    with pytest.raises(ConfigError, match="HF_HOME"):  # nothing refused: the missing variable is the message
        load_config(str(bad))


def test_nemo_rl_gemma3_recipe_trains_on_the_engine(tmp_path):
    """NeMo RL's grpo-gemma3-1b-it recipe as written, with a tiny random Gemma 3 (text) in place of
    google/gemma-3-1b-it, GSM8K from ../shared, one CPU process and a step's worth of batch: the engine generates
    (its Gemma 3 file), not transformers' generate."""
    from execrl.trainer.loop import train

    from ..conftest import shared_data
    from ..rollout.test_architectures import save_family

    shared_data("gsm8k")
    save_family("gemma3", tmp_path / "gemma")
    recipe = NEMO / "eraA_06f6343/examples/configs/recipes/llm/grpo-gemma3-1b-it-1n8g-fsdp2tp1.yaml"
    cfg = load_config(str(recipe), [
        f"policy.model_name={tmp_path / 'gemma'}", f"policy.tokenizer.name={tmp_path / 'gemma'}",
        "data.dataset_name=gsm8k", "cluster.gpus_per_node=1", "policy.device=cpu", "policy.precision=float32",
        "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=8",
        "policy.generation_batch_size=8", "grpo.max_num_steps=1", "grpo.max_val_samples=4",
        "policy.generation.max_new_tokens=16", "logger.wandb_enabled=false", f"logger.log_dir={tmp_path / 'run'}",
        f"checkpointing.checkpoint_dir={tmp_path / 'run/ckpt'}"])
    assert cfg.policy.generation.backend == "execrl" and cfg.loss_fn.reference_policy_kl_penalty == 0.01
    trained = train(cfg)
    assert trained.step == 1 and trained.model.config.model_type == "gemma3_text"


def test_nemo_rl_qwen3_30ba3b_recipe_switched_to_dtensor_trains_on_the_engine(tmp_path):
    """NeMo RL has no DTensor recipe for Qwen3-30B-A3B: its recipes are Megatron-backed. As written, the recipe is
    refused naming the switch; with the switch its null optimizer (Megatron's is megatron_cfg's) is refused naming the
    key to set; with both, a tiny random Qwen3-MoE in place of the model trains a step, generated by the engine's
    Qwen3-MoE file (not transformers' generate)."""
    from execrl.trainer.loop import train

    from ..conftest import shared_data
    from ..rollout.test_architectures import save_family

    shared_data("gsm8k")
    save_family("qwen3-moe", tmp_path / "moe")
    recipe = str(ERA_G / "recipes/llm/grpo-qwen3-30ba3b-8n8g-megatron.yaml")
    with pytest.raises(ConfigError, match="policy.megatron_cfg.enabled=false, policy.dtensor_cfg.enabled=true"):
        load_config(recipe)
    dtensor = ["policy.megatron_cfg.enabled=false", "policy.dtensor_cfg.enabled=true"]
    with pytest.raises(ConfigError, match="policy.optimizer.name=torch.optim.AdamW"):
        load_config(recipe, dtensor)
    cfg = load_config(recipe, [*dtensor, "policy.optimizer.name=torch.optim.AdamW", "policy.optimizer.kwargs.lr=3e-7",
        f"policy.model_name={tmp_path / 'moe'}", f"policy.tokenizer.name={tmp_path / 'moe'}",
        "data.train.dataset_name=gsm8k", "data.validation=null", "cluster.gpus_per_node=1", "cluster.num_nodes=1",
        "policy.device=cpu", "policy.precision=float32", "grpo.num_prompts_per_step=2",
        "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=8", "policy.generation_batch_size=8",
        "grpo.max_num_steps=1", "grpo.val_period=0", "grpo.val_at_start=false", "policy.generation.max_new_tokens=16",
        "logger.wandb_enabled=false", f"logger.log_dir={tmp_path / 'run'}",
        f"checkpointing.checkpoint_dir={tmp_path / 'run/ckpt'}"])
    assert cfg.policy.generation.backend == "execrl"
    trained = train(cfg)
    assert trained.step == 1 and trained.model.config.model_type == "qwen3_moe"


def test_a_held_out_problem_is_not_trained_on_with_repeat():
    """data.train.repeat with split_validation_size: the share is held out of the problems before they are repeated,
    so no copy of a validation problem is among the training problems (held out after, copies landed on both
    sides)."""
    from execrl.trainer.data import load_data

    from ..conftest import shared_data

    shared_data("mbpp")
    cfg = load_config(None, ["data.train.dataset_name=mbpp", "data.train.split=train", "data.train.repeat=4",
                             "data.train.split_validation_size=0.05", "grpo.max_val_samples=1000"])
    train, val, _ = load_data(cfg)
    assert val and not {p.id for p in val} & {p.id for p in train}
    assert len(train) == 4 * len({p.id for p in train}) and len(train) + 4 * len(val) == 4 * 374
    ids, n = [p.id for p in train], len({p.id for p in train})  # the set 4 times over, as NeMo RL concatenates it
    assert len(set(ids[:n])) == n and ids == ids[:n] * 4  # (each problem 4 times in a row: with data.shuffle=false a
    # step of 4 prompts was one problem's, a hunt's find)


def test_validation_keeps_each_source_and_counts_problems_that_fit():
    """A training set's held-out share and a data.validation set both reach validation where grpo.max_val_samples
    cuts (the held-out share, first, took every place: the named set was dropped without a word), and the cut counts
    problems whose prompt fits (cut first, then the long ones dropped, validation ran on fewer or none)."""
    from execrl.models import build_tokenizer
    from execrl.trainer.data import load_data
    from execrl.trainer.setup import training_data

    from ..conftest import shared_data

    shared_data("gsm8k"), shared_data("mbpp")
    over = ["data.train.dataset_name=mbpp", "data.train.split=train", "data.train.split_validation_size=0.05",
            "data.validation.dataset_name=gsm8k", "data.validation.split=test", "grpo.max_val_samples=10"]
    _, val, _ = load_data(load_config(None, over))
    assert len(val) == 19 + 1319 and {p.id.split("/")[0] for p in val[:10]} == {"mbpp", "gsm8k"}  # in turn
    tok = build_tokenizer(["Janet's ducks lay 16 eggs per day."], vocab_size=260)
    cfg = load_config(None, [*over, "data.max_input_seq_length=420", "policy.max_total_sequence_length=900",
                             "warmup.sft_steps=0"])
    _, val, _ = training_data(cfg, tok)
    assert len(val) == 10 and {p.id.split("/")[0] for p in val} == {"mbpp", "gsm8k"}  # (byte tokens: some
    # prompts are over 420)


def test_a_nemo_config_without_validation_sampling_keys_validates_as_it_samples(monkeypatch):
    """NeMo RL before its val_* keys validated with the generation settings (its current base config sets
    val_temperature: ${.temperature}); execrl's default, greedy, made eval/ incomparable with the same config's NeMo
    run, without a word."""
    monkeypatch.chdir(NEMO / "eraC_b26cfeb")
    old = load_config("examples/configs/grpo_math_1B.yaml", ["policy.generation.temperature=0.7",
                                                             "policy.generation.top_p=0.9"])
    gen = old.policy.generation
    assert (gen.val_temperature, gen.val_top_p, gen.val_top_k) == (0.7, 0.9, None)
    assert "NeMo RL then validated with policy.generation.temperature" in old._nemo_mapped[
        "policy.generation.val_temperature"]
    assert load_config("examples/configs/grpo_math_1B.yaml", ["policy.generation.val_temperature=0"]
                       ).policy.generation.val_temperature == 0.0  # (written: as written)
    monkeypatch.chdir(NEMO / "eraG_7ea279a")
    now = load_config("examples/configs/grpo_math_1B.yaml", ["policy.generation.temperature=0.7"])
    assert now.policy.generation.val_temperature == 0.7 and "policy.generation.val_temperature" not in now._nemo_mapped


def test_a_nemo_config_leaving_keys_to_defaults_or_setting_the_advantage_flags_alone_is_named(monkeypatch, tmp_path):
    """NeMo RL's current code takes its own defaults for keys a config leaves out (KL 0.01, one epoch, 1e6 steps) and
    reads the advantage's flags from grpo.adv_estimator (true where the section is missing): execrl ran with its own
    numbers without a word. Both are named; skipping the reference's logprobs with a KL penalty is refused, as NeMo
    RL asserts."""
    from execrl.config.checks import nemo_differences

    monkeypatch.chdir(NEMO / "eraG_7ea279a")
    base = "examples/configs/grpo_math_1B.yaml"
    full = load_config(base, [])
    assert not any("not in the config" in d or "adv_estimator" in d for d in nemo_differences(full))
    text = Path(base).read_text()
    cut = tmp_path / "cut.yaml"
    cut.write_text(re.sub(r"\n  (reference_policy_kl_penalty|max_num_epochs|max_num_steps): [^\n]*", "", text))
    said = " ".join(nemo_differences(load_config(str(cut), [])))
    assert "loss_fn.reference_policy_kl_penalty=0.0 (NeMo RL's default: 0.01)" in said
    assert "grpo.max_num_epochs=1000 (NeMo RL's default: 1)" in said and "grpo.max_num_steps=1000" in said
    bare = tmp_path / "bare.yaml"
    bare.write_text(re.sub(r"\n  adv_estimator:(\n    [^\n]*)+", "", text))
    alone = load_config(str(bare), ["grpo.normalize_rewards=false"])
    assert alone.grpo.normalize_rewards is False
    assert any("grpo.normalize_rewards=false sets the advantages here" in d for d in nemo_differences(alone))
    assert not any("not in the config" in d for d in nemo_differences(load_config(None, [])))  # (execrl's own)
    # a section that names only its estimator sets neither flag: NeMo RL's estimator takes its defaults (true)
    named = tmp_path / "named.yaml"
    named.write_text(re.sub(r"\n  adv_estimator:(\n    [^\n]*)+", "\n  adv_estimator:\n    name: grpo", text))
    for flag in ("normalize_rewards", "use_leave_one_out_baseline"):
        said = " ".join(nemo_differences(load_config(str(named), [f"grpo.{flag}=false"])))
        assert f"grpo.{flag}=false sets the advantages here" in said
    assert not any("adv_estimator" in d for d in nemo_differences(load_config(
        str(named), ["grpo.adv_estimator.normalize_rewards=false"])))
    # a key deleted on the command line is not written: NeMo RL's default fills it, and the difference is named
    said = " ".join(nemo_differences(load_config(base, ["~loss_fn.reference_policy_kl_penalty"])))
    assert "loss_fn.reference_policy_kl_penalty=0.0 (NeMo RL's default: 0.01)" in said
    said = " ".join(nemo_differences(load_config(base, ["~grpo.adv_estimator", "grpo.normalize_rewards=false"])))
    assert "grpo.normalize_rewards=false sets the advantages here" in said
    again = load_config(base, ["~loss_fn.reference_policy_kl_penalty", "loss_fn.reference_policy_kl_penalty=0.02"])
    assert "loss_fn.reference_policy_kl_penalty" in again._written
    with pytest.raises(ConfigError, match="needs loss_fn.reference_policy_kl_penalty=0"):
        load_config(base, ["grpo.skip_reference_policy_logprobs_calculation=true"])
    load_config(base, ["grpo.skip_reference_policy_logprobs_calculation=true", "loss_fn.reference_policy_kl_penalty=0"])


def test_training_problems_that_repeat_a_prompt_are_named_where_nemo_rl_pools_their_groups():
    """NeMo RL's current code pools a step's groups of one prompt (calculate_baseline_and_std_per_prompt over unique
    prompt ids); DAPOMath17K's hub split repeats each problem ~100 times. execrl keeps each group's own: named."""
    from execrl.tasks import Problem
    from execrl.trainer.setup import repeated_prompts_note

    cfg = load_config(None, ["data.train.dataset_name=jsonl", "data.train.path=x.jsonl"])
    rows = [Problem(f"p{i}", [{"role": "user", "content": f"What is {i % 3} + 1?"}], "math", answer=str(i % 3 + 1))
            for i in range(5)]
    assert "2 of 5 training problems repeat another's prompt" in repeated_prompts_note(rows, cfg)
    assert repeated_prompts_note(rows[:3], cfg) is None
    assert repeated_prompts_note(rows, load_config(None, [])) is None  # (a generated task: fresh tests per problem)


def test_fewer_problems_than_prompts_per_step_are_named():
    """6 problems for 16 prompts a step: each step drew them 2-3 times, without a word."""
    from execrl.tasks import Problem
    from execrl.trainer.setup import few_problems_warning

    cfg = load_config(None, ["data.train.dataset_name=jsonl", "data.train.path=x.jsonl", "grpo.num_prompts_per_step=16",
                             "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=64"])
    rows = [Problem(f"p{i}", [{"role": "user", "content": f"What is {i} + 1?"}], "math", answer=str(i + 1))
            for i in range(6)]
    assert "6 training problems for grpo.num_prompts_per_step=16" in few_problems_warning(rows, cfg)
    assert few_problems_warning(rows * 3, cfg) is None
    assert "6 training problems" in few_problems_warning(rows, load_config(None, []))  # (a generated task too, a
    # hunt's find: builtin:arith-code with options.count=8 drew the same 8 problems every step, unsaid)


def test_split_validation_size_is_read_where_nemo_rl_reads_it(tmp_path):
    """NeMo RL's DAPOMath17K, DeepScaler and GSM8K classes do not read split_validation_size (a warning says so),
    and 20 of its recipes inherit 0.05 for them from grpo_math_1B.yaml: execrl held 5% of DAPO's rows out and mixed
    them into the AIME validation. OpenMathInstruct-2 holds 0.05 out where the key is unset (its class's default);
    1 or more is a number of problems (NeMo RL's split)."""
    import json

    from execrl.trainer.data import load_data

    (tmp_path / "dapo").mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"Solve {i}."}], "reward_model": {"ground_truth": str(i)}}
            for i in range(40)]
    (tmp_path / "dapo" / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "omi").mkdir()
    (tmp_path / "omi" / "train_1M.jsonl").write_text("\n".join(json.dumps({"problem": f"P{i}", "expected_answer": i})
                                                              for i in range(40)))
    (tmp_path / "mine.jsonl").write_text("\n".join(json.dumps({"prompt": f"Q{i}", "answer": i}) for i in range(40)))

    def split(entry, *more):
        cfg = load_config(None, [f"data.train={{{entry}}}", *more])
        train, val, _ = load_data(cfg)
        return len(train), len(val), no_effect_note(cfg) or ""

    kept, held, note = split(f"dataset_name: DAPOMath17K, path: {tmp_path / 'dapo'}, split_validation_size: 0.05")
    assert (kept, held) == (40, 0)
    assert "data.train.split_validation_size (NeMo RL's DAPOMath17K does not read it: every row trains" in note
    assert split(f"dataset_name: OpenMathInstruct-2, path: {tmp_path / 'omi'}")[:2] == (38, 2)  # (unset: 0.05)
    assert split(f"dataset_name: OpenMathInstruct-2, path: {tmp_path / 'omi'}, split_validation_size: 0")[:2] == \
        (40, 0)
    assert split(f"dataset_name: jsonl, path: {tmp_path / 'mine.jsonl'}, split_validation_size: 3")[:2] == (37, 3)
    assert split(f"dataset_name: jsonl, path: {tmp_path / 'mine.jsonl'}, split_validation_size: 0.1")[:2] == (36, 4)
    with pytest.raises(ConfigError, match="2.5 is neither a share .below 1. nor a number of problems"):
        load_config(None, ["data.train.split_validation_size=2.5"])
    with pytest.raises(DatasetError, match="split_validation_size=40 holds out 40 problems of 40: none would train"):
        split(f"dataset_name: jsonl, path: {tmp_path / 'mine.jsonl'}, split_validation_size: 40")


def test_nemo_rl_s_scheduler_list_and_unclipped_gradients_over_execrl_s_base(tmp_path):
    """A config of one's own over execrl's grpo_math_1B.yaml ({warmup_steps: 50}) with NeMo RL's list of
    schedulers was refused ("cannot merge incompatible container types", the key unnamed); max_grad_norm: null
    (NeMo RL: no clipping) was "Input should be a valid number"."""
    import math

    import torch

    from execrl.trainer.precision import Weights

    (tmp_path / "mine.yaml").write_text(
        f"defaults: {Path('configs/grpo_math_1B.yaml').resolve()}\npolicy:\n  max_grad_norm: null\n  scheduler:\n"
        "    - {name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 0.1, total_iters: 13}}\n"
        "    - {name: torch.optim.lr_scheduler.ConstantLR, kwargs: {factor: 1.0, total_iters: 10000000000}}\n"
        "    - milestones: [13]\n")
    cfg = load_config(str(tmp_path / "mine.yaml"))
    assert cfg.policy.max_grad_norm is None and len(cfg.policy.scheduler.root) == 3
    assert cfg.policy.optimizer.kwargs["lr"] == 5.0e-6  # (the rest of policy still inherited)
    model = torch.nn.Linear(4, 4)
    weights = Weights(model, model, torch.float32)
    for p in weights.master.parameters():
        p.grad = torch.full_like(p, 100.0)
    assert float(weights.clip(math.inf)) == pytest.approx(100.0 * math.sqrt(20))
    assert all(bool((p.grad == 100.0).all()) for p in weights.master.parameters())  # (left as they are)


def test_validation_of_whole_batches_only_is_named_where_max_val_samples_splits_one():
    """NeMo RL's code validates max_val_samples // val_batch_size whole batches (100 of 256: none, an accuracy of 0
    logged); execrl validates max_val_samples problems. A NeMo config where the two differ says so."""
    from execrl.config.checks import differences_note

    base = NEMO / "eraG_7ea279a" / "examples" / "configs" / "grpo_math_1B.yaml"
    note = differences_note(load_config(str(base), ["grpo.max_val_samples=300"]))
    assert "grpo.max_val_samples=300 validates that many problems" in note and ", 256 problems" in note, note
    note = differences_note(load_config(str(base), ["grpo.max_val_samples=512"])) or ""
    assert "max_val_samples" not in note


def test_data_default_fills_datasets_given_on_the_command_line_and_a_null_prompt_file_adds_nothing(tmp_path):
    """(A review's finds) NeMo RL fills each dataset from data.default at run time, after the overrides: a validation
    set added on the command line read ResponseDataset's own input/output fields (the default's input_key question
    never reached it), and ++data.default.input_key was refused as unknown. A null prompt_file poses the problem as it
    is in NeMo RL: execrl added its own instruction."""
    (tmp_path / "r.yaml").write_text(
        "data:\n  train: {data_path: /x/train.jsonl, dataset_name: ResponseDataset}\n"
        "  default: {dataset_name: ResponseDataset, input_key: question, output_key: answer, prompt_file: null,"
        " processor: math_hf_data_processor, env_name: math}\n")
    cfg = load_config(str(tmp_path / "r.yaml"), ["++data.validation.data_path=/x/val.jsonl",
                                                 "++data.validation.dataset_name=ResponseDataset"])
    val = cfg.data.validation_sets[0]
    assert (val.input_key, val.output_key, val.path) == ("question", "answer", "/x/val.jsonl")
    assert (cfg.data.train_sets[0].input_key, cfg.prompt.add_instructions) == ("question", False)
    cfg = load_config(str(tmp_path / "r.yaml"), ["++data.default.input_key=problem"])
    assert cfg.data.train_sets[0].input_key == "problem"
    assert load_config(str(tmp_path / "r.yaml"), ["prompt.add_instructions=true"]).prompt.add_instructions


@pytest.mark.parametrize("raw, value", [("2026-05-01", "2026-05-01"), ("on", "on"), ("No", "No"), ("TRUE", True),
                                        ("false", False)])
def test_override_values_read_as_hydra_reads_them(raw, value):
    """(A review's find) the command line was YAML 1.1: a run named 2026-05-01 was a date (refused), `on` a boolean.
    Hydra's grammar: true and false (any case) are booleans, dates and on/off/yes/no text."""
    from execrl.config.load import _value

    assert _value("logger.wandb.name", raw) == value


@pytest.mark.parametrize("overrides", [
    ["grpo.use_dynamic_sampling=true", "grpo.adv_estimator.use_leave_one_out_baseline=false"],
    ["grpo.use_dynamic_sampling=true"],
])
def test_dynamic_sampling_with_nemo_rls_leave_one_out_filter_is_refused_whatever_the_advantages_say(overrides):
    """NeMo RL reads grpo.use_leave_one_out_baseline for dynamic sampling's filter (single samples by the others'
    std) and grpo.adv_estimator's for the advantages; with the first true and the second false execrl read one
    setting, false, and kept groups whole, silently (a group's lone success kept, where NeMo RL drops it)."""
    base = Path(__file__).parents[1] / "assets/nemo_rl/eraG_7ea279a/examples/configs/grpo_math_1B.yaml"
    with pytest.raises(ConfigError, match="set grpo.use_leave_one_out_baseline=false"):
        validate(load_config(str(base), overrides))
    validate(load_config(str(base), [*overrides, "grpo.use_leave_one_out_baseline=false"]))


def test_the_two_leave_one_out_keys_at_odds_in_one_file_say_what_each_does_in_nemo_rl(tmp_path):
    """(A hunt's find) grpo.adv_estimator.use_leave_one_out_baseline and grpo.use_leave_one_out_baseline are two
    settings in NeMo RL's current code (the advantages; dynamic sampling's filter): a file that sets them apart was
    refused as "one setting two ways"; the refusal now says what each is."""
    (tmp_path / "loo.yaml").write_text("grpo:\n  use_leave_one_out_baseline: false\n  adv_estimator:\n"
                                       "    use_leave_one_out_baseline: true\n")
    with pytest.raises(ConfigError, match="reads the first for the advantages and the second only to filter dynamic "
                                          "sampling's groups; execrl has one setting for both: give them the same"):
        load_config(str(tmp_path / "loo.yaml"), [])


def test_an_unset_environment_variable_the_config_reads_is_named(tmp_path, monkeypatch):
    """(A hunt's find) a recipe's ${oc.env:DS41_FULL_CHECKPOINT}, unset: 'KeyError raised while resolving
    interpolation'. Now the variable is named, with the fix."""
    monkeypatch.delenv("EXECRL_UNSET_CHECKPOINT", raising=False)
    (tmp_path / "c.yaml").write_text("policy:\n  model_name: ${oc.env:EXECRL_UNSET_CHECKPOINT}\n")
    with pytest.raises(ConfigError, match=r"reads the environment variable EXECRL_UNSET_CHECKPOINT .* not set: set"):
        load_config(str(tmp_path / "c.yaml"))


def test_overlong_filtering_and_validations_own_sampling_are_named_and_an_unread_key_runs():
    """(A hunt's finds against NeMo RL's code of 2026-08-22) its overlong filtering also leaves out an answer that ended
    within the environment reply's length of the limit; it refuses validation sampling settings other than
    training's (outside vLLM with NeMo-Gym); loss_fn.seq_logprob_error_in_loss is read nowhere in it (execrl refused
    a config NeMo RL runs)."""
    from execrl.config.checks import differences_note

    base = str(NEMO / "eraG_7ea279a" / "examples" / "configs" / "grpo_math_1B.yaml")
    note = differences_note(load_config(base, ["grpo.overlong_filtering=true", "policy.generation.val_temperature=0",
                                               "loss_fn.seq_logprob_error_in_loss=true"]))
    assert "grpo.overlong_filtering leaves out of the loss the samples cut" in note, note
    assert "validation samples at its own val_temperature=0.0 (policy.generation)" in note, note
    note = differences_note(load_config(base, [])) or ""
    assert "overlong_filtering" not in note and "val_temperature" not in note, note
