"""LoRA (execrl.lora): which layers are adapted, the engine's low-rank path against peft's forward, the reference
policy as the base with adapters off, and the adapter's files as peft reads them."""

import pytest
import torch

from execrl.config.schema import LoraConfig
from execrl.lora import (
    adapted,
    adapter_state,
    apply_lora,
    base_only,
    base_state,
    from_adapter_state,
    merged_state,
    target_names,
    to_model_names,
)
from execrl.models import build_tiny_model, build_tokenizer
from execrl.rollout import RolloutEngine, SamplingParams
from execrl.rollout.fuse import fuse_projections
from execrl.tasks.arith import corpus


def tiny(seed=0):
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=64, layers=2, heads=4, seed=seed).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger random weights than the init: varied text
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    return model, tok


def randomize_adapters(model, scale=0.3):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in adapted(model):
            b = m.lora_B["default"].weight
            b.copy_(torch.randn(b.shape, generator=g) * scale)  # (B starts at zero: the policy would be the base)


def logprobs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1).gather(
            -1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_layers_chosen_as_nemo_rl_names_them():
    model, _ = tiny()
    every = target_names(model, LoraConfig())  # match_all_linear: the decoder's linear layers, not the LM head
    assert len(every) == 2 * 7 and not any("lm_head" in n for n in every)
    some = target_names(model, LoraConfig(match_all_linear=False, target_modules=["q_proj", "*.mlp.*"],
                                          exclude_modules=["*.1.mlp.down_proj"]))
    assert some == sorted(["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj",
                           "model.layers.0.mlp.down_proj", *[f"model.layers.{i}.mlp.{p}" for i in (0, 1)
                                                               for p in ("gate_proj", "up_proj")]])
    with pytest.raises(ValueError, match="match_all_linear=false"):
        target_names(model, LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="names no linear layer"):
        target_names(model, LoraConfig(match_all_linear=False, target_modules=["qproj"]))
    with pytest.raises(ValueError, match="LM head"):
        target_names(model, LoraConfig(match_all_linear=False, target_modules=["lm_head"]))
    with pytest.raises(ValueError, match="targets no layer"):
        target_names(model, LoraConfig(exclude_modules=["*"]))
    with pytest.raises(ValueError, match="exclude_modules: 'o_prj' names no linear layer"):  # (it adapted all, unsaid)
        target_names(model, LoraConfig(exclude_modules=["o_prj"]))
    # NeMo RL's recipes that name only what to leave out (match_all_linear false, target_modules []): every decoder
    # linear layer but those, as Automodel's matcher falls back to (it was refused after --dry-run had passed)
    left = target_names(model, LoraConfig(match_all_linear=False, exclude_modules=["*o_proj*"]))
    assert left == [n for n in every if not n.endswith("o_proj")] and len(left) == 2 * 6
    from execrl.config import load_config
    from execrl.config.checks import check_lora
    from execrl.config.errors import ConfigError

    with pytest.raises(ConfigError, match="targets no layer"):  # (before any work: --dry-run says it)
        check_lora(load_config(None, ["policy.lora.enabled=true", "policy.lora.match_all_linear=false"]))


def test_layers_of_families_whose_decoder_is_not_model_layers():
    """GPT-J, CodeGen and GPT-BigCode keep their decoder in transformer.h: every one of their layers was "outside
    the decoder layers", and LoRA was refused with "set match_all_linear=true" where it was already on; GPT-2's
    Conv1D layers are named as what LoRA does not adapt."""
    from transformers import AutoModelForCausalLM, GPT2Config, GPTBigCodeConfig, GPTJConfig

    small = {"vocab_size": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}
    for config, layers in ((GPTJConfig(**small, rotary_dim=4), ["attn.q_proj", "attn.k_proj", "attn.v_proj",
                                                                 "attn.out_proj", "mlp.fc_in", "mlp.fc_out"]),
                           (GPTBigCodeConfig(**small), ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"])):
        model = AutoModelForCausalLM.from_config(config)
        assert target_names(model, LoraConfig()) == sorted(f"transformer.h.{i}.{n}" for i in (0, 1) for n in layers)
    with pytest.raises(ValueError, match=r"decoder layers \(transformer.h\) hold no torch Linear layer to adapt "
                                         r"\(their weights are in \['Conv1D'\]"):
        target_names(AutoModelForCausalLM.from_config(GPT2Config(**small)), LoraConfig())


def test_an_moe_models_adapters_are_on_the_layers_the_run_names(tmp_path):
    """peft's conversion for adapters of transformers 4 turned the MLP projections named (DeepSeek-V3's dense layer
    and shared experts) into the routed experts' fused weights: those the run named had no adapter, the experts got
    one, and save_merged failed at the first checkpoint."""
    from transformers import AutoModelForCausalLM, DeepseekV3Config

    config = DeepseekV3Config(vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                              num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
                              topk_group=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                              v_head_dim=16)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    names = target_names(model, LoraConfig())
    assert "model.layers.0.mlp.gate_proj" in names and "model.layers.1.mlp.shared_experts.down_proj" in names
    peft_model = apply_lora(model, LoraConfig(dim=4, alpha=8))
    assert sorted(n for n, m in model.named_modules() if m in adapted(model)) == names
    assert not getattr(peft_model.peft_config["default"], "target_parameters", None)  # (peft before 0.17 has none)
    randomize_adapters(model)
    ids = list(range(5, 30))
    adapted_lp = logprobs(model, ids)
    merged = AutoModelForCausalLM.from_config(config)
    merged.load_state_dict(merged_state(model.state_dict(), scaling=8 / 4), strict=False)  # (the tied LM head)
    torch.testing.assert_close(logprobs(merged, ids), adapted_lp, atol=1e-5, rtol=1e-5)
    from peft import PeftModel  # loaded back as execrl loads a checkpoint's adapter (models._load_adapter)

    from execrl.lora import as_named

    peft_model.save_pretrained(tmp_path / "adapter")
    base = AutoModelForCausalLM.from_config(config)
    base.load_state_dict(merged_state(model.state_dict(), scaling=0.0), strict=False)
    with as_named():
        loaded = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).merge_and_unload()
    torch.testing.assert_close(logprobs(loaded, ids), adapted_lp, atol=1e-5, rtol=1e-5)


def test_adapters_start_at_zero_and_only_they_train():
    model, _ = tiny()
    ids = list(range(5, 40))
    before = logprobs(model, ids)
    apply_lora(model, LoraConfig(dim=4, alpha=8))
    torch.testing.assert_close(logprobs(model, ids), before)  # B = 0: the policy starts as the base
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("fused, merge", [(False, False), (True, False), (True, True)])
def test_engine_generates_with_the_adapters_and_reports_their_logprobs(fused, merge):
    """The low-rank path (async GRPO's) and merge mode (sync: W + B A for the call, then W's exact bytes back)."""
    model, tok = tiny()
    peft_model = apply_lora(model, LoraConfig(dim=4, alpha=8))
    randomize_adapters(model)
    if fused:
        fuse_projections(model)  # the base layers' q/k/v and gate/up joined; the adapters added on top
    base = {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" not in n}
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ["Read two integers.", "def f(x):"]]
    torch.manual_seed(0)
    engine = RolloutEngine(model, tok, slots=4, max_len=128, merge_adapters=merge)
    assert engine.dec.merge == merge
    out = engine.generate(prompts, 2, 24, SamplingParams(temperature=1.0))
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if ".lora_" not in n)
    for prompt, group in zip(prompts, out):
        for c in group:
            got = torch.tensor(c.logprobs)
            torch.testing.assert_close(got, logprobs(model, prompt + c.ids)[len(prompt) - 1:], atol=1e-4, rtol=1e-4)
            with base_only(peft_model):  # the reference (adapters off) is a different distribution
                assert (logprobs(model, prompt + c.ids)[len(prompt) - 1:] - got).abs().max() > 1e-2


def test_engine_uses_the_adapters_even_while_the_trainer_has_them_off():
    model, tok = tiny()
    peft_model = apply_lora(model, LoraConfig(dim=4, alpha=8))
    randomize_adapters(model)
    prompt = tok("Read two integers.", add_special_tokens=False)["input_ids"]
    greedy = SamplingParams(temperature=0.0)
    on = RolloutEngine(model, tok, slots=1, max_len=128).generate([prompt], 1, 16, greedy)[0][0]
    with base_only(peft_model):  # (async GRPO: rollouts are generated while the reference is scored)
        during = RolloutEngine(model, tok, slots=1, max_len=128).generate([prompt], 1, 16, greedy)[0][0]
    assert during.ids == on.ids


def test_reference_is_the_base_model():
    model, _ = tiny()
    base, _ = tiny()
    peft_model = apply_lora(model, LoraConfig(dim=4, alpha=8))
    randomize_adapters(model)
    ids = list(range(5, 40))
    with base_only(peft_model):
        torch.testing.assert_close(logprobs(model, ids), logprobs(base, ids))
    assert (logprobs(model, ids) - logprobs(base, ids)).abs().max() > 1e-2


def test_state_names_round_trip_and_the_merged_model_equals_the_adapted_one():
    model, tok = tiny()
    apply_lora(model, LoraConfig(dim=4, alpha=8))
    randomize_adapters(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    adapters = adapter_state(state)
    assert all(k.startswith("base_model.model.model.layers.") and ".default." not in k for k in adapters)
    assert from_adapter_state(adapters).keys() == {k for k in state if ".lora_" in k}
    base = base_state(state)
    assert "model.layers.0.self_attn.q_proj.weight" in base and not any("lora" in k or "base_layer" in k for k in base)
    assert to_model_names(base, model).keys() == {k for k in state if ".lora_" not in k}
    plain, _ = tiny()
    plain.load_state_dict(merged_state(state, scaling=8 / 4), strict=False)  # (the tied LM head)
    ids = list(range(5, 40))
    torch.testing.assert_close(logprobs(plain, ids), logprobs(model, ids), atol=1e-5, rtol=1e-5)


def test_nemo_rl_lora_cfg_is_read_as_policy_lora(tmp_path):
    from pathlib import Path

    from execrl.config import ConfigError, load_config
    from execrl.config.checks import no_effect_note, validate

    nemo = Path(__file__).parents[1] / "assets" / "nemo_rl" / "eraF_ad3472a" / "examples" / "configs" / "grpo_math_1B.yaml"
    off = load_config(str(nemo))  # NeMo RL's own config: lora_cfg present, disabled
    validate(off)
    assert not off.policy.lora.enabled and "policy.dtensor_cfg.lora_cfg (off)" in no_effect_note(off)
    on = load_config(str(nemo), ["policy.dtensor_cfg.lora_cfg.enabled=true", "policy.dtensor_cfg.lora_cfg.dim=16"])
    validate(on)
    lora = on.policy.lora
    assert (lora.enabled, lora.dim, lora.alpha, lora.match_all_linear, lora.lora_A_init, lora.target_modules) == \
        (True, 16, 32, True, "xavier", [])
    assert "use_triton" in no_effect_note(on)
    with pytest.raises(ConfigError, match="LoRA is off"):
        validate(load_config(None, ["policy.lora.dim=16"]))
    # lora_cfg.enabled written false turns LoRA off where it is the later word (it was dropped with the section's
    # other keys, and LoRA stayed on: a hunt's find), and clashes with policy.lora.enabled=true at one level
    mine = tmp_path / "mine.yaml"
    mine.write_text("policy:\n  lora:\n    enabled: true\n")
    assert load_config(str(mine)).policy.lora.enabled
    assert not load_config(str(mine), ["policy.dtensor_cfg.lora_cfg.enabled=false"]).policy.lora.enabled
    mine.write_text("policy:\n  lora:\n    enabled: true\n  dtensor_cfg:\n    lora_cfg:\n      enabled: false\n")
    with pytest.raises(ConfigError, match="set one setting two ways"):
        load_config(str(mine))
    # an inherited NeMo config's own enabled: false (its default) under a file that turns LoRA on: on, as before
    (tmp_path / "base.yaml").write_text(f"defaults: {nemo}\npolicy:\n  lora:\n    enabled: true\n")
    (tmp_path / "top.yaml").write_text("defaults: base.yaml\n")
    assert load_config(str(tmp_path / "top.yaml")).policy.lora.enabled
    assert "policy.dtensor_cfg.lora_cfg.enabled" not in load_config(str(nemo))._nemo_mapped  # (no note of a default)
    with pytest.raises(ConfigError, match="match_all_linear=false"):
        validate(load_config(None, ["policy.lora.enabled=true", "policy.lora.target_modules=[q_proj]"]))


def test_a_snapshot_opponent_copies_the_adapters_and_shares_the_frozen_base():
    from execrl.config import load_config
    from execrl.trainer.opponent import build_opponent
    from tests.games.test_selfplay import GAME

    model, tok = tiny()
    apply_lora(model, LoraConfig(dim=4, alpha=8))
    fuse_projections(model)
    opp = build_opponent(load_config(None, [*GAME, "env.game.opponent=snapshot"]), model, tok, slots=4)
    pairs = list(zip(model.named_parameters(), opp.model.parameters()))
    assert all((m is o) == (".lora_" not in n) for (n, m), o in pairs)  # one base, two sets of adapters
    randomize_adapters(model)  # the policy learns; the snapshot keeps its adapters until it is refreshed
    ids = list(range(5, 40))
    assert (logprobs(opp.model, ids) - logprobs(model, ids)).abs().max() > 1e-2
    assert opp.refresh(0, model)
    torch.testing.assert_close(logprobs(opp.model, ids), logprobs(model, ids))
    prompt = tok("Read two integers.", add_special_tokens=False)["input_ids"]
    greedy = SamplingParams(temperature=0.0)
    ours = RolloutEngine(model, tok, slots=1, max_len=128, merge_adapters=True).generate([prompt], 1, 16, greedy)
    assert opp.generator.generate([prompt], 1, 16, greedy)[0][0].ids == ours[0][0].ids


def test_a_moved_checkpoints_adapter_finds_the_base_saved_beside_it(tmp_path):
    """A run that made its own base saves it beside its checkpoints, and its adapter names that base by its absolute
    path: once the run directory was moved, `execrl eval --model CK/step_N/policy` could not load it."""
    import json

    from execrl.models import adapter_base

    ck = tmp_path / "moved" / "ck"
    (ck / "step_000002" / "policy").mkdir(parents=True)
    (ck / "base").mkdir()
    (ck / "base" / "config.json").write_text("{}")
    (ck / "step_000002" / "policy" / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": str(tmp_path / "old" / "ck" / "base")}))
    assert adapter_base(ck / "step_000002" / "policy") == str((ck / "base").resolve())
    (tmp_path / "old" / "ck" / "base").mkdir(parents=True)  # (a hunt's find: another run saved its own base at the
    (tmp_path / "old" / "ck" / "base" / "config.json").write_text("{}")  # old path; the copy's base is its own)
    from execrl.lora import OWN_BASE

    assert adapter_base(ck / "step_000002" / "policy") == str(tmp_path / "old" / "ck" / "base")  # (no mark: as named)
    (ck / "step_000002" / "policy" / OWN_BASE).write_text("")
    assert adapter_base(ck / "step_000002" / "policy") == str((ck / "base").resolve())
    (ck / "step_000002" / "policy" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/x"}))
    assert adapter_base(ck / "step_000002" / "policy") == "Qwen/x"  # (a hub id is kept)
    from execrl.models import ModelNotFound, load_model_and_tokenizer

    alone = tmp_path / "alone"  # (a hunt's find) an adapter whose base is gone: the error named only the base's path
    alone.mkdir()
    (alone / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(ModelNotFound, match=f"{alone} is a LoRA adapter of the base model {tmp_path / 'gone'} .*"
                                            "could not be loaded: .*save_merged"):
        load_model_and_tokenizer(str(alone), "cpu", offline=True)
