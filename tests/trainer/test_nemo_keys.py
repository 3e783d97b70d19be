"""NeMo RL's newer keys, each doing what it does there: validation's own sampling, the chat template's kwargs, HF
config overrides, the first step validated, advantage clipping."""

import json

import pytest
import torch

from execrl.config import load_config
from execrl.rollout import SamplingParams
from execrl.trainer.loop import periodic_validation, train
from execrl.trainer.rollouts import sampling

from .test_train import SMALL


def test_validation_samples_with_its_own_settings():
    cfg = load_config(None, ["policy.generation.temperature=0.9", "policy.generation.top_k=50"])
    assert sampling(cfg) == SamplingParams(0.9, 1.0, 50, False)
    assert sampling(cfg, validation=True) == SamplingParams(0.0, 1.0, None)  # execrl's default: greedy
    nemo = load_config(None, ["policy.generation.temperature=0.9", "policy.generation.val_temperature="
                              "${policy.generation.temperature}", "policy.generation.val_top_p=0.95"])
    assert sampling(nemo, validation=True) == SamplingParams(0.9, 0.95, None)


def test_val_start_at_delays_periodic_validation():
    cfg = load_config(None, ["grpo.val_period=2", "grpo.val_start_at=5"])
    assert [s for s in range(1, 11) if periodic_validation(cfg, s)] == [6, 8, 10]
    assert [s for s in range(1, 7) if periodic_validation(load_config(None, ["grpo.val_period=2"]), s)] == [2, 4, 6]


def test_advantage_clip_bounds_the_advantages():
    from execrl.trainer.step import advantages

    # one group of 4, rewards 1, 0, 0, 0, leave-one-out: the first 1 - 0 (the others' std is 0: undivided); each
    # other (0 - 1/3) / std(1, 0, 0) = -1/3 / 0.577 = -0.577
    class Table:
        episodes = ()  # (no environment: no self-play roles)

        def reward_table(self):
            return torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.ones(1, 4, dtype=torch.bool)

    free, _, _ = advantages(Table(), load_config(None, []))
    clipped, _, _ = advantages(Table(), load_config(None, ["grpo.advantage_clip_low=-0.5",
                                                           "grpo.advantage_clip_high=0.8"]))
    assert free.tolist() == pytest.approx([1.0, -0.57735, -0.57735, -0.57735], abs=1e-4)
    assert clipped.tolist() == pytest.approx([0.8, -0.5, -0.5, -0.5])


