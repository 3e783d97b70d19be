"""Memory: micro-batches by tokens (policy.dynamic_batching), an out-of-memory error that names its phase and the
settings that shrink it with the last checkpoint intact, and policy.cpu_offload's refusals (its numerics: GPU tier)."""

import json
import re

import pytest
import torch

from execrl.cli import main
from execrl.config import load_config
from execrl.config.batch import Split
from execrl.config.checks import validate
from execrl.config.errors import ConfigError

from .test_train import SMALL, metrics, run


def test_a_token_budget_packs_short_rows_together_and_a_long_one_alone():
    lengths = [10, 300, 20, 30, 40, 12, 64]
    parts = Split(4, tokens=128, round_to=16).parts(lengths, range(len(lengths)))
    assert sorted(i for p in parts for i in p) == list(range(len(lengths)))  # every row once
    for p in parts:  # within the budget (lengths rounded up to 16), unless one row alone is over it
        width = max(-(-lengths[i] // 16) * 16 for i in p)
        assert len(p) * width <= 128 or len(p) == 1
    assert parts == [[0, 5, 2, 3], [4, 6], [1]]  # 10, 12, 20, 30: 4 x 32; 40, 64: 2 x 64; 300 alone
    assert Split(3).parts(lengths, range(7)) == [[0, 5, 2], [3, 4, 6], [1]]  # by count: 3 at a time, by length


def test_dynamic_batching_gives_the_gradient_of_fixed_micro_batches(tmp_path, monkeypatch):
    seen = []
    real = Split.parts
    monkeypatch.setattr(Split, "parts", lambda self, lengths, rows: seen.append(self) or real(self, lengths, rows))
    rows = "policy.shared_prompts=false"  # (micro-batches of rows; with groups packed: test_shared_prompt.py)
    _, fixed = run(tmp_path, "fixed", "grpo.max_num_steps=2", "checkpointing.enabled=false", rows)
    seen.clear()
    _, dyn = run(tmp_path, "dyn", "grpo.max_num_steps=2", "checkpointing.enabled=false", rows,
                 "policy.dynamic_batching.enabled=true", "policy.dynamic_batching.train_mb_tokens=256",
                 "policy.dynamic_batching.sequence_length_round=16")
    assert any(s.tokens == 256 for s in seen)
    a, b = [m for m in metrics(fixed) if "train/loss" in m], [m for m in metrics(dyn) if "train/loss" in m]
    for x, y in zip(a, b):  # the same samples and the same normalizers: the same step, up to summation order
        for key in ("train/loss", "train/grad_norm", "train/reward_mean"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), key


def test_nemo_rl_sequence_packing_becomes_micro_batches_within_its_token_budget(tmp_path):
    cfg = load_config(None, ["policy.sequence_packing.enabled=true", "policy.sequence_packing.train_mb_tokens=2048",
                             "policy.dtensor_cfg.cpu_offload=false"])
    assert cfg.policy.dynamic_batching.enabled and cfg.policy.dynamic_batching.train_mb_tokens == 2048
    plan = validate(cfg)
    assert plan.train_split.tokens == 2048 and "by tokens, at most 2048" in plan.describe(cfg)


def test_a_command_line_token_budget_wins_over_sequence_packing_in_a_nemo_file(tmp_path):
    nemo = tmp_path / "nemo.yaml"  # a NeMo RL config: sequence packing on at 2048 tokens (grpo_math_1B.yaml's)
    nemo.write_text("policy:\n  dtensor_cfg:\n    cpu_offload: false\n  sequence_packing:\n    enabled: true\n"
                    "    train_mb_tokens: 2048\n    logprob_mb_tokens: 2048\n")
    cfg = load_config(str(nemo), ["policy.dynamic_batching.train_mb_tokens=8192"])
    assert cfg.policy.dynamic_batching.enabled
    assert (cfg.policy.dynamic_batching.train_mb_tokens, cfg.policy.dynamic_batching.logprob_mb_tokens) == (8192, 2048)
    cfg = load_config(str(nemo), [])  # without it, the file's budgets
    assert (cfg.policy.dynamic_batching.train_mb_tokens, cfg.policy.dynamic_batching.logprob_mb_tokens) == (2048, 2048)


def test_an_out_of_memory_names_its_phase_and_fixes_and_the_checkpoint_resumes(tmp_path, monkeypatch, capsys):
    from execrl.trainer.precision import Weights

    real, calls = Weights.step, []

    def runs_out_in_step_3(self, optimizer):  # 2 optimizer steps per GRPO step: the 5th is step 3's first
        calls.append(1)
        if len(calls) == 5:
            torch.empty(1 << 55, dtype=torch.uint8)  # the allocator refuses (32 PiB)
        real(self, optimizer)

    monkeypatch.setattr(Weights, "step", runs_out_in_step_3)
    d = tmp_path / "oom"
    args = ["train", *SMALL, "warmup.sft_steps=0", "grpo.max_num_steps=4", f"logger.log_dir={d}",
            f"checkpointing.checkpoint_dir={d}/ckpt"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "out of memory in the optimizer step" in err and "Traceback" not in err
    for fix in ("policy.cpu_offload=true", "policy.lora.enabled=true", "step_000002, is intact"):
        assert fix in " ".join(err.split()), fix
    assert sorted(p.name for p in (d / "ckpt").glob("*step_*")) == ["step_000002"]  # no half-written step 3
    monkeypatch.setattr(Weights, "step", real)
    assert main(args) == 0  # the same command resumes from it
    assert [m["step"] for m in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
            if "train/loss" in m][-2:] == [3, 4]


def test_the_note_after_an_out_of_memory_waits_on_no_other_rank(tmp_path, monkeypatch):
    """(A hunt's find) one rank out of memory (longer samples than the others') wrote its note with a collective, while
    the other ranks waited in the step's: the job hung, silent, until killed. The note reads the directory itself."""
    from types import SimpleNamespace

    from execrl.trainer import distributed as dist
    from execrl.trainer.loop import resume_note

    (tmp_path / "ck" / "step_000002").mkdir(parents=True)
    (tmp_path / "ck" / "step_000002" / "trainer_state.pt").write_bytes(b"")
    monkeypatch.setattr(dist, "from_main", lambda *a: pytest.fail("a collective"))
    cfg = load_config(None, [f"checkpointing.checkpoint_dir={tmp_path / 'ck'}"])
    assert "step_000002, is intact" in resume_note(SimpleNamespace(cfg=cfg))


def test_an_out_of_memory_in_training_names_the_micro_batch():
    from execrl.trainer.memory import OutOfMemory, phase

    cfg = load_config(None, ["policy.train_micro_batch_size=8"])
    with pytest.raises(OutOfMemory) as e, phase("training", cfg):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    text = str(e.value)
    assert "policy.train_micro_batch_size=4 (now 8)" in text and "policy.activation_checkpointing=true" in text
    with pytest.raises(ValueError, match="not memory"), phase("training", cfg):  # other errors pass unchanged
        raise ValueError("not memory")


def test_out_of_memory_advice_at_long_lengths_leaves_out_what_would_change_nothing():
    """(A long-context hunt's find) at 16K tokens with micro-batches of one sequence, the advice was
    "policy.train_micro_batch_size=1 (now 1)", a token budget halved below one sequence (which then goes alone, as
    before), and with token budgets a bare "policy.max_total_sequence_length"."""
    from execrl.trainer.memory import ADVICE

    long = ["policy.max_total_sequence_length=16384", "policy.generation.max_new_tokens=15000"]
    one = load_config(None, [*long, "policy.train_micro_batch_size=1", "policy.logprob_batch_size=1",
                             "policy.activation_checkpointing=true"])
    for name in ("training", "scoring", "generation", "the warm-up", "the reward model", "loading the model"):
        assert not any("=1 (now 1)" in a for a in ADVICE[name](one)), name
    shorter = "policy.max_total_sequence_length=8192 (now 16384) (or a smaller policy.generation.max_new_tokens)"
    assert ADVICE["training"](one)[-1] == shorter
    assert ADVICE["scoring"](one) == [shorter]  # (token budgets would score one sequence a pass, as it does now)
    budget = load_config(None, [*long, "policy.dynamic_batching.enabled=true",
                                "policy.dynamic_batching.train_mb_tokens=2048",
                                "policy.dynamic_batching.logprob_mb_tokens=16384"])
    for name in ("training", "scoring"):
        advice = ADVICE[name](budget)
        assert not any("mb_tokens" in a for a in advice), advice  # (at or under one sequence: halving does nothing)
        assert "policy.max_total_sequence_length=8192 (now 16384) (or a smaller policy.generation.max_new_tokens)" \
            in advice, advice
    roomy = load_config(None, [*long, "policy.dynamic_batching.enabled=true",
                               "policy.dynamic_batching.train_mb_tokens=65536"])
    assert ADVICE["training"](roomy)[0] == "policy.dynamic_batching.train_mb_tokens=32768 (now 65536)"
    odd = load_config(None, ["policy.dynamic_batching.enabled=true", "policy.max_total_sequence_length=1000",
                             "policy.dynamic_batching.train_mb_tokens=1500"])
    assert ADVICE["training"](odd)[0] == "policy.dynamic_batching.train_mb_tokens=1024 (now 1500)"  # (not under one
    # sequence, 1,000 tokens rounded up to 64)


@pytest.mark.parametrize("overrides, message", [
    (["policy.lora.enabled=true"], "only the adapters train"),
    (["policy.precision=float32"], "nothing to move"),
    (["policy.optimizer.name=torch.optim.Adam"], "the host runs torch.optim.AdamW"),
])
def test_cpu_offload_is_refused_where_it_cannot_apply(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, ["policy.cpu_offload=true", *overrides]))


def test_a_checkpointing_scope_without_checkpointing_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="checkpointing is off: set policy.activation_checkpointing=true"):
        validate(load_config(None, ["policy.activation_checkpointing_scope=mlp"]))
    validate(load_config(None, ["policy.activation_checkpointing_scope=mlp", "policy.activation_checkpointing=true"]))


def test_cpu_offload_on_a_machine_without_a_gpu_says_so(tmp_path):
    with pytest.raises(ValueError, match="set policy.cpu_offload=false"):
        run(tmp_path, "off", "policy.cpu_offload=true", "policy.device=auto", "grpo.max_num_steps=1")


def test_the_optimizer_is_named_by_import_path(tmp_path):
    with pytest.raises(ConfigError, match="not an optimizer class"):
        validate(load_config(None, ["policy.optimizer.name=torch.nn.Linear"]))
    with pytest.raises(ConfigError, match="cannot import"):
        validate(load_config(None, ["policy.optimizer.name=no_such_package.Adam"]))
    trained, _ = run(tmp_path, "adam", "policy.optimizer.name=torch.optim.Adam", "grpo.max_num_steps=1",
                     "warmup.sft_steps=0", "checkpointing.enabled=false")
    assert type(trained.optimizer) is torch.optim.Adam


@pytest.mark.gpu
def test_cpu_offload_trains_as_the_master_on_the_gpu(tmp_path):
    """The same GRPO step with the fp32 master and AdamW on the host (pinned, pipelined) as on the GPU: the same
    weights after it, to the last bits the two AdamW kernels may round differently."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    gpu = ["policy.device=cuda", "policy.precision=bfloat16", "grpo.max_num_steps=1", "checkpointing.enabled=false",
           "warmup.sft_steps=0",  # (20 warm-up steps at lr 2e-3 would grow the kernels' last-bit differences)
           "policy.torch_compile=false", "policy.generation.compile=false"]
    on_gpu, d1 = run(tmp_path, "gpu", *gpu)
    offloaded, d2 = run(tmp_path, "host", *gpu, "policy.cpu_offload=true")
    assert not next(offloaded.model.parameters()).is_cuda and next(offloaded.model.parameters()).is_pinned()
    assert next(offloaded.weights.compute.parameters()).is_cuda
    a, b = on_gpu.model.state_dict(), offloaded.model.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k].cpu(), rtol=1e-5, atol=1e-6)
    compute = dict(offloaded.weights.compute.named_parameters())
    for name, p in offloaded.model.named_parameters():  # the compute copy holds the new weights
        assert torch.equal(compute[name].float().cpu(), p.to(torch.bfloat16).float()), name
    (x,), (y,) = [m for m in metrics(d1) if "train/loss" in m], [m for m in metrics(d2) if "train/loss" in m]
    assert y["train/loss"] == pytest.approx(x["train/loss"], rel=1e-5)


@pytest.mark.gpu
def test_a_cuda_out_of_memory_in_training_is_one_message(tmp_path, capsys):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.set_per_process_memory_fraction(2e-6)  # ~300 KB: a real CUDA OOM, in loading or generation
    try:
        code = main(["train", *SMALL, "policy.device=cuda", "policy.precision=bfloat16", "warmup.sft_steps=0",
                     "grpo.max_num_steps=1", "policy.torch_compile=false",
                     "policy.generation.compile=false", f"logger.log_dir={tmp_path}/r",
                     f"checkpointing.checkpoint_dir={tmp_path}/r/ckpt"])
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "out of memory in" in err and "GiB allocated by torch" in err, err
    assert "To need less: policy." in err and "Traceback" not in err


def qwen7b_dir(tmp_path):
    """A directory holding only Qwen2.5-Coder-7B's config.json: the plan reads shapes, no weights."""
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False).save_pretrained(tmp_path / "7b")
    return tmp_path / "7b"


