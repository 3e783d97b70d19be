"""The config schema as a researcher meets it: YAML files, defaults, references, overrides, errors, --dry-run."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def test_overrides_read_as_hydra_reads_them(tmp_path):
    """A mapping merges into its section (Hydra's merge, as NeMo RL's parse_hydra_overrides applies it), numbers
    such as 1e-7 are floats (as in a config file), `{k:v}` without the space is refused, not read as the key "k:v"."""
    base = load_config(None)
    cfg = load_config(None, ["loss_fn={ratio_clip_max: 0.28}", "policy.optimizer.kwargs={lr: 1e-6}",
                             "grpo.advantage_clip_high=1e1"])
    assert cfg.loss_fn.ratio_clip_max == 0.28
    assert cfg.loss_fn.reference_policy_kl_penalty == base.loss_fn.reference_policy_kl_penalty
    assert cfg.policy.optimizer.kwargs == {**base.policy.optimizer.kwargs, "lr": 1e-6}
    assert cfg.grpo.advantage_clip_high == 10.0
    cfg = load_config(None, ["policy.scheduler={name: torch.optim.lr_scheduler.CosineAnnealingLR, "
                             "kwargs: {T_max: 10, eta_min: 1e-7}}"])
    assert cfg.policy.scheduler.kwargs["eta_min"] == 1e-7
    with pytest.raises(ConfigError, match="put a space after the colon"):
        load_config(None, ["policy.tokenizer.chat_template_kwargs={enable_thinking:false}"])


def test_an_optimizer_of_ones_own_gets_only_its_own_kwargs_and_a_typo_is_named(tmp_path):
    (tmp_path / "sgd.yaml").write_text("policy:\n  optimizer:\n    name: torch.optim.SGD\n"
                                       "    kwargs: {lr: 0.01, momentum: 0.9}\n")
    assert load_config(str(tmp_path / "sgd.yaml")).policy.optimizer.kwargs == {"lr": 0.01, "momentum": 0.9}
    (tmp_path / "plain.yaml").write_text("grpo:\n  max_num_steps: 3\n")  # (no optimizer: the schema's AdamW)
    cfg = load_config(str(tmp_path / "plain.yaml"), ["policy.optimizer.name=torch.optim.Adam",
                                                     "policy.optimizer.kwargs.lr=1e-4"])
    assert cfg.policy.optimizer.kwargs == {"lr": 1e-4}  # (not AdamW's weight decay: L2 decay in Adam)
    proc = cli("policy.optimizer.kwargs.weight_decy=0.1", "--dry-run")
    assert proc.returncode == 2 and "did you mean weight_decay" in proc.stderr and "Traceback" not in proc.stderr


def test_another_optimizer_on_the_builtin_default_keeps_only_the_defaults_it_takes():
    """(A hunt's find) `execrl train policy.optimizer.name=torch.optim.SGD` was refused for AdamW's betas and eps,
    which the built-in default's file sets and the user never wrote; `torch.optim:SGD`, the form own code takes,
    ended in a traceback. The built-in file's kwargs reach another class where it takes them."""
    from execrl.config.checks import validate

    for name in ("torch.optim.SGD", "torch.optim:SGD"):
        cfg = load_config(None, [f"policy.optimizer.name={name}", "policy.optimizer.kwargs.momentum=0.9"])
        assert cfg.policy.optimizer.kwargs == {"lr": 2e-4, "weight_decay": 0.0, "momentum": 0.9}
        validate(cfg)
    for config in (None, "configs/reward_model_cpu.yaml"):  # (the built-in default, or a file inheriting it)
        for name in ("torch.optim.Adam", "torch.optim.Adafactor"):  # (Adafactor reads eps as a pair)
            cfg = load_config(config, [f"policy.optimizer.name={name}"])
            assert cfg.policy.optimizer.kwargs == {"lr": 2e-4, "weight_decay": 0.0}
            validate(cfg)
    with pytest.raises(ConfigError, match="policy.optimizer.name 'torch.optim:Nope': torch.optim has no 'Nope'"):
        validate(load_config(None, ["policy.optimizer.name=torch.optim:Nope"]))
    with pytest.raises(ConfigError, match="SGD takes no argument 'betas'"):  # (written by the user: refused)
        validate(load_config(None, ["policy.optimizer.name=torch.optim.SGD",
                                    "policy.optimizer.kwargs.betas=[0.9,0.9]"]))


def test_optimizer_values_the_class_refuses_are_refused_by_the_dry_run():
    """(A hunt's find) betas=[0.9], weight_decay=-5 and lr=nan passed --dry-run and failed once the model had loaded,
    with a traceback or torch's words naming no key."""
    for value, said in (("policy.optimizer.kwargs.betas=[0.9]", "betas=[0.9]: two numbers"),
                        ("policy.optimizer.kwargs.weight_decay=-5", "Invalid weight_decay value: -5"),
                        ("policy.optimizer.kwargs.lr=.nan", "must be > 0 and finite")):
        proc = cli(value, "--dry-run")
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_no_infinite_or_nan_float_and_no_negative_stop_token():
    """(A hunt's find) loss_fn.reference_policy_kl_penalty=.inf trained on nothing (every step skipped as
    non-finite) and exited 0; an infinite temperature sampled uniformly; a stop token id of -5 ends nothing."""
    for value in ("loss_fn.reference_policy_kl_penalty=.inf", "policy.generation.temperature=.inf",
                  "reward.components=[{name: test_pass_fraction, weight: .nan}]", "grpo.advantage_clip_high=-.inf"):
        with pytest.raises(ConfigError, match="finite number"):
            load_config(None, [value])
    with pytest.raises(ConfigError, match=r"stop_token_ids.0: Input should be greater than or equal to 0"):
        load_config(None, ["policy.generation.stop_token_ids=[-5]"])


def test_a_section_set_to_a_value_is_one_line_and_warmups_keys_keep_their_section(tmp_path):
    """(A hunt's find) grpo=null (a file's grpo: whose keys are all commented out), policy=5 or env=[1] crashed in
    NeMo RL's key mapping; an error under warmup named the key without its section (warmup is also one of the
    schedulers' tags, which error paths leave out)."""
    (tmp_path / "c.yaml").write_text("grpo:\n  # num_prompts_per_step: 4\n")
    with pytest.raises(ConfigError, match="grpo: a section of keys .* got None; write its keys under it"):
        load_config(str(tmp_path / "c.yaml"))
    for value in ("policy=5", "env=[1]", "grpo="):
        with pytest.raises(ConfigError, match=f"^{value.split('=')[0]}: a section of keys"):
            load_config(None, [value])
    with pytest.raises(ConfigError, match=r"^warmup\.sft_steps: Input should be greater than or equal to 0"):
        load_config(None, ["warmup.sft_steps=-1"])
    with pytest.raises(ConfigError, match=r"unknown key warmup\.sft_stepz: did you mean warmup\.sft_steps\?"):
        load_config(None, ["warmup.sft_stepz=3"])


def test_chat_template_values_as_nemo_rl_reads_them(tmp_path):
    """`default` is the tokenizer's own and a .jinja path is read; a bare name (a model family's) would be the whole
    prompt's text and is refused."""
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert load_config(None, ["policy.tokenizer.chat_template=default"]).policy.tokenizer.chat_template is None
    cfg = load_config(None, [f"policy.tokenizer.chat_template={tmp_path / 't.jinja'}"])
    assert cfg.policy.tokenizer.chat_template == (tmp_path / "t.jinja").read_text()
    for value, said in (("deepseek_v4", "neither a Jinja template"), (tmp_path / "no.jinja", "not found")):
        with pytest.raises(ConfigError, match=said):
            load_config(None, [f"policy.tokenizer.chat_template={value}"])


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


@pytest.mark.parametrize("override, message", [
    ("loss_fn.use_on_policy_kl_approximation=true policy.generation.backend=transformers", "execrl engine"),
    ("env.code.terminate_on_evaluation=false", "interpreter"),
    ("env.multi_turn.kind=interpreter grpo.max_rollout_turns=4 prompt.code_style=plain", "no cell to find"),
])
def test_nemo_keys_that_would_change_the_math_are_refused(override, message):
    from execrl.config.checks import check_supported, check_turns

    with pytest.raises(ConfigError, match=message):
        cfg = load_config(None, override.split())
        check_turns(cfg)
        check_supported(cfg)


def test_nemo_keys_with_no_effect_are_named_in_one_note():
    from execrl.config.checks import no_effect_note

    assert no_effect_note(load_config(None, [])) is None
    note = no_effect_note(load_config(None, ["grpo.val_batch_size=8", "logger.monitor_gpus=false"]))
    assert note.startswith("note: accepted, with no effect here: grpo.val_batch_size") and "monitor_gpus" in note
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", "grpo.val_batch_size=8", "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "grpo.val_batch_size" in proc.stderr


def _said_of(note: str, key: str) -> str:
    """The part of the no-effect note that names `key`."""
    return next(part for part in note.split("; ") if key in part)


def test_settings_of_an_environment_or_estimator_the_run_does_not_use_are_named():
    """One multi-turn kind's settings under another, a game's or the puzzle's where no dataset is one, the role
    baselines' decay without rae: accepted without a word (a hunt's find); now in the note. Where they are read, not."""
    from execrl.config.checks import no_effect_note

    note = no_effect_note(load_config(None, ["grpo.role_baseline_decay=0.5", "env.game.illegal_move_penalty=2.0",
                                             "env.sliding_puzzle.max_moves=7", "env.multi_turn.public_tests=3",
                                             "env.multi_turn.final_tag=final"]))
    for key, why in [("env.multi_turn.public_tests", "kind=unit_tests only, and it is single_turn"),
                     ("env.multi_turn.final_tag", "kind=interpreter only"),
                     ("env.game.illegal_move_penalty", "where a selfplay:<game> dataset"),
                     ("env.sliding_puzzle.max_moves", "where the sliding_puzzle dataset"),
                     ("grpo.role_baseline_decay", "read by grpo.advantage=rae only, and it is grpo")]:
        assert why in _said_of(note, key), note
    configs = Path(__file__).parents[2] / "configs"
    puzzle = str(configs / "sliding_puzzle_cpu.yaml")
    read = no_effect_note(load_config(puzzle, ["env.sliding_puzzle.max_moves=7"])) or ""
    assert "env.sliding_puzzle.max_moves" not in read
    game = str(configs / "spiral_tictactoe_cpu.yaml")
    written = ["env.game.illegal_move_penalty=2.0", "grpo.role_baseline_decay=0.5"]
    read = no_effect_note(load_config(game, written)) or ""
    assert "env.game" not in read and ("role_baseline_decay" not in read) == (load_config(game).grpo.advantage == "rae")


def test_settings_read_only_while_another_is_on_are_named_while_it_is_off():
    """(A hunt's find) The KL estimator's settings without a KL penalty, async GRPO's age bound with async off,
    dynamic batching's budgets with it off: accepted without a word; now in the note, where they differ from their
    defaults (NeMo RL's configs write the defaults beside a switch that is off)."""
    from execrl.config.checks import no_effect_note

    written = ["loss_fn.use_on_policy_kl_approximation=true", "loss_fn.reference_policy_kl_type=k1",
               "loss_fn.kl_input_clamp_value=5", "grpo.async_grpo.max_trajectory_age_steps=3",
               "policy.dynamic_batching.train_mb_tokens=100"]
    note = no_effect_note(load_config(None, written))
    for key, why in [("loss_fn.use_on_policy_kl_approximation", "only with a KL penalty"),
                     ("loss_fn.reference_policy_kl_type", "only with a KL penalty"),
                     ("loss_fn.kl_input_clamp_value", "only with a KL penalty"),
                     ("grpo.async_grpo.max_trajectory_age_steps", "only with grpo.async_grpo.enabled=true"),
                     ("policy.dynamic_batching.train_mb_tokens", "only with policy.dynamic_batching.enabled=true")]:
        assert why in _said_of(note, key), note
    on = ["loss_fn.reference_policy_kl_penalty=0.01", "grpo.async_grpo.enabled=true",
          "policy.dynamic_batching.enabled=true"]
    assert no_effect_note(load_config(None, written + on)) is None
    assert no_effect_note(load_config(None, ["loss_fn.reference_policy_kl_type=k3"])) is None  # (the default)


def test_a_builtin_datasets_option_left_behind_by_another_dataset_is_named_as_not_read():
    """An option of the built-in task (data.train.options.warmup_hidden) kept in a config that names one's own JSONL in
    its place: the note names it instead of the loader silently ignoring it."""
    from execrl.config.checks import no_effect_note

    note = no_effect_note(load_config(None, ["data.train.options.warmup_hidden=[sum]", "data.train.dataset_name=jsonl",
                                             "data.train.path=examples/problems.jsonl"]))
    assert "data.train.options.warmup_hidden (jsonl takes no such option: not read)" in note


def test_a_typo_of_a_loaders_option_is_an_error_naming_the_option():
    """Unlike an option left behind by another dataset, a near-miss of one the loader takes (`feilds` for `fields`)
    would read every row through the default field names: refused, naming the option."""
    from execrl.config.checks import validate

    with pytest.raises(ConfigError, match=r"data.train.options.feilds: jsonl takes no such option \(did you mean "
                                          r"'fields'\?\)"):
        validate(load_config(None, ["data.train.dataset_name=jsonl", "data.train.path=examples/problems.jsonl",
                                    "data.train.options={feilds: {prompt: q}}"]))


def test_max_num_epochs_ends_training_first(tmp_path):
    from .test_train import run

    # 8 problems, 4 prompts a step: an epoch is 2 steps, so 2 epochs end the run at step 4, not 50
    rows = [{"id": str(i), "prompt": f"Print {i}.", "tests": {"inputs": [""], "outputs": [f"{i}\n"]}} for i in range(8)]
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    r, d = run(tmp_path, "epochs", "grpo.max_num_steps=50", "grpo.max_num_epochs=2", "data.train.dataset_name=jsonl",
               f"data.train.path={data}", "warmup.sft_steps=0", "grpo.val_period=0", "checkpointing.enabled=false")
    assert r.step == 4  # 8 problems / 4 prompts a step = 2 steps an epoch, 2 epochs


def test_env_name_and_processor_are_checked_against_the_dataset(tmp_path):
    from execrl.config.checks import check_dataset_names

    from .test_train import run

    with pytest.raises(ValueError, match="env_name is 'math'"):
        run(tmp_path, "env", "data.default.env_name=math", "grpo.max_num_steps=1", "warmup.sft_steps=0")
    with pytest.raises(ConfigError, match="processor is 'math_hf_data_processor'.*auto"):
        check_dataset_names(load_config(None, ["data.default.processor=math_hf_data_processor"]),
                            {("data.train", "code")})
    check_dataset_names(load_config(None, ["data.default.processor=code_hf_data_processor"]), {("data.train", "code")})
    # the shipped code configs validated on the base config's GSM8K (math) and stopped at their first data load;
    # --dry-run names the dataset that holds the other kind, where a built-in dataset's kind is known
    proc = cli("configs/grpo_code_2gpu_test.yaml", "data.validation={dataset_name: gsm8k, split: test}", "--dry-run")
    assert proc.returncode == 2 and "data.validation (gsm8k) holds math problems" in proc.stderr, proc.stderr
    with pytest.raises(ConfigError, match="processor"):  # a NeMo RL processor execrl has no counterpart of
        load_config(None, ["data.default.processor=helpsteer3_data_processor"])


def test_on_policy_kl_approximation_changes_the_update(tmp_path):
    """Two optimizer steps per rollout: in the second the policy has moved from the sampler, so the KL's weight
    pi / pi_sampler is not 1 and the key must change the weights (on the first it is 1 up to float noise)."""
    from .test_train import run

    common = ["grpo.max_num_steps=1", "warmup.sft_steps=0", "grpo.val_period=0", "checkpointing.enabled=false",
              "loss_fn.reference_policy_kl_penalty=0.5",
              "reward.components=[{name: overlong_penalty, weight: 1.0, buffer_tokens: 60}]"]
    on, _ = run(tmp_path, "on", *common, "loss_fn.use_on_policy_kl_approximation=true")
    off, _ = run(tmp_path, "off", *common)
    a, b = on.model.state_dict(), off.model.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_configs_load_as_nemo_rl_loads_them(tmp_path):
    """OmegaConf: `defaults` as a list of files next to the including one (here in another folder), NeMo RL's
    resolvers (${mul:...}), relative interpolation (${.x}), and 1e-8 read as a number."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "a.yaml").write_text("grpo:\n  num_prompts_per_step: 4\n  num_generations_per_prompt: 4\n")
    (tmp_path / "base" / "b.yaml").write_text("policy:\n  optimizer:\n    kwargs: {lr: 1e-6, eps: 1e-8}\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.yaml").write_text(
        "defaults: [../base/a.yaml, ../base/b.yaml]\n"
        "policy:\n  train_global_batch_size: ${mul:${grpo.num_prompts_per_step},${grpo.num_generations_per_prompt}}\n"
        "  generation:\n    temperature: 0.7\n    top_p: ${.temperature}\n")
    cfg = load_config(str(tmp_path / "recipes" / "r.yaml"), ["++grpo.max_num_steps=3"])
    assert cfg.policy.train_global_batch_size == 16 and cfg.policy.generation.top_p == 0.7
    assert cfg.policy.optimizer.kwargs["lr"] == 1e-6 and cfg.policy.optimizer.kwargs["eps"] == 1e-8
    assert cfg.grpo.max_num_steps == 3 and cfg.grpo.num_prompts_per_step == 4
    with pytest.raises(ConfigError, match="cannot resolve"):
        load_config(None, ["policy.model_name=${nowhere.at_all}"])


def test_data_default_fills_each_datasets_missing_keys_as_nemo_rl(tmp_path):
    """NeMo RL's custom-dataset example (grpo_math_1B.yaml's comments): the dataset keys under data.default reach
    every dataset that does not set them (update_single_dataset_config)."""
    (tmp_path / "rows.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    (tmp_path / "resp.yaml").write_text(
        "data:\n  train:\n    data_path: rows.jsonl\n    input_key: question\n"
        "  validation:\n    data_path: rows.jsonl\n    output_key: out\n"
        "  default:\n    dataset_name: ResponseDataset\n    input_key: input\n    output_key: answer\n"
        "    processor: math_hf_data_processor\n    env_name: math\n")
    cfg = load_config(str(tmp_path / "resp.yaml"))
    train, val = cfg.data.train, cfg.data.validation
    assert (train.dataset_name, train.input_key, train.output_key) == ("ResponseDataset", "question", "answer")
    assert (val.dataset_name, val.input_key, val.output_key) == ("ResponseDataset", "input", "out")
    assert cfg.data.default.env_name == "math"


def test_a_defaults_entry_found_among_execrls_own_configs_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (not the checkout, whose ./configs/ is execrl's own)
    (tmp_path / "mine.yaml").write_text("defaults: grpo_math_1B.yaml\ngrpo:\n  max_num_steps: 3\n")
    load_config(str(tmp_path / "mine.yaml"))
    assert "read execrl's own" in capsys.readouterr().err
    (tmp_path / "grpo_math_1B.yaml").write_text("grpo:\n  num_prompts_per_step: 4\n")  # (one of its own beside it)
    assert load_config(str(tmp_path / "mine.yaml")).grpo.num_prompts_per_step == 4
    assert "read execrl's own" not in capsys.readouterr().err
    proc = cli("--dry-run", "grpo.max_num_epochs=1")
    assert "grpo.max_num_epochs=1 passes over the training problems end the run first" in proc.stdout


def test_a_config_named_relative_to_the_checkout_reads_from_elsewhere(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = load_config("configs/grpo_code_2gpu_test.yaml")
    assert cfg.cluster.gpus_per_node == 2 and "read execrl's own" in capsys.readouterr().err


def test_an_epochs_last_short_batch_is_left_out_as_nemo_rls_loader_does():
    """NeMo RL's loader drops an epoch's last batch when it is short (drop_last): 5 problems, 2 a step, max_num_epochs
    1 is 2 steps, and no problem is drawn twice in an epoch. It was 3 steps, the third taking problem 0 again."""
    from execrl.tasks import Problem
    from execrl.trainer.data import ProblemSampler
    from execrl.trainer.setup import steps_per_epoch

    problems = [Problem(str(i), [{"role": "user", "content": str(i)}], "math", answer=str(i)) for i in range(5)]
    sampler = ProblemSampler(problems, seed=0)
    first = [p.id for p in sampler.next(2) + sampler.next(2)]
    assert len(set(first)) == 4 and sampler.epoch == 0
    third = [p.id for p in sampler.next(2)]
    assert sampler.epoch == 1 and len(set(third)) == 2  # the next epoch's first two, not the last one plus another
    assert steps_per_epoch(5, 2) == 2 and steps_per_epoch(8, 4) == 2 and steps_per_epoch(3, 4) == 1
    whole = ProblemSampler(problems, seed=0)
    assert len(whole.next(7)) == 7  # a draw larger than the epoch runs across epochs


def test_nemo_rls_add_resolver_decimal_leading_zeros_and_hydra_deletes():
    """NeMo RL registers add, mul, div and max (${add:...} was refused as an unsupported interpolation); an override
    `grpo.seed=010` is 10 (YAML 1.1 read an octal 8); Hydra's `~key` deletes a key (its default then), where it was
    refused as not key=value, and after a flag argparse blamed the overrides beside it."""
    cfg = load_config("configs/grpo_math_1B.yaml", ["policy.max_total_sequence_length=${add:512,64}", "grpo.seed=010",
                                                    "grpo.num_prompts_per_step=0x10", "~policy.scheduler"])
    assert (cfg.policy.max_total_sequence_length, cfg.grpo.seed, cfg.grpo.num_prompts_per_step) == (576, 10, 16)
    assert cfg.policy.scheduler.warmup_steps == 0 and load_config("configs/grpo_math_1B.yaml").policy.scheduler.warmup_steps
    with pytest.raises(ConfigError, match="no key grpo.nope to delete"):
        load_config(None, ["~grpo.nope"])
    assert load_config(None, ["logger.wandb.name=0815"]).logger.wandb.name == "0815"  # (a name keeps its zero)
    for bad in ("grpo.seed=0x_", "~grpo.seed=[1"):
        with pytest.raises(ConfigError):
            load_config(None, [bad])
    proc = cli("--dry-run", "grpo.max_num_steps=3", "~grpo.seed", "grpo.max_num_epochs=2", "grpo.num_prompts_per_step=2",
               "grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=16")
    assert proc.returncode == 0, proc.stderr
    assert "where they are fewer than 4" in proc.stdout  # (an epoch of 3 problems is 1 step: 2 epochs end at step 2)


def test_a_datasets_deletion_and_setting_apply_in_their_order():
    """(A hunt's find) `~data.x data.x=2` ended with the default, as the datasets' overrides were applied before every
    deletion; Hydra applies them in order: deleted, then 2."""
    cfg = load_config("configs/grpo_math_1B.yaml", ["~data.max_input_seq_length", "data.max_input_seq_length=77"])
    assert cfg.data.max_input_seq_length == 77 and "data.max_input_seq_length" in cfg._written
    cfg = load_config("configs/grpo_math_1B.yaml", ["data.max_input_seq_length=77", "~data.max_input_seq_length"])
    assert cfg.data.max_input_seq_length != 77 and "data.max_input_seq_length" not in cfg._written
    with pytest.raises(ConfigError, match="no key data.nope to delete"):
        load_config(None, ["~data.nope"])


def test_deleting_a_key_data_default_fills_gives_the_schemas_default(tmp_path):
    """(A review's find in the change above) a deletion applied before data.default's fill was undone by it (5, where
    the schema's default is 0), and in a list of datasets refused as deleting nothing."""
    (tmp_path / "c.yaml").write_text("data:\n  default:\n    max_tests: 5\n  train:\n    dataset_name: mbpp\n")
    cfg = load_config(str(tmp_path / "c.yaml"), ["~data.train.max_tests"])
    assert cfg.data.train.max_tests == 0 and "data.train.max_tests" not in cfg._written
    again = load_config(str(tmp_path / "c.yaml"), ["~data.train.max_tests", "data.train.max_tests=3"])
    assert again.data.train.max_tests == 3
    (tmp_path / "l.yaml").write_text("data:\n  default:\n    max_tests: 5\n  train:\n  - dataset_name: mbpp\n"
                                     "  - dataset_name: gsm8k\n")
    cfg = load_config(str(tmp_path / "l.yaml"), ["~data.train.1.max_tests"])
    assert [d.max_tests for d in cfg.data.train] == [5, 0]


def test_keys_the_chosen_variant_does_not_read_are_named():
    """grpo.advantage=dr_grpo with grpo.normalize_rewards=true, or a constant normalizer beside token_level_loss:
    accepted without a word, while neither setting changed a number."""
    from execrl.config.checks import no_effect_note

    cfg = load_config(None, ["grpo.advantage=dr_grpo", "grpo.normalize_rewards=true", "loss_fn.constant_normalizer=64",
                             "loss_fn.token_level_loss=false"])
    note = no_effect_note(cfg)
    assert "grpo.normalize_rewards (grpo.advantage=dr_grpo is r - the group's mean, undivided)" in note
    assert "loss_fn.token_level_loss (loss_fn.constant_normalizer divides" in note
    assert "use_leave_one_out_baseline" not in note  # (not written: the default)
    assert no_effect_note(load_config(None, ["grpo.advantage=dr_grpo"])) is None


def test_a_prompt_template_without_a_place_for_the_problem_is_refused():
    """prompt.template (NeMo RL's prompt_file) without {} posed every problem as the same text, the problem dropped;
    {x} or two {} failed on the first prompt, mid-run."""
    for template, said in [("Solve it.", "has no {} placeholder"), ("Solve {x}", "KeyError"),
                           ("Solve {} and {}", "IndexError"), ("Solve {", "Single '{'")]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            load_config(None, [f"prompt.template={template}"])
    assert load_config(None, ["prompt.template=Solve {} {{as JSON}}"]).prompt.template == "Solve {} {{as JSON}}"


def test_a_schedule_that_keeps_the_learning_rate_at_zero_is_refused():
    """ConstantLR with factor 0 over the run: lr 0 at every step, the reward moving by sampling noise alone, and no
    word (policy.optimizer.kwargs.lr=0 itself was refused)."""
    from execrl.config.checks import validate

    zero = "policy.scheduler={name: torch.optim.lr_scheduler.ConstantLR, kwargs: {factor: 0.0, total_iters: 1000}}"
    with pytest.raises(ConfigError, match="keeps the learning rate at 0 for all 4 steps"):
        validate(load_config(None, ["grpo.max_num_steps=4", zero]))
    with pytest.raises(ConfigError, match="fails at step 3 .ZeroDivisionError"):  # (torch divides by the factor)
        validate(load_config(None, ["grpo.max_num_steps=4", zero.replace("1000", "3")]))
    validate(load_config(None, ["grpo.max_num_steps=4", zero.replace("0.0", "0.5")]))


def test_a_schedule_that_never_lifts_the_learning_rate_within_the_run_is_refused_or_warned():
    """warmup_steps=100000 in a 4-step run trained at 8e-9 without a word (some step's rate was above 0, which was all
    that was checked). The peak over the run's scheduler steps (optimizer steps for warmup_steps, GRPO steps for
    NeMo RL's torch schedulers) under 1% of the configured rate is refused, under 10% warned."""
    from execrl.config.checks import schedule_note, validate

    def check(*overrides):
        cfg = load_config(None, ["grpo.max_num_steps=4", *overrides])
        return schedule_note(cfg, validate(cfg))

    with pytest.raises(ConfigError, match=r"at most 0.004% .*over the run's 4 optimizer steps .*warmup_steps"):
        check("policy.scheduler.warmup_steps=100000")
    # 2 optimizer steps per rollout: a warm-up of 200 reaches 8 of 200, 4%: warned
    note = check("policy.scheduler.warmup_steps=200", "policy.train_global_batch_size=64")
    assert note.startswith("warning:") and "at most 4% " in note and "4 x 2 optimizer step(s) per rollout" in note
    assert check("policy.scheduler.warmup_steps=40") is None and "at most 9.8% " in check(
        "policy.scheduler.warmup_steps=41")
    linear = "policy.scheduler={name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: %s, total_iters: 5000}}"
    with pytest.raises(ConfigError, match=r"at most 0.16% .*4 GRPO steps .*count GRPO steps"):
        check(linear % 0.001)
    assert "at most 5.1% " in check(linear % 0.05)
    # (a hunt's find) a decay to 0 in 2 steps of a 100-step run trained 98 at lr 0 without a word; a cosine to 0 over
    # the run is not warned
    decay = "policy.scheduler={name: torch.optim.lr_scheduler.LinearLR, kwargs: {start_factor: 1.0, end_factor: 0.0, " \
            "total_iters: 2}}"
    assert "under 1% of the configured one for 98 of the run's 100 scheduler steps (from step 3)" in check(
        decay, "grpo.max_num_steps=100")
    assert check("policy.scheduler={name: torch.optim.lr_scheduler.CosineAnnealingLR, kwargs: {T_max: 100}}",
                 "grpo.max_num_steps=100") is None
    # past the steps looked at (10,000): a low start is warned, not refused
    assert "the first 10,000" in schedule_note(*(lambda c: (c, validate(c)))(load_config(None, [
        "grpo.max_num_steps=1000000", "policy.scheduler.warmup_steps=2000000"])))


def test_validating_on_a_training_set_is_warned():
    from execrl.config.checks import validation_overlap_note

    same = load_config(None, ["data.train={dataset_name: mbpp, split: train}",
                              "data.validation={dataset_name: mbpp, split: train}"])
    assert "data.validation mbpp/train is also a training set" in validation_overlap_note(same)
    assert validation_overlap_note(load_config(None, [])) is None
    assert validation_overlap_note(load_config(None, ["data.train={dataset_name: mbpp, split: train}",
                                                      "data.validation={dataset_name: mbpp, split: validation}"])) is None
    # a JSONL file is read whole whatever the split: following the fix the warning named (split=validation) silenced
    # it, and the run validated on its training problems; the fix it names now separates them
    jsonl = "{dataset_name: jsonl, path: examples/problems.jsonl, split: %s}"
    note = validation_overlap_note(load_config(None, ["data.train=" + jsonl % "train",
                                                      "data.validation=" + jsonl % "validation"]))
    assert "jsonl/validation is also a training set" in note and "data.validation: null" in note, note
    note = validation_overlap_note(load_config(None, ["data.train={dataset_name: mbpp, split: validation}",
                                                      "data.validation={dataset_name: mbpp, split: validation}"]))
    assert "mbpp/validation is also a training set" in note and "data.validation.split=train" in note, note


def test_validating_on_a_training_set_named_by_its_path_is_warned(tmp_path, monkeypatch):
    """The check compared the path keys as written: no path (the default copy) and the same copy's path named, or
    two spellings of one folder, were two sources, and a run validating on what it trains on had no warning."""
    from execrl.config.checks import validation_overlap_note

    copy = tmp_path / "mbpp"
    copy.mkdir()
    (copy / "mbpp.jsonl").write_text(json.dumps({"task_id": 1, "text": "t", "code": "def f(): pass",
                                                 "test_list": ["assert f() is None"]}) + "\n")
    monkeypatch.setenv("EXECRL_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for path in (str(copy), "./mbpp", "mbpp/../mbpp"):
        cfg = load_config(None, ["data.train={dataset_name: mbpp, split: train}",
                                 f"data.validation={{dataset_name: mbpp, split: train, path: '{path}'}}"])
        assert "data.validation mbpp/train is also a training set" in validation_overlap_note(cfg), path


def test_run_directories_under_the_home_directory(tmp_path, monkeypatch):
    """logger.log_dir=~/runs/t wrote the run into a folder named ~ in the working directory (its lock, and the check
    that refuses to erase an earlier run, looked in the home directory)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = load_config(None, ["logger.log_dir=~/runs/t", "checkpointing.checkpoint_dir=~/runs/t/ck"])
    assert (cfg.logger.log_dir, cfg.checkpointing.checkpoint_dir) == (f"{tmp_path}/runs/t", f"{tmp_path}/runs/t/ck")


def test_two_runs_into_one_checkpoint_directory_cannot_both_hold_it(tmp_path):
    """(A hunt's find) the checkpoint directory was locked only where it existed and was outside the log directory:
    two new runs with their own log directories (or a second run pointed at the first's checkpoints inside its log
    directory) wrote one checkpoint directory, the second's weights under the first's step names. A directory the lock
    made and nothing else filled goes with it."""
    from execrl.trainer.lock import RunInUse, RunLock
    from execrl.trainer.setup import run_directories

    def lock(log, ckpt):
        return RunLock(run_directories(load_config(None, [f"logger.log_dir={log}",
                                                          f"checkpointing.checkpoint_dir={ckpt}"])))

    for first, second in (((tmp_path / "a", tmp_path / "ck"), (tmp_path / "b", tmp_path / "ck")),
                          ((tmp_path / "a", tmp_path / "a" / "ck"), (tmp_path / "b", tmp_path / "a" / "ck"))):
        held = lock(*first)
        with pytest.raises(RunInUse, match="checkpointing.checkpoint_dir=.* is in use by another run"):
            lock(*second)
        held.release()
        assert not first[0].exists() and not first[1].exists()  # (made by the lock, left empty)
        lock(*second).release()
    lock(tmp_path / "same", tmp_path / "same").release()  # (one directory for both: one lock)
    lock(tmp_path / "p" / "q" / "logs", tmp_path / "p").release()  # (the parents it made go too: a review's find)
    assert not (tmp_path / "p").exists() and not (tmp_path / "same").exists()


def test_a_context_past_the_model_s_positions(capsys):
    """GPT-2 with n_positions=64 and a 128-token context crashed mid-generation (IndexError in the position
    embedding, a device assert on a GPU); a rotary model past its max_position_embeddings ran without a word."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    from execrl.config import ConfigError
    from execrl.trainer.setup import check_positions

    cfg = load_config(None, ["policy.max_total_sequence_length=128", "policy.generation.max_new_tokens=64"])
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=4, n_positions=64))
    with pytest.raises(ConfigError, match="positions are a learned table of 64 .*set policy.max_total_sequence_length=64"):
        check_positions(cfg, gpt2)
    llama = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                                         num_hidden_layers=1, num_attention_heads=4,
                                                         max_position_embeddings=64))
    check_positions(cfg, llama)
    assert "was made for 64 positions (its config's max_position_embeddings)" in " ".join(capsys.readouterr().err.split())
    check_positions(load_config(None, ["policy.max_total_sequence_length=64", "policy.generation.max_new_tokens=32"]),
                    gpt2)  # (within them: nothing)
    assert "warning" not in capsys.readouterr().err


def test_an_overlong_penalty_that_would_penalize_every_answer_is_refused(capsys):
    """overlong_penalty's buffer (default 256 tokens) at or over the generation limit (the built-in default's 64)
    started the penalty below 0 tokens: every answer was penalized by its length, a group of wrong answers trained
    on length alone, and leave-one-out advantages reached the thousands, without a word. Refused at --dry-run, with
    the fix; a buffer below the limit runs, with the note on continuous rewards under leave-one-out."""
    from execrl.config.checks import validate
    from execrl.trainer.setup import reward_model

    both = "reward.components=[{name: test_pass_fraction}, {name: overlong_penalty%s}]"
    for params in ("", ", buffer_tokens: 0", ", max_tokens: 32, buffer_tokens: 32"):
        with pytest.raises(ConfigError, match="buffer_tokens=.* must be above 0 and below"):
            validate(load_config(None, [both % params, "policy.generation.max_new_tokens=64"]))
    proc = cli(both % "", "policy.generation.max_new_tokens=64", "--dry-run")
    assert proc.returncode == 2 and "set buffer_tokens to e.g. 16" in proc.stderr, proc.stderr
    validate(load_config(None, [both % ", weight: 0", "policy.generation.max_new_tokens=64"]))  # (off: no penalty)
    cfg = load_config(None, [both % ", buffer_tokens: 16", "policy.generation.max_new_tokens=64"])
    validate(cfg)
    capsys.readouterr()
    reward_model(cfg)
    assert "overlong_penalty give continuous rewards" in capsys.readouterr().err.replace("\n", " ")


def test_dry_run_refuses_a_model_directory_that_is_not_there(tmp_path):
    """A misspelled local model path passed --dry-run (a note: no memory plan) and stopped the run; a hub id still
    dry-runs without the hub."""
    proc = cli(f"policy.model_name={tmp_path / 'nothere'}", "--dry-run")
    assert proc.returncode == 2 and "no such directory" in proc.stderr and "Traceback" not in proc.stderr
    assert cli("policy.model_name=Qwen/Qwen2.5-0.5B", "--dry-run").returncode == 0


def test_the_dropped_prompts_line_states_the_limit_it_applied(tiny_model_dir, capsys):
    """With max_new_tokens filling the context (NeMo RL's idiom), the line said the limit was the context (512)
    less max_new_tokens (512) beside a limit of 511."""
    from execrl.models import load_tokenizer
    from execrl.trainer.data import load_data
    from execrl.trainer.setup import drop_long

    cfg = load_config(None, ["policy.max_total_sequence_length=40", "policy.generation.max_new_tokens=40"])
    val = load_data(cfg)[1]
    drop_long(val, load_tokenizer(str(tiny_model_dir)), cfg, "data.validation")
    said = capsys.readouterr().err.replace("\n", " ")
    assert "prompt over 39 tokens" in said and "(40) less one token (max_new_tokens 40 fills the context" in said, said


def test_problems_of_one_id_from_two_sets_keep_their_own_warmup_reference(capsys):
    """Two generated sets (or two JSONL files numbered from 0) gave different problems the same id, and the warm-up
    found its references by id: each problem of the first set was taught the second set's solution. Each problem
    now has its own id (the later one renamed `id#2`), with a line saying so (6 training and 6 validation
    problems here)."""
    from execrl.trainer.data import load_data

    sets = ", ".join("{dataset_name: 'builtin:arith-code', split_validation_size: 0, options: {seed: %d, count: 6}}" % s
                     for s in (1, 2))
    train, _, refs = load_data(load_config(None, [f"data.train=[{sets}]", "data.validation=null"]))
    assert len({p.id for p in train}) == len(train) == 12
    assert all(refs[p.id][0]["content"] == p.metadata["reference_completion"] for p in train)
    assert "12 problem(s) share an id with another row (e.g. 'arith/train/0', now 'arith/train/0#2';" in \
        capsys.readouterr().err.replace("\n", " ")


def test_an_empty_config_file_is_refused(tmp_path):
    """(A newcomer's find) an empty file ran the schema's defaults (builtin:tiny-coder, no warm-up), not the built-in
    default that execrl train with no config runs, and logged to the same runs/default."""
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="empty.yaml is empty: write the sections it sets"):
        load_config(str(tmp_path / "empty.yaml"))


