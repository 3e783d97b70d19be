"""Log-probabilities of chosen tokens from hidden states, without materializing the [tokens, vocab]
fp32 logits.

The LM head is applied chunk by chunk; each chunk's logits live only inside the loop (forward) and
are recomputed in backward, so peak memory is one chunk of logits instead of the whole batch's (8 x
1024 tokens x 152K vocab in fp32 is 5 GB). The per-chunk math (log-sum-exp, entropy, gradient) runs
on GPUs as one-pass Triton kernels (head_kernels), or compiled into fused kernels where a guided-
decoding mask or a top-k/top-p filter applies, so each chunk's logits are read once or a few times
instead of once per operation. Logits are divided by the sampling temperature, so these are the
probabilities the sampler used.
"""

from __future__ import annotations

import torch

from execrl.algo import head_kernels
from execrl.compiling import compile_settings
from execrl.guided import restrict

CHUNK_ELEMENTS = 2**28  # logits per chunk
ONE_PASS = True  # head_kernels on GPUs where they apply (False: the compiled torch ops, for the benchmarks)


def chunk_rows(vocab: int) -> int:
    return max(128, CHUNK_ELEMENTS // vocab)


def top_k_top_p(scaled: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """The sampler's filter: scaled logits [B, V] -> the same with -inf outside the top_k likeliest
    (ties kept) and then outside the nucleus (dropped: the least likely tokens that together hold at
    most 1 - top_p of the mass; the likeliest always stays), as vLLM and NeMo RL filter, summed as
    they sum it: from the least likely up, so that a long tail's small masses add up in float32 (summed
    from the likeliest down, 151,936 tokens' tail was cut a few tokens off the exact nucleus in most
    rows, a hunt's find). top_k None and top_p 1: unchanged."""
    kept = scaled
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]  # [B, 1]
        kept = kept.masked_fill(kept < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(kept, dim=-1)  # [B, V], the least likely first
        out = torch.cumsum(torch.softmax(ordered, -1), -1) <= 1 - top_p  # [B, V]
        out[:, -1] = False  # (the likeliest: a top_p under float32's smallest, 1e-300, dropped every token)
        ordered = ordered.masked_fill(out, float("-inf"))
        kept = torch.full_like(kept, float("-inf")).scatter(-1, order, ordered)
    return kept


def _scaled(logits: torch.Tensor, temperature: float, allowed: torch.Tensor | None,
            top: tuple[int | None, float] | None = None) -> torch.Tensor:
    """logits [c, V] / temperature in fp32, -inf where the allowed bitmask [c, W] (guided decoding)
    has no bit and, with top = (top_k, top_p), outside the sampler's filter."""
    z = logits.float() / temperature
    z = z if allowed is None else restrict(z, allowed)
    return z if top is None else top_k_top_p(z, *top)


def _stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float, allowed: torch.Tensor | None = None,
           top: tuple[int | None, float] | None = None):
    """logits [c, V], allowed [c, W] or None -> log-sum-exp [c], logprob of the target [c], entropy
    [c] (fp32), of the distribution restricted to the allowed tokens (and filtered by top = (top_k,
    top_p))."""
    z = _scaled(logits, temperature, allowed, top)
    lse = torch.logsumexp(z, -1)
    picked = z.gather(-1, targets[:, None])[:, 0] - lse
    entropy = lse - (torch.exp(z - lse[:, None]) * z.clamp_min(torch.finfo(z.dtype).min)).sum(-1)  # (0 * -inf: 0)
    return lse, picked, entropy


def _grad(logits: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, grad_out: torch.Tensor,
          temperature: float, allowed: torch.Tensor | None = None, top: tuple[int | None, float] | None = None):
    """d(sum g * logprob)/d logits: (onehot(target) - softmax) * g / temperature, in the logits'
    dtype [c, V] (0 for the tokens a filter removed: their softmax is 0 and they are never the
    target)."""
    z = _scaled(logits, temperature, allowed, top)
    onehot = torch.arange(z.shape[-1], device=z.device)[None] == targets[:, None]
    return ((onehot.float() - torch.exp(z - lse[:, None])) * (grad_out / temperature)[:, None]).to(logits.dtype)


_fused: dict = {}


def _kernel(fn, cuda: bool, allowed: torch.Tensor | None = None, top=None):
    """_stats or _grad as it runs here: on a GPU without a mask or filter, head_kernels' one-pass Triton
    kernel; otherwise the function compiled (on GPUs, once per process) or as written (CPU; or when
    compilation is unavailable). Compiled generic in the rows (every chunk's count, the last one's too),
    with the vocabulary's size a constant: its index math then divides by a constant (6-7% faster
    forward and backward of the LM head than with every dimension a symbol: bench/trainer_parts.py)."""
    if not cuda:
        return fn
    if ONE_PASS and head_kernels.triton is not None and allowed is None and top is None:
        return head_kernels.stats if fn is _stats else head_kernels.grad
    if fn not in _fused:
        compile_settings()
        compiled = torch.compile(fn)

        def run(*args):
            from torch._dynamo import maybe_mark_dynamic

            for a in args:
                if isinstance(a, torch.Tensor):
                    maybe_mark_dynamic(a, 0)
            try:
                return compiled(*args)
            except Exception:  # noqa: BLE001 - no working compiler here: the eager function gives the same numbers
                _fused[fn] = fn
                return fn(*args)

        _fused[fn] = run
    return _fused[fn]


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, rows: int, allowed, top):
        # hidden [N, d], weight [V, d], targets [N], allowed [N, W] or None -> logprobs [N] (fp32),
        # entropy [N] (fp32, no gradient)
        n = hidden.shape[0]
        lse, logp, entropy = (torch.empty(n, dtype=torch.float32, device=hidden.device) for _ in range(3))
        stats = _kernel(_stats, hidden.is_cuda, allowed, top)
        for i in range(0, n, rows):
            lse[i:i + rows], logp[i:i + rows], entropy[i:i + rows] = stats(
                hidden[i:i + rows] @ weight.T, targets[i:i + rows], temperature,
                None if allowed is None else allowed[i:i + rows], top)
        ctx.save_for_backward(hidden, weight, targets, lse, allowed)
        ctx.temperature, ctx.rows, ctx.top = temperature, rows, top
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, targets, lse, allowed = ctx.saved_tensors
        rows, grad_of = ctx.rows, _kernel(_grad, hidden.is_cuda, allowed, ctx.top)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:  # accumulated over chunks in fp32 when there are several
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32 if hidden.shape[0] > rows else weight.dtype,
                                      device=weight.device)
        for i in range(0, hidden.shape[0], rows):
            h = hidden[i:i + rows]  # [c, d]
            grad = grad_of(h @ weight.T, lse[i:i + rows], targets[i:i + rows], grad_logp[i:i + rows].float(),
                           ctx.temperature, None if allowed is None else allowed[i:i + rows], ctx.top)  # [c, V]
            if grad_hidden is not None:
                grad_hidden[i:i + rows] = grad @ weight
            if grad_weight is not None:
                _accumulate(grad_weight, grad.T, h)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def _accumulate(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """total [m, n] += a [m, k] @ b [k, n]. An fp32 total of bf16 factors on a GPU: one GEMM that
    accumulates in fp32 and adds into it, instead of the product rounded to bf16, cast and added (one
    kernel fewer, no bf16 rounding of each chunk's product; the LM head's forward and backward over a
    0.5B GRPO batch 48.6 -> 45.7 ms on an H200: bench/trainer_parts.py)."""
    if total.is_cuda and total.dtype == torch.float32 and a.dtype != total.dtype:
        torch.addmm(total, a, b, out_dtype=torch.float32, out=total)
    else:
        total += (a @ b).to(total.dtype)


def token_logprobs_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               temperature: float = 1.0, rows: int | None = None, allowed: torch.Tensor | None = None,
                               top: tuple[int | None, float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [N, d] (the final-norm output), weight [V, d] (the LM head), targets [N], allowed [N,
    W] int32 bitmasks (guided decoding: the tokens the sampler could take; None: all), top (top_k,
    top_p): the sampler's filter (None: none) -> (log softmax(h W^T / temperature)[target] over the
    allowed, kept tokens [N], entropy of that distribution [N]); fp32, gradient to the first."""
    return _TokenLogprobs.apply(hidden, weight, targets, float(temperature), rows or chunk_rows(weight.shape[0]),
                                allowed, top)