def test_chat_template_kwargs_reach_the_template(tmp_path):
    """policy.tokenizer.chat_template_kwargs (e.g. Qwen3's enable_thinking) are passed to the chat template: here a
    template that prints one of them ahead of the prompt, seen in the rollouts the run writes."""
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if mark is defined %}{{ mark }} {% endif %}"
                "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                "{% endif %}")
    train(load_config(None, [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=0", "warmup.sft_steps=0",
                             "checkpointing.enabled=false", "logger.rollouts_period=1", f"logger.log_dir={tmp_path}",
                             f"policy.tokenizer.chat_template={json.dumps(template)}",
                             "policy.tokenizer.chat_template_kwargs={mark: THINK-OFF}"]))
    rows = [json.loads(line) for line in (tmp_path / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert rows and all("<|im_start|>user\nTHINK-OFF " in r["prompt"] for r in rows)


def test_hf_config_overrides_change_the_loaded_config(tiny_model_dir):
    from execrl.config import ConfigError
    from execrl.config.checks import validate
    from execrl.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(tiny_model_dir), "cpu", config_overrides={"attention_dropout": 0.25})
    assert model.config.attention_dropout == 0.25
    with pytest.raises(ConfigError, match="built here"):
        validate(load_config(None, ["policy.hf_config_overrides={attention_dropout: 0.25}"]))
    # (a newcomer's find: each of these was a traceback from the model's constructor, after --dry-run had passed)
    model, _ = load_model_and_tokenizer(str(tiny_model_dir), "cpu",
                                        config_overrides={"rope_parameters": {"rope_theta": 5000.0}})
    rope = model.config.rope_parameters
    assert rope["rope_theta"] == 5000.0 and rope["rope_type"] == "default"  # (merged: its type kept)
    for override, message in [("{rope_theta: 5000.0}", "qwen2's config has no field rope_theta .transformers 5 keeps "
                                                       "the rope's settings in rope_parameters"),
                              ("{not_a_key: 1}", "policy.hf_config_overrides.not_a_key: qwen2's config has no field")]:
        with pytest.raises(ConfigError, match=message):
            validate(load_config(None, [f"policy.model_name={tiny_model_dir}", f"policy.hf_config_overrides={override}"]))


def test_validation_with_several_samples_reports_their_mean_and_pass_at_k(tmp_path):
    """grpo.val_num_generations_per_prompt = k: k samples of each validation problem at val_temperature; pass@1 is
    their mean, pass@k the chance one of k is right (here, from exactly k: whether any is)."""
    from execrl.config import ConfigError
    from execrl.config.checks import validate

    base = [*SMALL, "grpo.max_num_steps=1", "grpo.val_period=1", "grpo.max_val_samples=6", "warmup.sft_steps=20",
            "checkpointing.enabled=false", f"logger.log_dir={tmp_path}"]
    train(load_config(None, [*base, "grpo.val_num_generations_per_prompt=4",
                             "policy.generation.val_temperature=1.0", "logger.rollouts_period=0"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/pass@1" in r]
    assert len(evals) == 1 and evals[0]["eval/num_problems"] == 6
    assert evals[0]["eval/pass@1"] <= evals[0]["eval/pass@4"] <= 1.0
    with pytest.raises(ConfigError, match="val_temperature > 0"):
        validate(load_config(None, ["grpo.val_num_generations_per_prompt=4"]))


def test_overrides_of_a_per_layer_type_rope_name_the_nested_form(tmp_path):
    """(A review's find) Gemma 3 keeps one rope_parameters dict per layer type: {rope_parameters: {rope_theta: 5}},
    the form the rope_theta refusal names, was merged beside them, read by nothing, and the run trained on the old
    rope. It is refused with the nested form, which applies (and keeps each type's other settings)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from execrl.config import ConfigError
    from execrl.config.checks import validate
    from execrl.models import ModelNotFound, build_tokenizer, load_model_and_tokenizer

    tok = build_tokenizer(["def add(a, b):\n    return a + b\n"] * 10, 300)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=16,
                           layer_types=["sliding_attention", "full_attention"])
    Gemma3ForCausalLM(cfg).save_pretrained(tmp_path / "g")
    tok.save_pretrained(tmp_path / "g")
    with pytest.raises(ModelNotFound, match=r"one setting per layer type .*full_attention: \{rope_theta: ...\}"):
        load_model_and_tokenizer(str(tmp_path / "g"), "cpu", dtype="fp32",
                                 config_overrides={"rope_parameters": {"rope_theta": 5.0}})
    with pytest.raises(ConfigError, match="one setting per layer type"):  # (and before the run: --dry-run)
        validate(load_config(None, [f"policy.model_name={tmp_path / 'g'}",
                                    "policy.hf_config_overrides={rope_parameters: {rope_theta: 5.0}}"]))
    model, _ = load_model_and_tokenizer(str(tmp_path / "g"), "cpu", dtype="fp32", config_overrides={
        "rope_parameters": {"full_attention": {"rope_theta": 5.0}}})
    rope = model.config.rope_parameters
    assert rope["full_attention"]["rope_theta"] == 5.0 and "rope_theta" not in rope
    assert rope["full_attention"]["rope_type"] and rope["sliding_attention"] == cfg.rope_parameters["sliding_attention"]