def test_a_stop_string_that_ends_every_answer_before_what_is_graded_is_refused():
    """stop_strings=['```'] with fenced code stopped every answer at its opening fence (128 of 128 completions were
    '```', no code, reward 0) and the dry-run passed; an empty stop string ends every answer at its first token."""
    from execrl.config.checks import validate
    from execrl.trainer.flat import flat_reason

    def check(*overrides):
        return validate(load_config(None, list(overrides)))

    for overrides, said in [(['policy.generation.stop_strings=["```"]'], r"'```' is in '```python\\n', which an answer "
                                                                          r"writes before its code"),
                            (['policy.generation.stop_strings=["stop", ""]'], "an empty string, which every text"),
                            # (a hunt's find: "\n" ended every answer after its opening fence, unsaid)
                            (['policy.generation.stop_strings=["\\n"]'], r"'\\n' is in '```python\\n'"),
                            (['policy.generation.stop_strings=["<code"]', "prompt.code_style=tags"], "before its code"),
                            (['policy.generation.stop_strings=["</think>"]', "prompt.answer_format=think"],
                             "before its answer")]:
        with pytest.raises(ConfigError, match=said):
            check(*overrides)
    check('policy.generation.stop_strings=["\\n```\\n"]')  # (the closing fence: after the code)
    check('policy.generation.stop_strings=["```"]', "prompt.code_style=tags")
    check('policy.generation.stop_strings=["```"]', "data.train={dataset_name: gsm8k}",
          "data.validation={dataset_name: gsm8k, split: test}", "reward.components=[{name: math_correct}]",
          "warmup.sft_steps=0")
    assert "stop_strings ['</answer>'] end answers" in flat_reason(load_config(None, [
        'policy.generation.stop_strings=["</answer>"]']))