def qwen1_5b_dir(tmp_path):
    """A directory holding only Qwen2.5-1.5B's config.json."""
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True).save_pretrained(tmp_path / "1.5b")
    return tmp_path / "1.5b"


def test_the_memory_plan_of_a_7b_full_fine_tune_names_what_fits_an_80_gb_gpu(tmp_path):
    from execrl.trainer.memory_plan import GiB, advice, plan, shape_of

    step = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.generation_batch_size=128",
            "policy.train_micro_batch_size=8", "policy.max_total_sequence_length=2192", "policy.precision=bfloat16",
            "policy.generation.max_new_tokens=2048",
            f"policy.model_name={qwen7b_dir(tmp_path)}", "policy.device=cuda"]
    cfg = load_config(None, step)
    shape = shape_of(cfg)
    assert 7.5e9 < shape.params < 7.7e9 and shape.layers == 28 and shape.kv_heads == 4
    full = plan(cfg, shape)
    assert full.parts["weights"] / GiB == pytest.approx(14.2, abs=0.1)  # 7.6B x 2 bytes
    assert full.parts["master and AdamW"] / GiB == pytest.approx(85.1, abs=0.2)  # 12 bytes per parameter
    assert full.parts["KV cache"] / GiB == pytest.approx(15.0, abs=0.1)  # 128 x 2192 x 28 x 2 x 4 x 128 x 2 bytes
    fixes = advice(cfg, shape, 80e9)
    assert full.peak > 80e9 and any("policy.cpu_offload=true" in f for f in fixes), fixes
    offloaded = plan(load_config(None, [*step, "policy.cpu_offload=true", "policy.activation_checkpointing=true"]), shape)
    assert offloaded.peak / GiB == pytest.approx(69.3, rel=0.15)  # measured on an H200 (bench/README.md)
    assert offloaded.host / GiB == pytest.approx(95.3, rel=0.15)
    assert any("torchao.optim.AdamW8bit" in f and "bf16_stochastic_round=true" in f for f in fixes), fixes
    rounded = plan(load_config(None, [*step, "policy.activation_checkpointing=true", "policy.optimizer.name=torchao.optim.AdamW8bit",
                                      "policy.optimizer.kwargs.bf16_stochastic_round=true"]), shape)
    assert rounded.parts["master and AdamW"] / GiB == pytest.approx(14.2, abs=0.1)  # 2 bytes of 8-bit moments, no master
    assert rounded.parts["gradients"] / GiB == pytest.approx(14.2, abs=0.1)  # bf16
    assert rounded.peak / GiB == pytest.approx(67.5, rel=0.15) and rounded.host == 0  # measured on an H100


