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


def sliding_window(cfg, i: int) -> int | None:
    """Layer i's window as a transformers config sets it (a key is seen while query - key < window),
    or None (full attention): by its layer_types where it has them, else its sliding_window (unless
    use_sliding_window is off)."""
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return cfg.sliding_window if types[i] == "sliding_attention" else None
    return getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", True) else None


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


def route(x: torch.Tensor, router: torch.Tensor, top_k: int, normalize: bool,
          weights_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's top-k experts by softmax(router logits) in float32, as transformers' routers
    pick them: x [N, d], router [E, d] -> (weights [N, k], experts [N, k]); the weights renormalized
    to sum 1 where `normalize`, in `weights_dtype` (None: x's)."""
    probs = F.linear(x, router).float().softmax(-1)  # [N, E]
    weight, expert = probs.topk(top_k, -1)
    if normalize:
        weight = weight / weight.sum(-1, keepdim=True)
    return weight.to(weights_dtype or x.dtype), expert


def experts_one_by_one(x, weight, expert, gate_up, down, act) -> torch.Tensor:
    """The routed tokens of each expert in turn (CPU, and the reference): x [N, d], weight and
    expert [N, k], gate_up [E, 2I, d], down [E, d, I] -> [N, d]."""
    glu, out = gated(act), torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(gate_up.shape[0]):
        rows, slot = (expert == e).nonzero(as_tuple=True)
        if rows.numel():
            y = F.linear(glu(F.linear(x[rows], gate_up[e])), down[e]) * weight[rows, slot, None]
            out.index_add_(0, rows, y.float())
    return out.to(x.dtype)  # (a token's k terms summed in fp32 and rounded once, as transformers' experts: summed in
    # bf16, a third to a half of a block's outputs differed in bf16, up to 2.4 nats in a token's logprob)


def experts_grouped(x, weight, expert, gate_up, down, act) -> torch.Tensor:
    """The same as two grouped GEMMs (a GPU's bf16 path): the (token, expert) pairs sorted by expert,
    each expert's rows one group. Static shapes, no host sync: CUDA-graph safe."""
    n, k = expert.shape
    flat = expert.reshape(-1)  # [N k]
    order = flat.argsort(stable=True)
    rows = order // k  # the token of each sorted pair
    counts = torch.zeros(gate_up.shape[0], dtype=torch.int64, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat))
    ends = counts.cumsum(0).to(torch.int32)  # [E]: where each expert's rows end
    h = torch._grouped_mm(x[rows], gate_up.transpose(-2, -1), offs=ends)  # [N k, 2I]
    y = torch._grouped_mm(gated(act)(h), down.transpose(-2, -1), offs=ends)  # [N k, d]
    y = y * weight.reshape(-1)[order, None]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, rows, y.float())
    return out.to(x.dtype)  # (summed in fp32, rounded once: experts_one_by_one)


def experts_masked(x, weight, expert, gate_up, down, act) -> torch.Tensor:
    """The same with every expert on every token, weighted by its routing weight (0 where not
    routed): E times the work, but static shapes with no grouped GEMM (a GPU in float32, where CUDA
    graphs cannot take the one-by-one loop's data-dependent rows)."""
    glu, out = gated(act), torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(gate_up.shape[0]):
        w = (weight * (expert == e)).sum(-1, keepdim=True)  # [N, 1]
        out = out + (F.linear(glu(F.linear(x, gate_up[e])), down[e]) * w).float()
    return out.to(x.dtype)  # (summed in fp32, rounded once: experts_one_by_one)


def routed_experts(x: torch.Tensor, router: torch.Tensor, top_k: int, normalize: bool, gate_up: torch.Tensor,
                   down: torch.Tensor, act, weights_dtype: torch.dtype | None = None) -> torch.Tensor:
    """A mixture-of-experts MLP as transformers' sparse blocks compute it: route, then each token's
    experts (gated MLPs) summed by weight. x [N, d] -> [N, d]; grouped GEMMs on a GPU in bf16 (every
    expert masked in other dtypes there), one expert at a time elsewhere."""
    weight, expert = route(x, router, top_k, normalize, weights_dtype)
    if not x.is_cuda:
        run = experts_one_by_one
    elif x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm"):
        run = experts_grouped
    else:
        run = experts_masked
    return run(x, weight, expert, gate_up, down, act)