def test_an_optimizer_that_climbs_the_loss_is_refused():
    """policy.optimizer.kwargs.maximize=true passed (AdamW takes the argument): gradient ascent on the loss."""
    from execrl.config.checks import validate

    with pytest.raises(ConfigError, match="maximize=True climbs the loss"):
        validate(load_config(None, ["policy.optimizer.kwargs.maximize=true"]))
    validate(load_config(None, ["policy.optimizer.kwargs.maximize=false"]))


def test_near_greedy_sampling_is_warned():
    """temperature=1e-4 or top_p=1e-4 passed without a word where temperature=0 and top_k=1 are refused: a group's
    answers nearly alike."""
    from execrl.config.checks import sampling_note

    assert "temperature=0.0001 samples nearly greedily" in sampling_note(load_config(None, [
        "policy.generation.temperature=1e-4"]))
    assert "top_p=0.05 samples" in sampling_note(load_config(None, ["policy.generation.top_p=0.05"]))
    assert sampling_note(load_config(None, ["policy.generation.temperature=0.6", "policy.generation.top_p=0.95"])) is None


@pytest.mark.parametrize("override, message", [
    ("logger.log_dir={file}/logs", r"logger.log_dir=.*/file/logs cannot be created: .*/file is a file"),
    ("checkpointing.checkpoint_dir={file}/ck", r"checkpoint_dir=.*/file/ck cannot be created: .*/file is a file"),
    ("checkpointing.checkpoint_dir=/proc/execrl-ck", r"cannot be created: no folder can be made in /proc"),
    ("checkpointing.checkpoint_dir=/proc", r"checkpoint_dir=/proc cannot be written: no folder can be made in /proc"),
    ("logger.log_dir=/sys", r"log_dir=/sys cannot be written: no folder can be made in /sys"),
    ("reward.components=[{name: test_pass_fraction, weight: -1.0}]", "rewarded for wrong answers"),
    # (a hunt's finds) a penalty with a weight of -1, as other frameworks write one, and an inverted scaling: each run
    # learned to fail, its reward rising
    ("reward.components=[{name: test_pass_fraction}, {name: error_penalty, weight: -1.0}]",
     r"error_penalty with weight -1 adds up to \+1 to the reward: a bonus for programs that fail to compile"),
    ("reward.components=[{name: test_pass_fraction}, {name: error_penalty, penalty: 1.0}]",
     r"error_penalty with weight 1 and penalty=1.0 adds up to \+1 .* and a penalty <= 0"),
    ("reward.components=[{name: test_pass_fraction}, {name: repetition_penalty, weight: -0.5}]",
     "a bonus for repeated text"),
    ("reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, weight: -1.0}]",
     r"adds up to \+1 to the reward: a bonus for answers past its length"),
    ("reward.scaling={enabled: true, source_min: 0.0, source_max: 1.0, target_min: 1.0, target_max: 0.0}",
     "a right answer \\(test_pass_fraction\\) would get less reward than a wrong one"),
    ("reward.components=[{name: overlong_penalty, max_tokens: 4096, buffer_tokens: 256}]",
     "overlong_penalty is the only reward, and it penalizes answers past 3840 tokens"),
])
def test_runs_that_cannot_save_or_learn_are_refused_before_any_work(tmp_path, override, message):
    """(A careless user's finds) a log or checkpoint directory under a file (or in /proc), or one that exists read-only,
    passed --dry-run and ended the run with a traceback at its first save, after steps of work; a correctness
    component of negative weight trained the model to fail (its reward rising, read as progress); an overlong_penalty
    no answer can reach, alone, scored every answer 0."""
    from execrl.config.checks import validate

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, [override.replace("{file}", str(tmp_path / "file"))]))
    assert not any(tmp_path.glob(".execrl-probe-*")) and sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    if override.startswith("checkpointing.checkpoint_dir"):  # (a review's find: never written with checkpoints off)
        validate(load_config(None, [override.replace("{file}", str(tmp_path / "file")), "checkpointing.enabled=false"]))