def test_a_groups_prompt_forwarded_once_is_planned_once(tmp_path):
    """The issue-45 1.5B step (16 x 8, 128 + 256 tokens in rows of 400, micro-batch 128; measured on an H200: peak
    97.3 GiB) was planned at 158 GiB, every row's prompt counted ("does not fit this GPU: policy.activation_
    checkpointing=true"), where training forwards each group's prompt once (policy.shared_prompts): a group's rows
    are its prompt once and each completion at max_new_tokens."""
    from execrl.trainer.memory_plan import GiB, micro_tokens, plan, shape_of, summary

    step = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.generation_batch_size=128",
            "policy.train_global_batch_size=128", "policy.train_micro_batch_size=128", "policy.precision=bfloat16",
            "policy.max_total_sequence_length=400", "policy.generation.max_new_tokens=256",
            f"policy.model_name={qwen1_5b_dir(tmp_path)}", "policy.device=cuda"]
    cfg = load_config(None, step)
    shape = shape_of(cfg)
    assert shape.shares_prompts and micro_tokens(cfg, shape) == 16 * (400 - 256) + 128 * 256
    assert plan(cfg, shape).peak / GiB == pytest.approx(97.3, rel=0.25)
    assert len(summary(cfg, shape, 139.8 * GiB)) == 1  # (fits: no settings to change)
    for other in ("policy.shared_prompts=false", "grpo.max_rollout_turns=2 env.multi_turn.kind=interpreter",
                  "policy.train_micro_batch_size=12"):  # (12: groups of 8 split unevenly, a row per sample)
        c = load_config(None, [*step, *other.split()])
        assert micro_tokens(c, shape) == c.policy.train_micro_batch_size * 400, other


