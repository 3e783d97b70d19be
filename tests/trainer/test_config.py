"""The config schema as a researcher meets it: YAML files, defaults, references, overrides, errors, --dry-run."""

import subprocess
import sys
from pathlib import Path

import pytest

from execrl.config import ConfigError, load_config, plan

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "execrl.cli", "train", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", ["grpo_math_1B.yaml", "grpo_code_2gpu_test.yaml", "grpo_code_8gpu_production.yaml",
                                  "grpo_mbpp_multiturn_cpu.yaml", "grpo_arith_feedback_cpu.yaml"])
def test_shipped_and_seed_configs_dry_run(name):
    proc = cli(CONFIGS / name, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "samples per step" in proc.stdout and "micro-batches per optimizer step" in proc.stdout


def test_settings_the_trainer_refuses_are_refused_before_launching():
    proc = cli(CONFIGS / "grpo_code_8gpu_production.yaml", "env.multi_turn.kind=single_turn", "--dry-run")
    assert proc.returncode == 2 and "config error" in proc.stderr and "env.multi_turn.kind=interpreter" in proc.stderr
    assert "launched as" not in proc.stdout
    proc = cli("grpo.async_grpo.enabled=true", "policy.generation.backend=transformers", "--dry-run")
    assert proc.returncode == 2 and "set policy.generation.backend=execrl" in proc.stderr


def test_seed_2gpu_config_resolves_as_written():
    cfg = load_config(str(CONFIGS / "grpo_code_2gpu_test.yaml"))
    assert cfg.policy.tokenizer.name == "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # ${policy.model_name}
    assert cfg.policy.generation.vllm_cfg.gpu_memory_utilization == 0.7
    assert cfg.loss_fn.reference_policy_kl_penalty == 0.01  # inherited from grpo_math_1B.yaml
    p = plan(cfg)
    assert (p.samples_per_step, p.global_batch, p.num_gpus, p.per_gpu_batch, p.micro_batches_per_optimizer_step) == \
        (128, 128, 2, 64, 32)
    assert "256 > 128" in p.notes[0]


def test_production_config_batch_arithmetic():
    p = plan(load_config(str(CONFIGS / "grpo_code_8gpu_production.yaml")))
    assert (p.samples_per_step, p.optimizer_steps_per_rollout, p.per_gpu_batch, p.micro_batches_per_optimizer_step) == \
        (512, 1, 64, 16)


def test_defaults_chain_and_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text("grpo:\n  num_prompts_per_step: 4\n  num_generations_per_prompt: 4\n")
    (tmp_path / "mid.yaml").write_text("defaults: base.yaml\ngrpo:\n  max_num_steps: 7\nlogger:\n  log_dir: runs/${grpo.max_num_steps}\n")
    cfg = load_config(str(tmp_path / "mid.yaml"), ["grpo.num_prompts_per_step=2", "policy.optimizer.kwargs.lr=1e-5",
                                                   "policy.train_global_batch_size=8"])
    assert (cfg.grpo.num_prompts_per_step, cfg.grpo.num_generations_per_prompt, cfg.grpo.max_num_steps) == (2, 4, 7)
    assert cfg.logger.log_dir == "runs/7" and cfg.policy.optimizer.kwargs["lr"] == 1e-5


@pytest.mark.parametrize("override, message", [
    ("grpo.num_generation_per_prompt=4", "did you mean grpo.num_generations_per_prompt"),
    ("polcy.model_name=x", "did you mean policy"),
    ("grpo.max_num_steps=many", "grpo.max_num_steps"),
    ("reward.components=[{name: pass_fraction}]", "unknown reward component"),
    ("nothing", "not key=value"),
])
def test_config_errors_name_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])
    proc = cli(override, "--dry-run")
    assert proc.returncode == 2 and message.split()[0] in proc.stderr and "Traceback" not in proc.stderr


def test_groups_are_never_split():
    cfg = load_config(None, ["grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=12"])
    with pytest.raises(ConfigError, match="groups are never split"):
        plan(cfg)


def test_every_field_has_a_description():
    from pydantic import BaseModel

    from execrl.config.schema import MasterConfig

    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            inner = field.annotation
            for cand in (inner, *getattr(inner, "__args__", ())):
                if isinstance(cand, type) and issubclass(cand, BaseModel) and cand.__module__.startswith("execrl.config"):
                    walk(cand)
    walk(MasterConfig)
