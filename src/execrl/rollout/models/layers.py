"""The pieces every architecture's decoder layer is built from, as the engine runs them: norms, rotary
embeddings, gated MLPs and causal masks (with a sliding window). Pure functions of tensors and a
transformers module's weights.

Shapes: B batch, T positions, heads H, head dim D, R rotary dims (R <= D: partial rotary rotates the
first R), I intermediate size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """A transformers RMSNorm (weight w, y = x / rms(x) * w) as one fused op (its own code is seven
    kernels in decode)."""
    eps = getattr(module, "variance_epsilon", None) or getattr(module, "eps", 1e-6)
    return F.rms_norm(x, module.weight.shape, module.weight, eps)


def offset_rms_norm(module, x: torch.Tensor) -> torch.Tensor:
    """Gemma's RMSNorm: y = x / rms(x) * (1 + w), computed in float32 and cast back as transformers
    does."""
    y = F.rms_norm(x.float(), module.weight.shape, None, module.eps)
    return (y * (1.0 + module.weight.float())).type_as(x)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as transformers applies it (halves rotated) to the first R dims of x [B, H,
    T, D]; cos/sin [B, 1, T, R] (R < D: partial rotary, the rest passes through). Tables in float32
    (OLMo 2's) rotate in float32, and the result is cast back to x's dtype, as transformers does."""
    r = cos.shape[-1]
    if r != x.shape[-1]:
        return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    half = r // 2
    return (x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin).type_as(x)


def gated(act):
    """act(gate) * up from the joined [..., 2I] gate/up output -> [..., I] (SwiGLU with SiLU,
    GeGLU with GELU)."""
    def glu(gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, -1)
        return act(gate) * up
    return glu


def causal_mask(t: int, sliding: int | None, device) -> torch.Tensor | None:
    """[T, T] True where query i sees key j: j <= i, and i - j < sliding with a window (None: plain
    causal, left to the kernel's is_causal)."""
    if sliding is None or sliding >= t:
        return None
    i = torch.arange(t, device=device)
    d = i[:, None] - i[None]
    return (d >= 0) & (d < sliding)