def test_a_token_budget_under_one_sequence_is_planned_at_the_sequence_it_lets_through(tmp_path):
    """(A long-context hunt's find) with policy.dynamic_batching.train_mb_tokens under one sequence, a longer one goes
    alone, and the memory plan counted the budget: 16K-token samples with a 1,024-token budget were planned at a
    sixteenth of their activations, and the engine's KV slots sized into memory training then needed."""
    from execrl.config.batch import plan as batch_plan
    from execrl.trainer.memory_plan import micro_tokens, plan, shape_of

    long = ["policy.max_total_sequence_length=16384", "policy.generation.max_new_tokens=15000",
            "policy.dynamic_batching.enabled=true", "policy.dynamic_batching.sequence_length_round=64",
            f"policy.model_name={qwen1_5b_dir(tmp_path)}", "policy.device=cuda"]
    small, whole = (load_config(None, [*long, f"policy.dynamic_batching.train_mb_tokens={t}"]) for t in (1024, 16384))
    shape = shape_of(small)
    assert micro_tokens(small, shape) == micro_tokens(whole, shape) == 16384
    assert plan(small, shape).parts["activations"] == plan(whole, shape).parts["activations"]
    notes = batch_plan(small).notes
    assert any("train_mb_tokens 1024 is less than one sequence" in n and "goes alone" in n for n in notes), notes
    assert not any("train_mb_tokens" in n for n in batch_plan(whole).notes)
    scored = batch_plan(load_config(None, [*long, "policy.dynamic_batching.logprob_mb_tokens=1024"])).notes
    assert any("logprob_mb_tokens 1024 is less" in n and "16384 tokens" in n and "memory plan" not in n
               for n in scored), scored  # (the plan counts training's passes only)
    odd = load_config(None, [*long, "policy.max_total_sequence_length=16010", "policy.generation.max_new_tokens=8000",
                             "policy.dynamic_batching.train_mb_tokens=16010"])
    assert micro_tokens(odd, shape) == 16064  # (one sequence, rounded up to 64 as micro-batches round it)
    assert not any("train_mb_tokens" in n for n in batch_plan(odd).notes)  # (a budget of one sequence: no note)


@pytest.mark.parametrize("size, micro, new, slots, measured", [
    ("0.5b", 128, 256, 128, 44.3), ("1.5b", 128, 256, 128, 97.3), ("1.5b", 64, 256, 128, 66.6),
    ("1.5b", 4, 4096, 128, 76.4), ("1.5b", 8, 4096, 110, 107.6)])
