"""policy.precision bfloat16 means what it means in NeMo RL: bf16 compute, fp32 master weights, fp32 gradient
accumulation and optimizer state; checkpoints hold the fp32 master and name bf16 as the dtype to serve in."""

import json

import pytest
import torch

from execrl.config import load_config
from execrl.trainer import precision
from execrl.trainer.loop import train_step
from execrl.trainer.setup import build_run

from .test_train import SMALL, run


def one_step_changes(tmp_path, monkeypatch, prec: str, lr: float, pure: bool = False) -> tuple[float, torch.dtype]:
    """The share of master weights one GRPO step moves (rewards made non-flat so that every group has a gradient)."""
    monkeypatch.setattr(precision, "PURE_LOW_PRECISION", pure)
    cfg = load_config(None, [*SMALL, "warmup.sft_steps=0", f"policy.precision={prec}", "checkpointing.enabled=false",
                             f"policy.optimizer.kwargs.lr={lr}", f"logger.log_dir={tmp_path / prec}",
                             "policy.train_global_batch_size=16"])
    r = build_run(cfg)
    try:
        before = {k: v.detach().clone() for k, v in r.model.named_parameters()}
        rollouts, _ = r.pipeline.next(0, {}, more=False)
        for i, reward in enumerate(rollouts.rewards):
            reward.total = float(i % 3)
        train_step(r, rollouts)
        moved = sum(int((p.detach() != before[k]).sum()) for k, p in r.model.named_parameters())
        return moved / sum(p.numel() for p in r.model.parameters()), next(r.model.parameters()).dtype
    finally:
        r.close()


def test_small_updates_move_every_weight_in_mixed_precision(tmp_path, monkeypatch):
    mixed, dtype = one_step_changes(tmp_path, monkeypatch, "bfloat16", 1e-6)
    assert dtype == torch.float32 and mixed > 0.99
    pure, dtype = one_step_changes(tmp_path, monkeypatch, "bfloat16", 1e-6, pure=True)  # the old behaviour
    assert dtype == torch.bfloat16 and pure < 0.1, pure  # most updates rounded away


def test_gradients_accumulate_in_fp32():
    master = torch.nn.Linear(1, 1, bias=False)
    compute = torch.nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    w = precision.Weights(master, compute, torch.bfloat16)
    master.weight.grad = torch.ones(1, 1)
    for _ in range(64):  # 64 micro-batches of 1/512: in bf16, 1 + 1/512 rounds back to 1 every time
        compute.weight.grad = torch.full((1, 1), 1 / 512, dtype=torch.bfloat16)
        w.accumulate_grads()
        assert compute.weight.grad is None  # freed after each micro-batch
    assert master.weight.grad.item() == 1.125  # fp32: 1 + 64/512 exactly
    bf16 = torch.ones(1, dtype=torch.bfloat16)
    for _ in range(64):
        bf16 += 1 / 512
    assert bf16.item() == 1.0


def test_checkpoint_holds_fp32_master_and_names_bf16_and_resume_is_bit_identical(tmp_path):
    bf16 = ["policy.precision=bfloat16"]
    straight, d1 = run(tmp_path, "straight", "grpo.max_num_steps=4", *bf16)
    run(tmp_path, "resumed", "grpo.max_num_steps=2", *bf16)
    second, _ = run(tmp_path, "resumed", "grpo.max_num_steps=4", *bf16)
    a, b = straight.model.state_dict(), second.model.state_dict()
    assert all(v.dtype == torch.float32 for v in a.values())
    assert all(torch.equal(a[k], b[k]) for k in a)
    policy = d1 / "ckpt" / "step_000004" / "policy"
    assert json.loads((policy / "config.json").read_text())["dtype"] == "bfloat16"
    from safetensors.torch import load_file

    saved = load_file(next(policy.glob("*.safetensors")))
    assert all(v.dtype == torch.float32 for v in saved.values())


def test_float16_is_refused_with_the_fix(tmp_path):
    cfg = load_config(None, [*SMALL, "policy.precision=float16", f"logger.log_dir={tmp_path}"])
    with pytest.raises(ValueError, match="bfloat16"):
        build_run(cfg)


def _weights(device: str) -> precision.Weights:
    torch.manual_seed(0)
    master = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 8)).to(device)
    return precision.Weights(master, master, torch.float32)


def test_adamw_runs_fused_on_gpu_tensors_only():
    """torch's fused AdamW kernel where the parameters are plain GPU tensors; on a CPU the default implementation."""
    from execrl.trainer.optim import fused_kernel, make_optimizer

    opt = make_optimizer(_weights("cpu"), "torch.optim.AdamW", {"lr": 1e-3, "fused": False, "foreach": False})
    assert not opt.defaults.get("fused")
    params = list(_weights("cpu").master.parameters())
    assert not fused_kernel(torch.optim.AdamW, params)
    if torch.cuda.is_available():
        assert make_optimizer(_weights("cuda"), "torch.optim.AdamW", {"lr": 1e-3}).defaults["fused"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fused_adamw_gives_the_for_loop_update():
    """The fused kernel's parameters after a few steps equal the for-loop AdamW's (what NeMo RL's configs name, with
    foreach and fused false) up to fp32 rounding."""
    from execrl.trainer.optim import make_optimizer

    runs = []
    for kwargs in ({"foreach": False}, {}):
        weights = _weights("cuda")
        opt = make_optimizer(weights, "torch.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.01})
        if kwargs:  # the for-loop implementation, built directly (make_optimizer would pick the fused kernel)
            opt = torch.optim.AdamW(weights.master.parameters(), lr=1e-3, weight_decay=0.01, **kwargs)
        g = torch.Generator(device="cuda").manual_seed(1)
        for _ in range(3):
            for p in weights.master.parameters():
                p.grad = torch.randn(p.shape, generator=g, device="cuda") * 1e-2
            opt.step()
        runs.append([p.detach().clone() for p in weights.master.parameters()])
    for loop, fused in zip(*runs):
        torch.testing.assert_close(fused, loop, rtol=1e-6, atol=1e-7)


def test_the_bf16_compute_copy_keeps_the_rotary_frequencies_fp32(tmp_path):
    """(A hunt's find) the compute copy cast every buffer to bf16: Qwen2.5's rotary frequencies rounded put a position
    8,192 tokens in up to ~10 radians off, a model that from_pretrained(dtype=bf16) (eval, serving) and FSDP's mixed
    precision (several processes) do not run. Parameters are cast; buffers keep their dtype."""
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from execrl.models import load_model_and_tokenizer

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, rope_theta=1e6, max_position_embeddings=8192)
    Qwen2ForCausalLM(cfg).save_pretrained(tmp_path)
    master = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    compute = precision.compute_model(master, torch.bfloat16, sharded=False)
    served = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert {b.dtype for b in compute.buffers()} == {torch.float32}
    assert {p.dtype for p in compute.parameters()} == {torch.bfloat16}
    ids = torch.randint(0, 300, (1, 16))
    positions = torch.arange(8000, 8016)[None]
    with torch.no_grad():
        torch.testing.assert_close(compute(ids, position_ids=positions).logits,
                                   served(ids, position_ids=positions).logits, atol=0, rtol=0)
    tiny, _ = load_model_and_tokenizer("builtin:tiny-coder", "cpu", "bfloat16")
    assert {b.dtype for b in tiny.buffers()} <= {torch.float32} and next(tiny.parameters()).dtype == torch.bfloat16
