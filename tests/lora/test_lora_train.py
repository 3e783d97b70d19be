"""`execrl train` with LoRA on CPU: only the adapters move, the checkpoint's adapter loads with peft (offline, on the
run's own base), the merged model equals it, and resume is bit-exact (adapters, their optimizer state)."""

import json

import torch

from execrl.config import load_config
from execrl.lora import to_model_names
from execrl.models import load_model_and_tokenizer
from execrl.trainer.opponent import build_opponent
from tests.games.test_selfplay import GAME
from tests.trainer.test_train import run

LORA = ["policy.lora.enabled=true", "policy.lora.dim=4", "policy.optimizer.kwargs.lr=1e-3"]


def test_only_the_adapters_train_and_the_checkpoint_loads_with_peft(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    r, d = run(tmp_path, "r", *LORA, "grpo.max_num_steps=2", "policy.lora.save_merged=true",
               "loss_fn.reference_policy_kl_penalty=0.01", "policy.generation.stop_token_ids=[201]")
    assert r.ref_model is None  # the reference is the base with the adapters off
    base_dir = d / "ckpt" / "base"
    base = AutoModelForCausalLM.from_pretrained(base_dir)  # the warm-up's model, saved once beside the checkpoints
    state = r.model.state_dict()
    for k, v in to_model_names(base.state_dict(), r.model).items():
        torch.testing.assert_close(state[k], v)
    ckpt = sorted((d / "ckpt").glob("step_*"))[-1]
    from execrl.lora import OWN_BASE  # (its adapter's base is the base/ beside its checkpoints, wherever they go)

    assert (ckpt / "policy" / OWN_BASE).is_file()
    config = json.loads((ckpt / "policy" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base_dir.resolve()) and config["r"] == 4
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                       ckpt / "policy")
    from peft import AutoPeftModelForCausalLM  # (a hunt's find: the adapter had no task type, and it refused it)

    auto = AutoPeftModelForCausalLM.from_pretrained(ckpt / "policy")
    merged = AutoModelForCausalLM.from_pretrained(ckpt / "merged")
    evaluated, _ = load_model_and_tokenizer(str(ckpt / "policy"), "cpu", "float32")  # (execrl eval, an opponent)
    ends = merged.generation_config.eos_token_id  # (a hunt's find: the adapter's eval stopped at the base's ends)
    assert 201 in ends and evaluated.generation_config.eos_token_id == ends
    ids = torch.arange(5, 60)[None]
    with torch.no_grad():
        ours = r.model(ids).logits
        assert (ours - base(ids).logits).abs().max() > 1e-4  # the adapters learned something
        torch.testing.assert_close(loaded(ids).logits, ours, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(auto(ids).logits, ours, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(merged(ids).logits, ours, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(evaluated(ids).logits, ours, atol=1e-4, rtol=1e-4)
    # a LoRA checkpoint as self-play's fixed opponent (env.game.opponent_model: the step directory)
    cfg = load_config(None, [*GAME, "env.game.opponent=model", f"env.game.opponent_model={ckpt}"])
    opponent = build_opponent(cfg, r.weights.compute, r.tokenizer, slots=4)
    with torch.no_grad():
        torch.testing.assert_close(opponent.model(ids).logits, ours, atol=1e-4, rtol=1e-4)
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if "train/kl" in x]
    assert rows and all(m["train/logprob_mismatch"] < 1e-4 for m in rows)  # engine (low-rank path) = trainer
    # (a hunt's find) a full fine-tune from the adapter: peft left the merged model frozen ("optimizer got an empty
    # parameter list")
    assert all(p.requires_grad for p in evaluated.parameters())
    full, _ = run(tmp_path, "full", f"policy.model_name={ckpt / 'policy'}", "grpo.max_num_steps=1",
                  "warmup.sft_steps=0", "checkpointing.enabled=false", "grpo.val_period=0")
    assert full.step == 1


def test_resume_restores_the_adapters_and_their_optimizer(tmp_path):
    straight, _ = run(tmp_path, "straight", *LORA, "grpo.max_num_steps=4")
    run(tmp_path, "resumed", *LORA, "grpo.max_num_steps=2")
    second, _ = run(tmp_path, "resumed", *LORA, "grpo.max_num_steps=4")
    assert second.resumed_from.endswith("step_000002")
    a, b = straight.model.state_dict(), second.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_mixed_precision_keeps_fp32_adapters_over_one_shared_bf16_base(tmp_path):
    r, _ = run(tmp_path, "bf16", *LORA, "grpo.max_num_steps=2", "policy.precision=bfloat16",
               "policy.activation_checkpointing=true", "warmup.sft_steps=0",  # a reward that varies without it:
               "reward.components=[{name: overlong_penalty, buffer_tokens: 56}]")
    master, compute = r.weights.master, r.weights.compute
    assert master is not compute
    pairs = list(zip(master.named_parameters(), compute.named_parameters()))
    for (name, m), (_, c) in pairs:
        if ".lora_" in name:
            assert m.dtype == torch.float32 and c.dtype == torch.bfloat16 and m.requires_grad
            torch.testing.assert_close(m.to(torch.bfloat16), c, atol=0, rtol=0)  # refreshed after each step
        else:
            assert m is c and c.dtype == torch.bfloat16  # the base: one set of tensors
    assert sum(m.abs().sum() for (n, m), _ in pairs if "lora_B" in n) > 0  # the adapters moved


def test_a_bf16_lora_runs_warm_up_moves_its_base_as_a_full_fine_tunes_does(tmp_path):
    """The warm-up trains a LoRA run's bf16 base, which has no fp32 master: plain AdamW rounded most updates away
    (15.6% of the base's weights moved where a full fine-tune's fp32 master moved 84%). It rounds them
    stochastically."""
    start, _ = load_model_and_tokenizer(load_config(None).policy.model_name, "cpu", "float32", seed=1)
    r, _ = run(tmp_path, "warm", "policy.lora.enabled=true", "policy.lora.dim=4", "policy.precision=bfloat16",
               "warmup.sft_steps=6", "warmup.lr=1e-5", "grpo.max_num_steps=1", "policy.optimizer.kwargs.lr=1e-30",
               "checkpointing.enabled=false", "grpo.val_period=0", "grpo.seed=1")
    after = {n.replace(".base_layer", ""): p for n, p in r.weights.compute.named_parameters() if ".lora_" not in n}
    before = {n: p for n, p in start.named_parameters() if n in after}
    moved = sum(int((after[n] != b.to(after[n].dtype)).sum()) for n, b in before.items())
    assert moved > 0.4 * sum(b.numel() for b in before.values())


def test_a_resume_reads_back_only_its_own_base(tmp_path, tiny_model_dir):
    """(A review's find) a base that another run (its own, with a warm-up) left beside the checkpoints replaced the
    frozen weights of a resumed run whose base is policy.model_name: its reward jumped from 0.2 to 1.0 at the resume.
    Only a run that made its base reads one back."""
    from transformers import AutoModelForCausalLM

    own = [*LORA, f"policy.model_name={tiny_model_dir}", "warmup.sft_steps=0", "checkpointing.save_period=1"]
    first, d = run(tmp_path, "b", *own, "grpo.max_num_steps=1")
    stale = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in stale.parameters():
            p.add_(1.0)
    stale.save_pretrained(d / "ckpt" / "base")
    second, _ = run(tmp_path, "b", *own, "grpo.max_num_steps=2")
    from execrl.lora import OWN_BASE

    assert not (sorted((d / "ckpt").glob("step_*"))[-1] / "policy" / OWN_BASE).exists()  # (its base: model_name's)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    state = second.model.state_dict()
    for k, v in to_model_names(base, second.model).items():
        torch.testing.assert_close(state[k], v)


def test_an_adapter_on_a_base_with_config_overrides_loads_as_it_trained(tmp_path, tiny_model_dir):
    """(A review's find) a LoRA run of policy.model_name with policy.hf_config_overrides wrote an adapter whose base,
    loaded by execrl eval or as an opponent, lacked the overrides: another model (1.4 nats off the merged export,
    which has them). They are written beside the adapter and applied to its base."""
    from transformers import AutoModelForCausalLM

    r, d = run(tmp_path, "o", *LORA, f"policy.model_name={tiny_model_dir}", "warmup.sft_steps=0",
               "grpo.max_num_steps=1", "checkpointing.save_period=1", "policy.lora.save_merged=true",
               "policy.hf_config_overrides={rms_norm_eps: 0.5}")
    ckpt = sorted((d / "ckpt").glob("step_*"))[-1]
    assert json.loads((ckpt / "policy" / "base_config_overrides.json").read_text()) == {"rms_norm_eps": 0.5}
    evaluated, _ = load_model_and_tokenizer(str(ckpt / "policy"), "cpu", "float32")
    merged = AutoModelForCausalLM.from_pretrained(ckpt / "merged")
    assert evaluated.config.rms_norm_eps == merged.config.rms_norm_eps == 0.5
    ids = torch.arange(5, 60)[None]
    with torch.no_grad():
        torch.testing.assert_close(evaluated(ids).logits, r.model(ids).logits, atol=1e-4, rtol=1e-4)


def test_a_resume_on_a_base_changed_in_place_is_refused(tmp_path, tiny_model_dir):
    """(A review's find) the base of a LoRA run, trained further or replaced under the same name, was read again at
    the resume and the adapters went on over weights they never trained with: "resumed", no word. The checkpoint
    records the base's weight files (models.weights_identity); a resume over others is refused."""
    import shutil

    import pytest
    from transformers import AutoModelForCausalLM

    from execrl.models import weights_identity

    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    assert weights_identity(str(base)) == weights_identity(str(tiny_model_dir)) is not None  # (a copy is the same)
    assert weights_identity("builtin:tiny-coder") is None
    own = [*LORA, f"policy.model_name={base}", "warmup.sft_steps=0", "checkpointing.save_period=1"]
    run(tmp_path, "c", *own, "grpo.max_num_steps=1")
    changed = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(0.01)
    changed.save_pretrained(base)
    assert weights_identity(str(base)) != weights_identity(str(tiny_model_dir))
    with pytest.raises(ValueError, match="weight files differ from those this run trained on .* the LoRA adapters.*new "
                                         "run: logger.log_dir=.*c-2 checkpointing.checkpoint_dir="):
        run(tmp_path, "c", *own, "grpo.max_num_steps=2")
    # execrl eval (and an opponent) reading the adapter: refused too, where the merged export is the fix
    from execrl.models import ModelNotFound

    adapter = sorted((tmp_path / "c" / "ckpt").glob("step_*"))[-1] / "policy"
    with pytest.raises(ModelNotFound, match="whose weight files differ from those it trained on"):
        load_model_and_tokenizer(str(adapter), "cpu", "float32")