def test_the_plan_of_compiled_layers_is_above_each_measured_peak_and_near_it(tmp_path, size, micro, new, slots,
                                                                           measured):
    """The GRPO steps of bench/grpo_step.py (16 x 8, bf16, no activation checkpointing, compiled layers) against their
    peaks measured on an H200 (bench/README.md). The eager count of activations put the 1.5B 4K step at 84 GiB, so an
    80 GB H100 got 17 KV slots of 128 and decoded the step in eight waves (generate 88 s, 5,951 tokens/s); the
    compiled layers keep ~0.8 of it."""
    from transformers import Qwen2Config

    from execrl.trainer.memory_plan import GiB, plan, shape_of

    if size == "0.5b":
        Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                    num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True).save_pretrained(tmp_path / size)
        model = tmp_path / size
    else:
        model = qwen1_5b_dir(tmp_path)
    step = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", f"policy.generation_batch_size={slots}",
            "policy.train_global_batch_size=128", f"policy.train_micro_batch_size={micro}", "policy.precision=bfloat16",
            f"policy.max_total_sequence_length={max(400, 144 + new)}", f"policy.generation.max_new_tokens={new}",
            "policy.activation_checkpointing=false", f"policy.model_name={model}", "policy.device=cuda"]
    cfg = load_config(None, step)
    assert measured <= plan(cfg, shape_of(cfg)).peak / GiB <= 1.12 * measured
    eager = load_config(None, [*step, "policy.torch_compile=false"])  # (fitted to eager runs: the 7B test above)
    assert plan(eager, shape_of(eager)).peak > plan(cfg, shape_of(cfg)).peak


def test_the_4k_step_on_an_80_gb_gpu_decodes_in_two_waves_not_eight(tmp_path):
    from execrl.trainer.memory_plan import GiB, bounded_slots, shape_of

    step = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.generation_batch_size=128",
            "policy.train_global_batch_size=128", "policy.train_micro_batch_size=4", "policy.precision=bfloat16",
            "policy.max_total_sequence_length=4240", "policy.generation.max_new_tokens=4096",
            "policy.activation_checkpointing=false", f"policy.model_name={qwen1_5b_dir(tmp_path)}", "policy.device=cuda"]
    cfg = load_config(None, step)
    slots, note = bounded_slots(cfg, shape_of(cfg), 79.6 * GiB)  # (an H100 80GB HBM3's memory)
    assert 64 <= slots < 128 and f"KV cache: {slots} sequences" in note
    eager = load_config(None, [*step, "policy.torch_compile=false"])
    assert bounded_slots(eager, shape_of(eager), 79.6 * GiB)[0] < 32


def test_dry_run_prints_the_memory_plan(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "execrl.cli", "train", "--dry-run", "policy.device=auto",
                           f"policy.model_name={qwen7b_dir(tmp_path)}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "# memory (an estimate, before anything loads)" in done.stdout
    assert "memory plan, per GPU (GiB): weights 14.2" in done.stdout


def test_checkpointing_that_memory_does_not_need_is_named_with_the_micro_batch_that_fits(tmp_path):
    """The issue-45 4K step (1.5B, 16 x 8, 128 + 4096 tokens, micro-batch 8, checkpointing) on a 140 GiB GPU: without
    checkpointing micro-batch 8 does not fit, 4 does (measured there: peak 75.8 GiB, training 18% faster; at 2, 11%); the
    plan of compiled layers, ~0.8 of the eager count."""
    from transformers import Qwen2Config

    from execrl.trainer.memory_plan import GiB, plan, shape_of, summary

    Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True).save_pretrained(tmp_path / "m")
    step = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.generation_batch_size=128",
            "policy.train_global_batch_size=128", "policy.max_total_sequence_length=4224", "policy.precision=bfloat16",
            "policy.generation.max_new_tokens=4096", f"policy.model_name={tmp_path / 'm'}", "policy.device=cuda"]
    cfg = load_config(None, [*step, "policy.train_micro_batch_size=8", "policy.activation_checkpointing=true"])
    lines = summary(cfg, shape_of(cfg), 139.8 * GiB)
    assert len(lines) == 2 and "policy.activation_checkpointing=false policy.train_micro_batch_size=4 (~78 GiB)" \
        in lines[1], lines
    assert "policy.train_micro_batch_size=2 (~60 GiB)" in summary(cfg, shape_of(cfg), 80 * GiB)[1]
    assert len(summary(cfg, shape_of(cfg), 60 * GiB)) == 1  # no room without it: no hint
    off = load_config(None, [*step, "policy.train_micro_batch_size=4", "policy.activation_checkpointing=false"])
    assert len(summary(off, shape_of(off), 139.8 * GiB)) == 1
    packed = load_config(None, [*step, "policy.activation_checkpointing=true", "policy.dynamic_batching.enabled=true",
                                "policy.dynamic_batching.train_mb_tokens=16896"])
    hint = summary(packed, shape_of(packed), 139.8 * GiB)[1]  # by tokens: the budget stays, no micro-batch named
    assert "policy.activation_checkpointing=false (~" in hint and "train_micro_batch_size" not in hint
    # where training without checkpointing does not fit, checkpointing only the MLPs is named if it does
    budget = [*step, "policy.dynamic_batching.enabled=true", "policy.dynamic_batching.train_mb_tokens=33792"]
    cfgs = {scope: load_config(None, [*budget, "policy.activation_checkpointing=true",
                                      f"policy.activation_checkpointing_scope={scope}"]) for scope in ("layer", "mlp")}
    cfgs[None] = load_config(None, budget)
    plans = {scope: plan(c, shape_of(c)) for scope, c in cfgs.items()}
    assert plans["layer"].parts["activations"] < plans["mlp"].parts["activations"] < plans[None].parts["activations"]
    lines = summary(cfgs["layer"], shape_of(cfgs["layer"]), 90 * GiB)
    assert len(lines) == 2 and f"policy.activation_checkpointing_scope=mlp (~{plans['mlp'].peak / GiB:.0f} GiB)" in \
        lines[1], lines
    assert len(summary(cfgs["mlp"], shape_of(cfgs["mlp"]), 90 * GiB)) == 1  # (already so)


