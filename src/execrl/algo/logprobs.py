"""Log-probabilities of chosen tokens from hidden states, without materializing the [tokens, vocab] fp32 logits.

The LM head is applied chunk by chunk; each chunk's logits live only inside the loop (forward) and are recomputed
in backward, so peak memory is one chunk of logits instead of the whole batch's (8 x 1024 tokens x 152K vocab in
fp32 is 5 GB). Logits are divided by the sampling temperature, so these are the probabilities the sampler used.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 2**28  # fp32 logits per chunk: 1 GiB


def chunk_rows(vocab: int) -> int:
    return max(128, CHUNK_ELEMENTS // vocab)


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, rows: int):
        # hidden [N, d], weight [V, d], targets [N] -> logprobs [N] (fp32), entropy [N] (fp32, no gradient)
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logp)
        lse = torch.empty_like(logp)
        for i in range(0, n, rows):
            logits = (hidden[i:i + rows] @ weight.T).float() / temperature  # [c, V]
            lse[i:i + rows] = torch.logsumexp(logits, -1)
            logp[i:i + rows] = logits.gather(-1, targets[i:i + rows, None])[:, 0] - lse[i:i + rows]
            probs = torch.softmax(logits, -1)
            entropy[i:i + rows] = lse[i:i + rows] - (probs * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, targets, lse = ctx.saved_tensors
        t, rows = ctx.temperature, ctx.rows
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:  # accumulated over chunks in fp32 when there are several
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32 if hidden.shape[0] > rows else weight.dtype,
                                      device=weight.device)
        for i in range(0, hidden.shape[0], rows):
            h, g = hidden[i:i + rows], grad_logp[i:i + rows]  # [c, d], [c]
            logits = (h @ weight.T).float() / t  # [c, V]
            # d logp / d logits = onehot(target) - softmax; the temperature divides once more
            grad = torch.exp(logits - lse[i:i + rows, None]).mul_(-g[:, None])
            grad.scatter_add_(-1, targets[i:i + rows, None], g[:, None])
            grad = grad.div_(t).to(hidden.dtype)  # [c, V]
            if grad_hidden is not None:
                grad_hidden[i:i + rows] = grad @ weight
            if grad_weight is not None:
                grad_weight += (grad.T @ h).to(grad_weight.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def token_logprobs_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               temperature: float = 1.0, rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [N, d] (the final-norm output), weight [V, d] (the LM head), targets [N] ->
    (log softmax(h W^T / temperature)[target] [N], entropy of that distribution [N]); fp32, gradient to the first."""
    return _TokenLogprobs.apply(hidden, weight, targets, float(temperature), rows or chunk_rows(weight.shape[0]))
