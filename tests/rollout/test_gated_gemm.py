"""Decode's gate/up and silu x up as one Triton kernel (rollout/gated_gemm.py) against cuBLAS's GEMM and the silu x
up after it, at the shapes of Qwen2.5-0.5B and 1.5B, and inside the compiled engine (GPU only)."""

import pytest
import torch
import torch.nn.functional as F

from execrl.models import build_tiny_model, build_tokenizer
from execrl.rollout import RolloutEngine, SamplingParams, gated_gemm
from execrl.rollout.fuse import fuse_projections
from execrl.tasks.arith import corpus

pytestmark = pytest.mark.gpu


def unfused(x, weight):
    """cuBLAS's GEMM, then silu x up in fp32 rounded once (as the engine's compiled step computes it)."""
    gate, up = F.linear(x, weight).float().chunk(2, -1)
    return (F.silu(gate) * up).to(x.dtype)


@pytest.mark.parametrize("d, inter", [(896, 4864), (1536, 8960)])
@pytest.mark.parametrize("rows", [1, 7, 16, 17, 40, 64])
def test_the_kernel_equals_the_gemm_and_silu_x_up(d, inter, rows):
    """Up to 16 rows the few-rows kernel; 17-64 TMA's (Hopper)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    g = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(2 * inter, d, device="cuda", dtype=torch.bfloat16, generator=g) / d ** 0.5
    x = torch.randn(rows, 1, d, device="cuda", dtype=torch.bfloat16, generator=g)
    assert gated_gemm.fits(weight)
    hopper = torch.cuda.get_device_capability()[0] == 9
    assert gated_gemm.max_rows(weight) == (gated_gemm.TMA_ROWS if hopper else gated_gemm.ROWS)
    if rows > gated_gemm.max_rows(weight):
        pytest.skip("TMA's kernel runs on Hopper (compute capability 9)")
    got, want = gated_gemm.gated_up(x, weight), unfused(x, weight)
    assert got.shape == want.shape == (rows, 1, inter)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
    # the same roundings; only the GEMM's order of summing differs (on an H200 every element came out equal)
    assert (got == want).float().mean() > 0.999


@pytest.mark.parametrize("slots", [16, 64])
def test_a_small_engine_on_a_gpu_samples_what_it_samples_unfused(slots):
    """A 16-slot engine (the few-rows kernel) and a 64-slot one (TMA's, on Hopper), compiled and in CUDA graphs,
    bf16, greedy: the kernel in every step gives the tokens and logprobs of the GEMM and silu x up."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    tok = build_tokenizer(corpus(), vocab_size=384)
    model = build_tiny_model(tok, hidden=128, layers=2, heads=4, seed=0).eval()  # (its MLP: 256 wide)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger random weights than the init: peaked logits, varied text
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    model = model.cuda().bfloat16()
    fuse_projections(model)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ["Read two integers.", "hi", "def f(x):"]]
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    runs = []
    for few in (True, False):
        torch._dynamo.reset()
        engine = RolloutEngine(model, tok, slots=slots, max_len=128, compile=True)
        hopper = torch.cuda.get_device_capability()[0] == 9
        assert engine.dec.gated_rows == (gated_gemm.TMA_ROWS if hopper else gated_gemm.ROWS)
        if slots > engine.dec.gated_rows:
            pytest.skip("a 64-slot engine takes TMA's kernel on Hopper (compute capability 9)")
        if not few:
            engine.dec.gated_rows = 0
        runs.append(engine.generate(prompts, slots // 4, 32, params))  # (3/4 of the slots busy: steps on all rows)
    for fused, plain in zip(*runs):
        assert [c.ids for c in fused] == [c.ids for c in plain]
        for a, b in zip(fused, plain):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-2, rtol=2e-2)