def test_a_model_and_tokenizer_under_the_home_directory_are_planned_and_loaded(tmp_path, tiny_model_dir, monkeypatch):
    """policy.model_name: ~/models/m (a home-directory checkout): the memory plan read no shapes from it (no plan, and
    the engine's slots went unbounded by the KV cache) while loading expanded the ~."""
    import shutil

    from execrl.models import load_model_and_tokenizer
    from execrl.trainer.memory_plan import shape_of

    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "m")
    shutil.copytree(tiny_model_dir, tmp_path / "tok")
    cfg = load_config(None, ["policy.model_name=~/models/m"])
    assert shape_of(cfg) is not None and shape_of(cfg).layers == 2
    model, tok = load_model_and_tokenizer("~/models/m", "cpu", tokenizer="~/tok")
    assert model.config.num_hidden_layers == 2 and tok("def f").input_ids


def test_long_completions_get_fewer_engine_slots_where_the_kv_cache_would_not_fit(tmp_path):
    from execrl.trainer.memory_plan import GiB, bounded_slots, plan, shape_of, summary

    long = ["grpo.num_prompts_per_step=16", "grpo.num_generations_per_prompt=8", "policy.generation_batch_size=128",
            "policy.train_micro_batch_size=1", "policy.max_total_sequence_length=16512", "policy.precision=bfloat16",
            f"policy.model_name={qwen7b_dir(tmp_path)}", "policy.device=cuda", "policy.cpu_offload=true",
            "policy.activation_checkpointing=true"]
    cfg = load_config(None, long)
    assert plan(cfg, shape_of(cfg)).parts["KV cache"] / GiB == pytest.approx(112.9, abs=0.2)  # 128 x 16512 tokens
    slots, note = bounded_slots(cfg, shape_of(cfg), 80e9)
    assert 1 <= slots < 128 and f"KV cache: {slots} sequences decoded at once" in note
    fewer = load_config(None, [*long, f"policy.generation_batch_size={slots}"])
    assert plan(fewer, shape_of(fewer)).peak <= 0.9 * 80e9  # what is left fits
    assert bounded_slots(cfg, shape_of(cfg), 200e9) == (128, None)  # a GPU with room: as asked
    lines = summary(cfg, shape_of(cfg), 80e9)  # the plan of what runs: those slots, which fit (it said "does not fit")
    assert len(lines) == 2 and f"KV cache {plan(fewer, shape_of(fewer)).parts['KV cache'] / GiB:.1f}," in lines[0]
    assert lines[1] == note and "does not fit" not in " ".join(lines)


def test_null_generation_batch_size_decodes_a_step_at_once_as_far_as_the_kv_cache_fits(tmp_path):
    """policy.generation_batch_size: null (what a NeMo RL config with vLLM reads as): every sample of a GPU's share of
    the step in the engine at once, bounded by the KV cache that fits, as vLLM bounds them; the out-of-memory advice
    names the slots the run has."""
    from execrl.trainer.memory import ADVICE
    from execrl.trainer.memory_plan import bounded_slots, engine_slots, shape_of, slots_of

    step = ["grpo.num_prompts_per_step=32", "grpo.num_generations_per_prompt=16", "policy.generation_batch_size=null",
            "policy.train_micro_batch_size=1", "policy.max_total_sequence_length=16512", "policy.precision=bfloat16",
            f"policy.model_name={qwen7b_dir(tmp_path)}", "policy.device=cuda", "policy.cpu_offload=true",
            "policy.activation_checkpointing=true"]
    cfg = load_config(None, step)
    assert cfg.policy.generation_batch_size is None and engine_slots(cfg) == 512
    assert engine_slots(load_config(None, [*step, "cluster.gpus_per_node=8"])) == 64
    assert slots_of(None, 512, 1) == 512 and slots_of(128, 512, 1) == 128 and slots_of(128, 64, 1) == 64
    slots, note = bounded_slots(cfg, shape_of(cfg), 80e9)
    fixed, _ = bounded_slots(load_config(None, [*step, "policy.generation_batch_size=128"]), shape_of(cfg), 80e9)
    assert 1 <= slots == fixed < 128 and f"KV cache: {slots} sequences decoded at once" in note  # per slot: the same
    assert "policy.generation_batch_size=256 (now 512)" in ADVICE["generation"](cfg)[0]


