"""The one-pass Triton sampling kernel against sampling.sample_torch (GPU only: `pytest -m gpu`)."""

import pytest
import torch

from execrl.rollout import fused_sampling
from execrl.rollout.sampling import SamplingParams, row_uniform, sample, sample_torch, scoring_temperature, token_keys

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cuda():
    if not torch.cuda.is_available() or fused_sampling.triton is None:
        pytest.skip("needs a CUDA device and Triton")


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("rows,vocab", [(256, 151936), (3, 5000), (1, 4096)])
def test_kernel_matches_torch(temperature, rows, vocab):
    g = torch.Generator(device="cuda").manual_seed(rows + vocab)
    logits = (torch.randn(rows, vocab, device="cuda", generator=g) * 4).to(torch.bfloat16)
    keys = token_keys(torch.randint(-2**31, 2**31, (rows,), device="cuda", dtype=torch.int32, generator=g),
                      torch.arange(rows, device="cuda"))
    params = SamplingParams(temperature=temperature)
    tok, lp = fused_sampling.sample_plain(logits, scoring_temperature(temperature), keys if temperature > 0 else None)
    ref_tok, ref_lp = sample_torch(logits, params, keys if temperature > 0 else None)
    agree = (tok == ref_tok).float().mean().item()
    assert agree >= (0.97 if rows > 100 else 1.0)
    same = tok == ref_tok
    torch.testing.assert_close(lp[same], ref_lp[same], atol=1e-4, rtol=0)
    if temperature > 0:  # a row that differs had its draw within rounding of the edge between the two tokens
        scaled = logits.float() / temperature
        cum = torch.exp(scaled - scaled.max(-1, keepdim=True).values).cumsum(-1)  # [B, V]
        target = row_uniform(keys) * cum[:, -1]
        edge = cum.gather(-1, torch.minimum(tok, ref_tok)[:, None])[:, 0]
        assert ((edge - target).abs() <= 1e-5 * cum[:, -1])[~same].all()
    # without top-k/top-p the dispatcher takes the kernel
    assert torch.equal(sample(logits, params, keys)[0], tok)


def test_kernel_under_compile_and_graph():
    logits = torch.randn(64, 151936, device="cuda").to(torch.bfloat16)
    keys = torch.arange(64, device="cuda", dtype=torch.int32)
    params = SamplingParams(temperature=1.0)
    want = sample(logits, params, keys)
    step = torch.compile(lambda x, k: sample(x, params, k))
    got = step(logits, keys)
    assert torch.equal(got[0], want[0])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sample(logits, params, keys)
    graph.replay()
    assert torch.equal(out[0], want[0])
    assert torch.equal(sample(logits[5:12], params, keys[5:12])[0], want[0][5:12])  # a row's token is its own


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_masked_kernel_matches_torch_and_keeps_to_the_mask(temperature):
    from execrl.guided import pack

    g = torch.Generator(device="cuda").manual_seed(7)
    logits = (torch.randn(256, 151936, device="cuda", generator=g) * 4).to(torch.bfloat16)
    allowed = torch.rand(256, 151936, device="cuda", generator=g) < 0.01
    keys = token_keys(torch.arange(256, device="cuda", dtype=torch.int32), torch.zeros(256, device="cuda"))
    params = SamplingParams(temperature=temperature)
    tok, lp = sample(logits, params, keys if temperature > 0 else None, pack(allowed))
    assert allowed[torch.arange(256, device="cuda"), tok].all()
    ref_tok, ref_lp = sample_torch(logits.masked_fill(~allowed, float("-inf")), params,
                                   keys if temperature > 0 else None)
    same = tok == ref_tok
    assert same.float().mean().item() >= 0.99
    torch.testing.assert_close(lp[same], ref_lp[same], atol=1e-4, rtol=0)