def test_a_mixed_reward_with_a_negative_correctness_part_and_a_reachable_penalty_stay_allowed():
    from execrl.config.checks import correctness_note, validate

    cfg = load_config(None, ["reward.components=[{name: test_pass_fraction, weight: 1.0}, {name: all_tests_pass, "
                             "weight: -0.5}, {name: overlong_penalty, max_tokens: 4096, buffer_tokens: 256}, "
                             "{name: error_penalty, weight: 0.5}]"])
    validate(cfg)
    assert correctness_note(cfg) is None
    # (a hunt's find) a reward of no correctness component, said at start-up
    for components, learns in [("[{name: format}]", "learns the format"),
                               ("[{name: execution_tiers}, {name: error_penalty}]", "learns programs that run")]:
        note = correctness_note(load_config(None, [f"reward.components={components}"]))
        assert note.startswith("warning: reward.components") and learns in note and "math_correct" in note


def test_a_careless_users_settings_each_stop_with_the_fix(tmp_path):
    """(A hunt's finds) lr=null passed --dry-run and died in torch's AdamW after the model loaded; a component's
    parameter quoted in YAML ("64") raised a TypeError in a check, one of another kind ("SyntaxError" for a list of
    classes) was read as it was; a weight of .inf passed and the run stopped blaming the learning rate; the batch
    error suggested a size it then refused (60 for groups of 8); `~key` as the first argument was read as a file."""
    from execrl.config.checks import validate

    with pytest.raises(ConfigError, match="policy.optimizer.kwargs.lr is null: give the learning rate"):
        validate(load_config(None, ["policy.optimizer.kwargs.lr=null"]))
    cfg = load_config(None, ['reward.components=[{name: test_pass_fraction}, {name: overlong_penalty, '
                             'buffer_tokens: "16"}]'])
    assert cfg.reward.components[1].params["buffer_tokens"] == 16
    for component, said in [("{name: error_penalty, classes: SyntaxError}", "classes='SyntaxError' is not tuple"),
                            ("{name: overlong_penalty, buffer_tokens: many}", "buffer_tokens='many' is not int"),
                            ("{name: test_pass_fraction, weight: .inf}",
                             "weight: Input should be a finite number (got inf)")]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            load_config(None, [f"reward.components=[{component}]"])
    assert load_config(None, ["reward.components=[{name: error_penalty, classes: [SyntaxError]}]"]).reward.components[
        0].params["classes"] == ["SyntaxError"]
    with pytest.raises(ConfigError, match=r"must be a multiple of policy.train_global_batch_size \(48\), e.g. 40 or "
                                          r"120$"):
        plan(load_config(None, ["grpo.num_prompts_per_step=15", "policy.train_global_batch_size=48"]))
    proc = subprocess.run([sys.executable, "-m", "execrl.cli", "train", "--dry-run", "~grpo.seed"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and "seed: 42" in proc.stdout, proc.stderr[-500:]


def test_a_components_text_and_optional_parameters_take_what_yaml_gives_them(tmp_path):
    """(A review's find) a parameter `pattern: str = None` given null was refused, and one of text given 2024 (YAML's
    number) too. Null is its default; a number is its text; true is refused with the fix."""
    (tmp_path / "own.py").write_text("def marked(sample, pattern: str = None, most: int | None = 3) -> float:\n"
                                     "    return float(pattern is None or pattern in sample.completion)\n")
    name = f"{tmp_path / 'own.py'}:marked"
    cfg = load_config(None, [f"reward.components=[{{name: '{name}', pattern: null, most: null}}]"])
    params = cfg.reward.components[0].params
    assert params == {"pattern": None, "most": None}
    assert load_config(None, [f"reward.components=[{{name: '{name}', pattern: 2024}}]"]).reward.components[0].params[
        "pattern"] == "2024"
    with pytest.raises(ConfigError, match=r"pattern=True is not str .*quote it"):
        load_config(None, [f"reward.components=[{{name: '{name}', pattern: true}}]"])
    with pytest.raises(ConfigError, match=r"most='many' is not int"):
        load_config(None, [f"reward.components=[{{name: '{name}', most: many}}]"])
    with pytest.raises(ConfigError, match=r"pattern=1.1 is not str .*quote it"):  # (YAML's 1.10)
        load_config(None, [f"reward.components=[{{name: '{name}', pattern: 1.10}}]"])
    with pytest.raises(ConfigError, match=r"classes=None is not tuple"):  # (a parameter null cannot be)
        load_config(None, ["reward.components=[{name: error_penalty, classes: null}]"])


def test_a_quoted_home_path_and_a_second_config_file(tmp_path, monkeypatch):
    """(A hunt's find) "~/cfg.yaml", quoted, was not found; a second config file read as a malformed override."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "cfg.yaml").write_text("grpo:\n  max_num_steps: 3\n")
    assert load_config("~/cfg.yaml").grpo.max_num_steps == 3
    with pytest.raises(ConfigError, match="a second config file; a run reads one"):
        load_config("~/cfg.yaml", [str(tmp_path / "cfg.yaml")])


def test_w_and_b_settings_it_would_refuse_are_refused_before_the_model_loads():
    """(A hunt's find) logger.wandb.project=team/proj (W&B's own form of a team's project), an id with a slash and a
    mode misspelt all passed the dry run and failed once the model had loaded, in wandb's traceback."""
    with pytest.raises(ConfigError, match=r"write logger.wandb.entity=team logger.wandb.project=proj"):
        load_config(None, ["logger.wandb.project=team/proj"])
    with pytest.raises(ConfigError, match=r"logger.wandb.id: .* in an id: / in 'bad/id'"):
        load_config(None, ["logger.wandb.id=bad/id"])
    with pytest.raises(ConfigError, match=r"logger.wandb.mode: Input should be 'online', 'offline', 'disabled'"):
        load_config(None, ["logger.wandb.mode=ofline"])
    w = load_config(None, ["logger.wandb.project=proj", "logger.wandb.entity=team"]).logger.wandb
    assert (w.project, w.entity, w.mode) == ("proj", "team", None)  # (unset: W&B's environment, WANDB_MODE, decides)


def test_settings_that_train_or_validate_on_something_else_than_said_are_refused():
    """(A hunt's finds) A correctness component of negative weight rewarded wrong answers (its multi-turn one was not
    in the list); validation samples at val_top_k=1 were all alike, pass@k read as pass@1; training on a generated
    task's validation stream made its validation the training set."""
    from execrl.config.checks import validate

    with pytest.raises(ConfigError, match="turn_discounted_pass_fraction has weight -1, so the run is rewarded for "
                                          "wrong answers"):
        validate(load_config(None, ["reward.components=[{name: turn_discounted_pass_fraction, weight: -1.0}]"]))
    with pytest.raises(ConfigError, match=r"val_top_k=1 are all the same \(greedy\), so pass@k would be pass@1"):
        validate(load_config(None, ["grpo.val_num_generations_per_prompt=4", "policy.generation.val_top_k=1",
                                    "policy.generation.val_temperature=1.0"]))
    proc = cli("--dry-run", "data.train.split=validation")
    assert proc.returncode == 2 and "builtin:arith-code/validation is an evaluation split: never train on it (use " \
        "one of ['train'])" in proc.stderr, proc.stderr


def test_dapo_s_answer_line_check_on_boxed_prompts_is_warned(tmp_path):
    """(A hunt's find) env.math.math_verify_impl=dapo_math_verify reads only an 'Answer:' line; on problems posed with
    execrl's instruction (the answer in \\boxed{}) every right answer scored 0, and nothing said so."""
    rows = tmp_path / "math.jsonl"
    rows.write_text("".join(json.dumps({"input": f"What is {i} + 1?", "output": str(i + 1)}) + "\n" for i in range(40)))
    common = ["data.train.dataset_name=ResponseDataset", f"data.train.path={rows}", "data.validation=null",
              "env.math.math_verify_impl=dapo_math_verify", "warmup.sft_steps=0"]
    said = " ".join(cli("--dry-run", *common).stderr.split())
    assert "prompts ask for the final answer in \\boxed{} (execrl's instruction), and env.math.math_verify_impl=" \
        "dapo_math_verify reads only an 'Answer:' line" in said, said
    asked = " ".join(cli("--dry-run", *common, "prompt.system_prompt='End with a line Answer: N.'").stderr.split())
    assert "reads only an 'Answer:' line" not in asked, asked


def test_the_ratio_keys_under_a_loss_without_a_ratio_are_named_and_change_nothing():
    """GSPO, the PPO clips and the dual clip under loss_fn.disable_ppo_ratio (or force_on_policy_ratio, which wins
    over it, as NeMo RL's) gave the run without them to the bit, with no word (a hunt's find): named in the note of
    keys with no effect; sequence_level_importance_ratios is not where it shapes the importance-sampling weights."""
    import torch

    from execrl.algo import LossTerms, policy_loss
    from execrl.config.checks import no_effect_note

    keys = ["loss_fn.token_level_loss=false", "loss_fn.sequence_level_importance_ratios=true",
            "loss_fn.ratio_clip_c=3", "loss_fn.ratio_clip_max=0.01"]
    g = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(4, 6, generator=g) * 3
    terms = LossTerms(logprobs.requires_grad_(), -torch.rand(4, 6, generator=g) * 3, torch.tensor([1.0, -2.0, 0.5, -0.5]),
                      torch.ones(4, 6))
    for variant in ("disable_ppo_ratio", "force_on_policy_ratio"):
        cfg = load_config(None, [f"loss_fn.{variant}=true", *keys])
        note = no_effect_note(cfg)
        for key in ("sequence_level_importance_ratios", "ratio_clip_c", "ratio_clip_max"):
            assert f"loss_fn.{key} (loss_fn.{variant}=true: " in note, note
        assert "ratio_clip_min" not in note  # (not written)
        plain = load_config(None, [f"loss_fn.{variant}=true", "loss_fn.token_level_loss=false"])
        (a, _), (b, _) = (policy_loss(terms, c.loss_fn, num_tokens=24, num_seqs=4) for c in (cfg, plain))
        assert torch.equal(a, b)  # (what the note says: the same loss)
    both = no_effect_note(load_config(None, ["loss_fn.disable_ppo_ratio=true", "loss_fn.force_on_policy_ratio=true"]))
    assert "loss_fn.disable_ppo_ratio (loss_fn.force_on_policy_ratio=true's ratio of 1 is the one used" in both
    correcting = no_effect_note(load_config(None, ["loss_fn.disable_ppo_ratio=true", *keys,
                                                   "loss_fn.use_importance_sampling_correction=true"]))
    assert "sequence_level_importance_ratios" not in correcting and "loss_fn.ratio_clip_c (" in correcting
    assert no_effect_note(load_config(None, keys[:2])) is None  # (GSPO itself: read)
    # a file's values at their defaults (NeMo RL's configs write ratio_clip_min: 0.2) are not the user's (a review's)
    assert no_effect_note(load_config(None, ["loss_fn.disable_ppo_ratio=true", "loss_fn.ratio_clip_min=0.2"])) is None


def test_validation_settings_of_a_run_that_never_validates_are_named():
    """val_num_generations_per_prompt, the validation sampling and the like under grpo.val_period=0 with no first or
    last validation: accepted without a word (a hunt's find)."""
    from execrl.config.checks import no_effect_note

    off = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_num_generations_per_prompt=4",
           "policy.generation.val_temperature=1.0"]
    note = no_effect_note(load_config(None, off))
    assert "grpo.val_num_generations_per_prompt (read only with a validation (grpo.val_period > 0" in note
    assert "policy.generation.val_temperature (read only with a validation" in note
    assert "val_num_generations" not in (no_effect_note(load_config(None, [*off, "grpo.val_at_end=true"])) or "")


def test_the_engines_settings_under_the_transformers_backend_are_named():
    """policy.generation.cuda_graphs, sync_every and compile are the execrl engine's: under the transformers
    backend they were accepted without a word (a hunt's find)."""
    from execrl.config.checks import no_effect_note

    note = no_effect_note(load_config(None, ["policy.generation.backend=transformers", "policy.generation.sync_every=4",
                                             "policy.generation.cuda_graphs=false"]))
    assert "policy.generation.sync_every (read only with the execrl engine (policy.generation.backend=execrl))" in note
    assert "policy.generation.cuda_graphs (" in note
    assert no_effect_note(load_config(None, ["policy.generation.sync_every=4"])) is None