def test_a_step_decoded_a_few_samples_at_a_time_is_named_where_all_of_them_fit(tmp_path):
    """policy.generation_batch_size below a step's samples (execrl's default 64 against NeMo RL's 32 x 16) on a GPU
    whose memory holds the KV cache of all of them: the plan says so (5.7x faster rollouts at 512 slots than at 32,
    1.5B on an H200); not where they do not fit, nor where all are decoded at once already."""
    from execrl.trainer.memory_plan import GiB, more_slots, shape_of, summary

    step = ["grpo.num_prompts_per_step=32", "grpo.num_generations_per_prompt=16", "policy.train_global_batch_size=512",
            "policy.train_micro_batch_size=4", "policy.max_total_sequence_length=1024", "policy.precision=bfloat16",
            f"policy.model_name={qwen1_5b_dir(tmp_path)}", "policy.device=cuda"]
    cfg = load_config(None, [*step, "policy.generation_batch_size=64"])  # (the schema's default)
    hint = more_slots(cfg, shape_of(cfg), 139.8 * GiB)
    assert hint == ("policy.generation_batch_size=64 decodes this GPU's 512 samples of a step 64 at a time, and the "
                    "KV cache of 512 fits: policy.generation_batch_size=null decodes them together (as many as fit), "
                    "for faster rollouts")
    assert hint in summary(cfg, shape_of(cfg), 139.8 * GiB)
    for given in ("null", "512", "1000"):
        assert more_slots(load_config(None, [*step, f"policy.generation_batch_size={given}"]), shape_of(cfg),
                          139.8 * GiB) is None
    long = load_config(None, [*step, "policy.generation_batch_size=64", "policy.max_total_sequence_length=16384",
                              "policy.train_micro_batch_size=1", "policy.activation_checkpointing=true"])  # 0.44 GiB of KV cache per slot
    fit = int(re.search(r"the KV cache of (\d+) fits", more_slots(long, shape_of(long), 139.8 * GiB)).group(1))
    assert 128 <= fit < 512  # some of them: as many as fit
    assert more_slots(long, shape_of(long), 80 * GiB) is None  # no room for twice 64
    assert more_slots(load_config(None, [*step, "policy.generation_batch_size=64", "policy.max_total_sequence_length=16384",
                                         "policy.generation.max_new_tokens=16000"]), shape_of(cfg), 139.8 * GiB) is None


def test_small_training_micro_batches_are_named_where_larger_ones_fit(tmp_path):
    """NeMo RL's grpo_math_1B.yaml trains 1.5B in micro-batches of 2,048 tokens (4 x 512, or its packing budget);
    at 8,192 its train phase ran 1.7x faster on an H200 (the same gradient). The plan names the setting in the
    config's own terms where it fits; not where the micro-batches are large already, nor where it does not fit."""
    from execrl.trainer.memory_plan import GiB, larger_micro_batches, plan, shape_of, summary

    step = ["grpo.num_prompts_per_step=32", "grpo.num_generations_per_prompt=16", "policy.train_global_batch_size=512",
            "policy.generation_batch_size=null", "policy.max_total_sequence_length=512", "policy.precision=bfloat16",
            f"policy.model_name={qwen1_5b_dir(tmp_path)}", "policy.device=cuda", "loss_fn.reference_policy_kl_penalty=0.01",
            "policy.generation.max_new_tokens=512"]  # (NeMo RL's: ${policy.max_total_sequence_length})
    h200 = 139.8 * GiB
    cfg = load_config(None, [*step, "policy.train_micro_batch_size=4", "policy.logprob_batch_size=4"])
    hint = larger_micro_batches(cfg, shape_of(cfg), h200)
    assert hint.startswith("training micro-batches of 4 sequences (up to 2048 tokens) are small for this GPU: "
                           "policy.train_micro_batch_size=16 policy.logprob_batch_size=16 (~")
    assert hint in summary(cfg, shape_of(cfg), h200)
    larger = load_config(None, [*step, "policy.train_micro_batch_size=16", "policy.logprob_batch_size=16"])
    assert larger_micro_batches(larger, shape_of(cfg), h200) is None  # 8,192 tokens already
    assert f"~{plan(larger, shape_of(cfg)).peak / GiB:.0f} GiB" in hint  # the peak it would have
    packed = load_config(None, [*step, "policy.dynamic_batching.enabled=true", "policy.dynamic_batching.train_mb_tokens=2048",
                                "policy.dynamic_batching.logprob_mb_tokens=16384"])
    assert "2048 padded tokens are small for this GPU: policy.dynamic_batching.train_mb_tokens=8192 (~" in \
        larger_micro_batches(packed, shape_of(cfg), h200)  # (scoring's budget is large already)
    assert plan(cfg, shape_of(cfg)).peak < 0.8 * 64 * GiB < plan(larger, shape_of(cfg)).peak
    assert larger_micro_batches(cfg, shape_of(cfg), 64 * GiB) is None  # it fits, the larger one would not
    few = load_config(None, [*step, "grpo.num_prompts_per_step=1", "policy.train_global_batch_size=16",
                             "policy.train_micro_batch_size=16"])
    assert larger_micro_batches(few, shape_of(cfg), h200) is None  # a step's 16 samples train in one pass already


def test_nemo_rl_recipes_with_offload_on_several_gpus_or_a_fused_adam_validate_and_name_the_difference():
    from execrl.config.checks import nemo_differences
    from execrl.trainer.optim import make_optimizer
    from execrl.trainer.precision import Weights

    cfg = load_config(None, ["policy.dtensor_cfg.cpu_offload=true", "cluster.gpus_per_node=8",
                             "policy.optimizer.name=transformer_engine.pytorch.optimizers.fused_adam.FusedAdam",
                             "policy.optimizer.kwargs.exp_avg_dtype=torch.bfloat16",
                             "policy.optimizer.kwargs.master_weights=true"])
    validate(cfg)
    notes = " ".join(nemo_differences(cfg))
    assert "runs as torch.optim.AdamW" in notes and "has no effect with several GPUs" in notes
    model = torch.nn.Linear(2, 2)
    assert type(make_optimizer(Weights(model, model, torch.float32), cfg.policy.optimizer.name,
                               cfg.policy.optimizer.kwargs)) is torch.optim.AdamW


