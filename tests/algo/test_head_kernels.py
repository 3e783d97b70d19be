"""The LM head's one-pass Triton kernels (algo/head_kernels.py) give the compiled torch ops' numbers, and the chunked
logprobs with them (and the fp32 weight-gradient GEMM) match a float64 computation. On a GPU; on a CPU with
Triton's interpreter: TRITON_INTERPRET=1 pytest -o addopts="" -m gpu tests/algo/test_head_kernels.py."""

import os

import pytest
import torch

from execrl.algo import head_kernels, logprobs

pytestmark = pytest.mark.gpu
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _kernels_here():
    if head_kernels.triton is None or (DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1"):
        pytest.skip("needs Triton on a GPU, or TRITON_INTERPRET=1")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("shape", [(37, 5003), (4, 1024)])
def test_statistics_and_gradient_equal_the_torch_ops(shape, temperature):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    logits = (torch.randn(shape, generator=g, device=DEVICE) * 4).to(torch.bfloat16)
    targets = torch.randint(0, shape[1], (shape[0],), generator=g, device=DEVICE)
    upstream = torch.randn(shape[0], generator=g, device=DEVICE)
    want = logprobs._stats(logits, targets, temperature)
    got = head_kernels.stats(logits, targets, temperature)
    for a, b in zip(got, want):  # log-sum-exp, the target's logprob, the entropy
        torch.testing.assert_close(a, b, rtol=1e-5, atol=5e-5)
    want_grad = logprobs._grad(logits, want[0], targets, upstream, temperature)
    got_grad = head_kernels.grad(logits, want[0], targets, upstream, temperature)
    assert got_grad.dtype == torch.bfloat16
    torch.testing.assert_close(got_grad.float(), want_grad.float(), rtol=1e-2, atol=1e-4)  # a bf16 rounding apart


def test_chunked_logprobs_on_the_kernels_match_float64():
    """Through token_logprobs_from_hidden in bf16 (several chunks: the weight's gradient accumulated in fp32), against
    the same math in float64 on the same bf16 inputs: as close as the compiled path, or closer."""
    g = torch.Generator(device=DEVICE).manual_seed(1)
    h = (torch.randn(40, 32, generator=g, device=DEVICE)).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(3001, 32, generator=g, device=DEVICE) * 0.3).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 3001, (40,), generator=g, device=DEVICE)
    up = torch.randn(40, generator=g, device=DEVICE)

    def run():
        logp, entropy = logprobs.token_logprobs_from_hidden(h, w, t, 0.8, rows=16)
        (logp * up).sum().backward()
        out = (logp, entropy, h.grad.double(), w.grad.double())
        h.grad = w.grad = None
        return out

    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.log_softmax((hd @ wd.T) / 0.8, -1)
    (ref.gather(-1, t[:, None])[:, 0] * up.double()).sum().backward()
    rounded = torch.log_softmax((h @ w.T).double() / 0.8, -1)  # the logits as the chunks compute them, in bf16
    ref_logp, ref_entropy = rounded.gather(-1, t[:, None])[:, 0].detach(), -(rounded.exp() * rounded).sum(-1).detach()
    new = run()
    logprobs.ONE_PASS = False
    try:
        old = run()
    finally:
        logprobs.ONE_PASS = True
    for got in (new, old):
        torch.testing.assert_close(got[0].double(), ref_logp, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1].double(), ref_entropy, rtol=1e-5, atol=1e-5)
    for i, ref_grad in ((2, hd.grad), (3, wd.grad)):  # bf16 gradients: within a few bf16 roundings
        assert (new[i] - ref_grad).abs().max() <= 1.01 * (old[i] - ref_grad).abs().max() + 1e-3


def test_a_guided_mask_or_a_filter_keeps_the_compiled_path():
    assert logprobs._kernel(logprobs._stats, True) is head_kernels.stats
    assert logprobs._kernel(logprobs._grad, True) is head_kernels.grad
    mask = torch.zeros(2, 1, dtype=torch.int32)
    assert logprobs._kernel(logprobs._stats, True, mask) is not head_kernels.stats
    assert logprobs._kernel(logprobs._grad, True, None, (5, 1.0)) is not head_kernels.grad