SR = ["policy.optimizer.kwargs.bf16_stochastic_round=true"]


@pytest.mark.parametrize("overrides, message", [
    ([], "takes no bf16_stochastic_round: name an optimizer that rounds"),  # torch's AdamW
    (["policy.optimizer.name=torchao.optim._AdamW", "policy.precision=float32"], "set policy.precision=bfloat16"),
    (["policy.optimizer.name=torchao.optim._AdamW", "policy.precision=bfloat16", "policy.cpu_offload=true"],
     "with stochastic rounding there is none"),
    (["policy.optimizer.name=torchao.optim._AdamW", "policy.precision=bfloat16", "policy.lora.enabled=true"],
     "only the adapters train"),
    (["policy.optimizer.name=torchao.optim._AdamW", "policy.precision=bfloat16", "cluster.gpus_per_node=2"],
     "several GPUs"),
])
def test_stochastic_rounding_is_refused_where_it_cannot_apply(overrides, message):
    pytest.importorskip("torchao")
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, [*SR, *overrides]))


def test_torchaos_optimizers_are_refused_with_several_processes():
    """(A hunt's find) torchao.optim.AdamW8bit on 2 ranks trained and saved, but its states were saved as unwaited
    collective tensors and no checkpoint of it resumed, on 2 ranks or on 1."""
    pytest.importorskip("torchao")
    for more in ([], ["policy.lora.enabled=true"]):
        with pytest.raises(ConfigError, match="runs on one GPU: .*cluster.gpus_per_node=1"):
            validate(load_config(None, ["policy.optimizer.name=torchao.optim.AdamW8bit", "cluster.gpus_per_node=2",
                                        *more]))
    validate(load_config(None, ["policy.optimizer.name=torchao.optim.AdamW8bit"]))


def test_stochastic_rounding_on_float32_weights_is_refused_at_start(tmp_path):
    """policy.precision auto is float32 on a CPU: the run names the fix before any work."""
    pytest.importorskip("torchao")
    with pytest.raises(ValueError, match="this run's are float32 .*set policy.precision=bfloat16"):
        run(tmp_path, "sr32", *SR, "policy.optimizer.name=torchao.optim._AdamW", "grpo.max_num_steps=1")


def test_bf16_weights_with_stochastic_rounding_are_their_own_master_and_move_at_small_learning_rates(tmp_path):
    """torchao's bf16_stochastic_round: no fp32 master (the compute model is the master); at a learning rate whose
    updates are mostly under half a bf16 step, many more weights move than with plain bf16 AdamW, which rounds them
    away; the checkpoint resumes."""
    pytest.importorskip("torchao")
    common = ["policy.precision=bfloat16", "grpo.max_num_steps=1", "warmup.sft_steps=3", "warmup.lr=3e-6",
              "policy.optimizer.kwargs.weight_decay=0.0", "policy.generation.compile=false", "policy.torch_compile=false"]
    # (the warm-up's cross-entropy moves the weights: an untrained model's GRPO groups are all flat)
    rounded, _ = run(tmp_path, "sr", *common, *SR, "policy.optimizer.name=torchao.optim._AdamW")
    w = rounded.weights
    assert w.master is w.compute and next(w.master.parameters()).dtype == torch.bfloat16
    from execrl.models import load_model_and_tokenizer

    start, _ = load_model_and_tokenizer(load_config(None).policy.model_name, "cpu", "bfloat16", seed=1)  # at step 0
    before = dict(start.named_parameters())
    moved_sr = sum(int((p != before[n]).sum()) for n, p in rounded.model.named_parameters())
    import execrl.trainer.precision as precision

    precision.PURE_LOW_PRECISION = True  # the same update in plain bf16 AdamW: what stochastic rounding is for
    try:
        plain, _ = run(tmp_path, "plain", *common)
    finally:
        precision.PURE_LOW_PRECISION = False
    moved_plain = sum(int((p != before[n]).sum()) for n, p in plain.model.named_parameters())
    assert moved_sr > 3 * moved_plain, (moved_sr, moved_plain)
    resumed, _ = run(tmp_path, "sr", *common, *SR, "policy.optimizer.name=torchao.optim._AdamW", "grpo.max_num_steps=2")
    assert resumed.resumed_from.endswith("step_000001")


def test_8bit_adamw_moments_train_and_resume(tmp_path):
    """torchao's AdamW8bit over the fp32 master: its quantized moments are saved in the checkpoint and resumed."""
    pytest.importorskip("torchao")
    common = ["policy.optimizer.name=torchao.optim.AdamW8bit", "warmup.sft_steps=0", "checkpointing.save_period=1",
              "policy.generation.compile=false"]
    first, d = run(tmp_path, "8bit", *common, "grpo.max_num_steps=1")
    kinds = {type(first.optimizer.state[p]["exp_avg"]).__name__ for p in first.model.parameters()}
    assert "OptimState8bit" in kinds  # (torchao keeps small tensors' moments, and those not in whole blocks, plain)
    second, _ = run(tmp_path, "8bit", *common, "grpo.max_num_steps=2")
    assert second.resumed_from.endswith("step_000001")
    assert [m["step"] for m in metrics(d) if "train/loss" in m] == [1, 2]
